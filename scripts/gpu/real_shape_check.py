#!/usr/bin/env python3
"""real_shape_check.py — specpress vs Hugging Face transformers at the real Qwen3 shapes (GPU machine).

Creates a random-weight Qwen3 checkpoint with the Qwen3-4B (or 8B) architecture using transformers
(bf16 on disk, sharded, tied embeddings as the real 4B), then:
  1. target parity: HF (CUDA, float32) and `specpress dump` (CUDA, float32) on the same ids ->
     max relative logit error (max |diff| / max |HF logit|) and greedy agreement over 64 tokens
     (`specpress generate --temp 0` vs HF `generate(do_sample=False)`);
  2. DFlash loop end to end: a random DFlash draft with the published 4B/8B draft shapes (5 layers, block 16,
     taps [1, 9, 17, 25, 33], mask 151669) in bf16 on CUDA; speculative output vs specpress's own greedy
     output for several prompts; where they differ, the target's top-2 logit margin at that position.
Prints one JSON summary line and writes it to --out.

Usage (GPU machine, from the repo root after building with CUDA):
  python3 scripts/gpu/real_shape_check.py --specpress build/bin/specpress --work /tmp/rs --shape 4B --out $OUT/real_shape.json
"""
import argparse
import json
import os
import subprocess
import sys
import time

import torch
from safetensors.torch import save_file
from transformers import Qwen3Config, Qwen3ForCausalLM

SHAPES = {
    # Qwen/Qwen3-4B and Qwen/Qwen3-8B config.json values (architecture only).
    "4B": dict(hidden_size=2560, intermediate_size=9728, num_hidden_layers=36, num_attention_heads=32,
               num_key_value_heads=8, head_dim=128, tie_word_embeddings=True),
    "8B": dict(hidden_size=4096, intermediate_size=12288, num_hidden_layers=36, num_attention_heads=32,
               num_key_value_heads=8, head_dim=128, tie_word_embeddings=False),
}
COMMON = dict(vocab_size=151936, rms_norm_eps=1e-6, max_position_embeddings=40960,
              hidden_act="silu", attention_bias=False, bos_token_id=151643, eos_token_id=151645)
import transformers
if int(transformers.__version__.split(".")[0]) >= 5:
    COMMON["rope_parameters"] = {"rope_type": "default", "rope_theta": 1000000.0}
else:
    COMMON["rope_theta"] = 1000000.0


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def run(cmd):
    t = time.time()
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"command failed ({res.returncode}): {' '.join(cmd)}\n{res.stderr[-4000:]}")
    log(f"{os.path.basename(cmd[0])} {cmd[1]} took {time.time() - t:.1f}s")
    return res


def make_target(work, shape, seed):
    cfg = Qwen3Config(**SHAPES[shape], **COMMON)
    torch.manual_seed(seed)
    with torch.device("cuda"):
        model = Qwen3ForCausalLM(cfg)
    model.eval()
    # The checkpoint is bf16; the HF reference runs in float32 on exactly those values. Only the
    # parameters are rounded: model.to(bfloat16) would also round the RoPE inv_freq buffer, which
    # real checkpoints never store, and make HF's own reference inexact.
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).float())
    state = {k: v.to(torch.bfloat16) for k, v in model.state_dict().items()}
    model.save_pretrained(os.path.join(work, "target"), state_dict=state, max_shard_size="2GB")
    return model, cfg


