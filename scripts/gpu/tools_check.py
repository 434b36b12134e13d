#!/usr/bin/env python3
"""tools_check.py — bench and diagnose on the GPU machine's CUDA path (GPU machine).

Builds a small random Qwen3 target (real 151936-row vocabulary, widths the CUDA fast path supports) and a
random DFlash draft in bf16, adds the Qwen3 tokenizer files, then runs `specpress bench` on a few GSM8K
prompts on the fast path and on the reference path, and `specpress diagnose` with an HTML report.
Prints one JSON summary line.

Usage: python3 scripts/gpu/tools_check.py --specpress build-gpu/bin/specpress --shared .gpu-shared --work /tmp/tc --out $OUT
"""
import argparse, json, os, shutil, subprocess, sys
import torch
from safetensors.torch import save_file

V, H, I, L, NH, NKV, HD = 151936, 256, 512, 4, 4, 2, 64


def layer(prefix, g):
    w = lambda *s: (torch.randn(*s, generator=g) * 0.05).to(torch.bfloat16)
    one = lambda n: torch.ones(n, dtype=torch.bfloat16)
    return {prefix + "input_layernorm.weight": one(H), prefix + "post_attention_layernorm.weight": one(H),
            prefix + "self_attn.q_proj.weight": w(NH * HD, H), prefix + "self_attn.k_proj.weight": w(NKV * HD, H),
            prefix + "self_attn.v_proj.weight": w(NKV * HD, H), prefix + "self_attn.o_proj.weight": w(H, NH * HD),
            prefix + "self_attn.q_norm.weight": one(HD), prefix + "self_attn.k_norm.weight": one(HD),
            prefix + "mlp.gate_proj.weight": w(I, H), prefix + "mlp.up_proj.weight": w(I, H),
            prefix + "mlp.down_proj.weight": w(H, I)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--specpress", required=True)
    ap.add_argument("--shared", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)  # bench and diagnose write their reports there (and refuse a missing directory)
    g = torch.Generator().manual_seed(0)
    cfg = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": V, "hidden_size": H,
           "intermediate_size": I, "num_hidden_layers": L, "num_attention_heads": NH, "num_key_value_heads": NKV,
           "head_dim": HD, "rms_norm_eps": 1e-6, "rope_theta": 1e6, "max_position_embeddings": 4096,
           "tie_word_embeddings": True, "torch_dtype": "bfloat16", "eos_token_id": 151645}
    t = {"model.embed_tokens.weight": torch.randn(V, H, generator=g).to(torch.bfloat16),
         "model.norm.weight": torch.ones(H, dtype=torch.bfloat16)}
    for i in range(L):
        t |= layer(f"model.layers.{i}.", g)
    td, dd = os.path.join(a.work, "target"), os.path.join(a.work, "draft")
    os.makedirs(td, exist_ok=True), os.makedirs(dd, exist_ok=True)
    save_file(t, os.path.join(td, "model.safetensors"))
    json.dump(cfg, open(os.path.join(td, "config.json"), "w"))
    for f in ["tokenizer.json", "tokenizer_config.json", "generation_config.json"]:
        shutil.copy(os.path.join(a.shared, "data/qwen3-tokenizer", f), td)
    d = {"fc.weight": (torch.randn(H, 2 * H, generator=g) * 0.05).to(torch.bfloat16),
         "hidden_norm.weight": torch.ones(H, dtype=torch.bfloat16), "norm.weight": torch.ones(H, dtype=torch.bfloat16)}
    for i in range(2):
        d |= layer(f"layers.{i}.", g)
    save_file(d, os.path.join(dd, "model.safetensors"))
    json.dump(cfg | {"num_hidden_layers": 2, "block_size": 8, "num_target_layers": L,
                     "dflash_config": {"target_layer_ids": [1, 2], "mask_token_id": 151669}},
              open(os.path.join(dd, "config.json"), "w"))
    data = os.path.join(a.shared, "data/gsm8k_test.jsonl")
    summary = {}
    for mode in ["fast", "reference"]:
        out = os.path.join(a.out, f"bench_{mode}.json")
        cmd = [a.specpress, "bench", "-m", td, "-md", dd, "--dataset", "gsm8k", "--data", data, "--max-samples", "3",
               "--max-new-tokens", "48", "--device", "cuda", "--dtype", "bf16", "--no-progress", "--json", out]
        if mode == "reference":
            cmd.append("--reference-path")
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            print(r.stderr[-3000:], file=sys.stderr)
            raise SystemExit(f"bench ({mode}) failed")
        j = json.load(open(out))
        s = j["summary"]
        summary[mode] = {"path": j["path"], "tau": s["tau"], "speedup": s["speedup"], "identical_outputs": s["identical_outputs"],
                         "plain_tpot_ms": s["plain_tpot_ms"], "dflash_tpot_ms": s["dflash_tpot_ms"]}
    r = subprocess.run([a.specpress, "diagnose", "-m", td, "-md", dd, "--dataset", "gsm8k", "--data", data,
                        "--max-samples", "2", "--max-new-tokens", "24", "--device", "cuda", "--dtype", "bf16",
                        "--no-progress", "--html", os.path.join(a.out, "diagnose.html")], capture_output=True, text=True)
    summary["diagnose_exit"] = r.returncode
    if r.returncode != 0:
        print(r.stderr[-3000:], file=sys.stderr)
    line = json.dumps(summary)
    print(line)
    open(os.path.join(a.out, "tools_check.json"), "w").write(line + "\n")


if __name__ == "__main__":
    main()