def make_draft(work, cfg, seed):
    H, hd = cfg.hidden_size, cfg.head_dim
    q, kv, inter, layers, taps = 32 * hd, 8 * hd, cfg.intermediate_size, 5, [1, 9, 17, 25, 33]
    g = torch.Generator().manual_seed(seed)
    def w(*s, std=0.02):
        return (torch.randn(*s, generator=g) * std).to(torch.bfloat16)
    t = {"fc.weight": w(H, len(taps) * H), "hidden_norm.weight": torch.ones(H, dtype=torch.bfloat16),
         "norm.weight": torch.ones(H, dtype=torch.bfloat16)}
    for i in range(layers):
        p = f"layers.{i}."
        t |= {p + "input_layernorm.weight": torch.ones(H, dtype=torch.bfloat16),
              p + "post_attention_layernorm.weight": torch.ones(H, dtype=torch.bfloat16),
              p + "self_attn.q_proj.weight": w(q, H), p + "self_attn.k_proj.weight": w(kv, H),
              p + "self_attn.v_proj.weight": w(kv, H), p + "self_attn.o_proj.weight": w(H, q),
              p + "self_attn.q_norm.weight": torch.ones(hd, dtype=torch.bfloat16),
              p + "self_attn.k_norm.weight": torch.ones(hd, dtype=torch.bfloat16),
              p + "mlp.gate_proj.weight": w(inter, H), p + "mlp.up_proj.weight": w(inter, H),
              p + "mlp.down_proj.weight": w(H, inter)}
    d = os.path.join(work, "draft")
    os.makedirs(d, exist_ok=True)
    save_file(t, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    conf = {"architectures": ["DFlashDraftModel"], "model_type": "qwen3", "hidden_size": H,
            "intermediate_size": inter, "num_hidden_layers": layers, "num_attention_heads": 32,
            "num_key_value_heads": 8, "head_dim": hd, "vocab_size": cfg.vocab_size, "rms_norm_eps": 1e-6,
            "rope_theta": 1000000.0, "max_position_embeddings": 40960, "hidden_act": "silu",
            "attention_bias": False, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
            "block_size": 16, "num_target_layers": 36,
            "dflash_config": {"target_layer_ids": taps, "mask_token_id": 151669}}
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(conf, f, indent=2)
    return d


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--specpress", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--shape", default="4B", choices=sorted(SHAPES))
    ap.add_argument("--out", required=True)
    ap.add_argument("--prompts", type=int, default=4)
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    summary = {"shape": args.shape, "torch": torch.__version__, "device": torch.cuda.get_device_name()}

    log("creating the random target")
    hf, cfg = make_target(args.work, args.shape, seed=0)
    target_dir = os.path.join(args.work, "target")
    summary["target_files"] = sorted(os.listdir(target_dir))
    with open(os.path.join(target_dir, "model.safetensors.index.json")) as f:
        summary["target_tensor_count"] = len(json.load(f)["weight_map"])
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 151000, (32,), generator=g).tolist()

    # 1a. logits parity, float32
    with torch.no_grad():
        hf_out = hf(torch.tensor([ids], device="cuda"), output_hidden_states=True)
    ref = hf_out.logits[0].float().cpu()
    ref_hidden = [h[0].float().cpu() for h in hf_out.hidden_states]
    from safetensors.torch import load_file
    def rel_err(a, b):
        return ((a - b).abs().max() / b.abs().max()).item()
    for dev in ["cuda", "cpu"]:
        dump = os.path.join(args.work, f"dump_{dev}.safetensors")
        run([args.specpress, "dump", "-m", target_dir, "--prompt-ids", ",".join(map(str, ids)), "-o", dump,
             "--device", dev, "--dtype", "f32", "--hidden"])
        d = load_file(dump)
        ours = d["logits"]
        rel = rel_err(ours, ref)
        summary[f"max_rel_logit_error_f32_{dev}"] = rel
        summary[f"argmax_agreement_f32_{dev}"] = (ours.argmax(-1) == ref.argmax(-1)).float().mean().item()
        summary[f"hidden_rel_error_by_layer_{dev}"] = [round(rel_err(d[f"hidden_states.{i}"], ref_hidden[i]), 8)
                                                      for i in range(len(ref_hidden))]
        log(f"{dev}: max relative logit error {rel:.3e}")
    summary["max_rel_logit_error_f32"] = summary["max_rel_logit_error_f32_cuda"]
    summary["logit_abs_max"] = ref.abs().max().item()
    summary["matmul_tf32_python"] = torch.backends.cuda.matmul.allow_tf32

    # 1b. greedy agreement over 64 tokens, float32
    with torch.no_grad():
        out = hf.generate(torch.tensor([ids], device="cuda"), max_new_tokens=64, do_sample=False,
                          eos_token_id=None, pad_token_id=0, min_new_tokens=64)
    hf_tokens = out[0, len(ids):].tolist()
    res = run([args.specpress, "generate", "-m", target_dir, "--prompt-ids", ",".join(map(str, ids)), "-n", "64",
               "--temp", "0", "--ignore-eos", "--device", "cuda", "--dtype", "f32", "--json"])
    sp_tokens = json.loads(res.stdout)["output_ids"]
    agree = 0
    while agree < min(len(hf_tokens), len(sp_tokens)) and hf_tokens[agree] == sp_tokens[agree]:
        agree += 1
    summary["greedy_f32"] = {"hf": hf_tokens, "specpress": sp_tokens, "agreeing_prefix": agree}
    if agree < 64:
        with torch.no_grad():
            lg = hf(torch.tensor([ids + hf_tokens[:agree]], device="cuda")).logits[0, -1].float()
        top = lg.topk(2).values
        summary["greedy_f32"]["margin_at_divergence"] = (top[0] - top[1]).item()
    log(f"greedy agreement over 64 tokens: {agree}")
    del hf
    torch.cuda.empty_cache()

    # 2. DFlash end to end, bf16
    draft_dir = make_draft(args.work, cfg, seed=3)
    loops = []
    for p in range(2 * args.prompts):
        dtype = "bf16" if p < args.prompts else "f32"
        pids = torch.randint(0, 151000, (24 + 8 * (p % args.prompts),), generator=g).tolist()
        common = ["-m", target_dir, "--prompt-ids", ",".join(map(str, pids)), "-n", "48", "--temp", "0",
                  "--ignore-eos", "--device", "cuda", "--dtype", dtype, "--json"]
        plain = json.loads(run([args.specpress, "generate", *common]).stdout)
        spec = json.loads(run([args.specpress, "generate", *common, "-md", draft_dir]).stdout)
        same = plain["output_ids"] == spec["output_ids"]
        rec = {"dtype": dtype, "prompt_len": len(pids), "equal": same, "tau": spec["mean_acceptance_length"],
               "steps": len(spec["acceptance_lengths"]),
               "plain_tpot_ms": plain["timings"]["predicted_per_token_ms"],
               "dflash_tpot_ms": spec["timings"]["predicted_per_token_ms"]}
        if not same:
            k = next(i for i, (a, b) in enumerate(zip(plain["output_ids"], spec["output_ids"])) if a != b)
            rec["first_difference"] = k
            prefix = pids + plain["output_ids"][:k]
            dump = os.path.join(args.work, "margin.safetensors")
            run([args.specpress, "dump", "-m", target_dir, "--prompt-ids", ",".join(map(str, prefix)), "-o", dump,
                 "--device", "cuda", "--dtype", dtype])
            last = load_file(dump)["logits"][-1]
            top = last.topk(2).values
            rec["target_top2_margin_at_difference"] = (top[0] - top[1]).item()
        loops.append(rec)
        log(f"prompt {p} ({dtype}): speculative == greedy: {same}")
    summary["dflash"] = loops
    line = json.dumps(summary)
    print(line)
    with open(args.out, "w") as f:
        f.write(line + "\n")


if __name__ == "__main__":
    main()
