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
    # a second draft (other weights, block 4) for the multi-draft + checkpoint run
    g2 = torch.Generator().manual_seed(1)
    d2 = {"fc.weight": (torch.randn(H, 2 * H, generator=g2) * 0.05).to(torch.bfloat16),
          "hidden_norm.weight": torch.ones(H, dtype=torch.bfloat16), "norm.weight": torch.ones(H, dtype=torch.bfloat16)}
    for i in range(2):
        d2 |= layer(f"layers.{i}.", g2)
    dd2 = os.path.join(a.work, "draft2")
    os.makedirs(dd2, exist_ok=True)
    save_file(d2, os.path.join(dd2, "model.safetensors"))
    json.dump(cfg | {"num_hidden_layers": 2, "block_size": 4, "num_target_layers": L,
                     "dflash_config": {"target_layer_ids": [1, 2], "mask_token_id": 151669}},
              open(os.path.join(dd2, "config.json"), "w"))
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
    summary["checkpoint"] = checkpoint_run(a, td, dd, dd2, data, os.path.join(a.out, "bench_fast.json"))
    r = subprocess.run([a.specpress, "diagnose", "-m", td, "-md", dd, "--dataset", "gsm8k", "--data", data,
                        "--max-samples", "2", "--max-new-tokens", "24", "--device", "cuda", "--dtype", "bf16",
                        "--no-progress", "--html", os.path.join(a.out, "diagnose.html")], capture_output=True, text=True)
    summary["diagnose_exit"] = r.returncode
    if r.returncode != 0:
        print(r.stderr[-3000:], file=sys.stderr)
    line = json.dumps(summary)
    print(line)
    open(os.path.join(a.out, "tools_check.json"), "w").write(line + "\n")


def checkpoint_run(a, td, dd, dd2, data, fast_json):
    """bench -md A,B --checkpoint on 2 samples, then --resume on 3: the resumed run decodes only the third sample
    of each draft, the reused records come back unchanged, and draft A's records equal the plain fast bench's."""
    ckpt = os.path.join(a.work, "bench.ckpt")
    if os.path.exists(ckpt):
        os.remove(ckpt)
    base = [a.specpress, "bench", "-m", td, "-md", dd + "," + dd2, "--dataset", "gsm8k", "--data", data,
            "--max-new-tokens", "48", "--device", "cuda", "--dtype", "bf16", "--no-progress", "--checkpoint", ckpt]
    reports = []
    for n, extra in [(2, []), (3, ["--resume"])]:
        out = os.path.join(a.out, f"bench_checkpoint_{n}.json")
        r = subprocess.run(base + ["--max-samples", str(n), "--json", out] + extra, capture_output=True, text=True)
        if r.returncode != 0:
            print(r.stderr[-3000:], file=sys.stderr)
            raise SystemExit(f"bench --checkpoint ({n} samples{' --resume' if extra else ''}) failed")
        reports.append((json.load(open(out)), r.stderr))
    (first, _), (resumed, err) = reports
    fast = json.load(open(fast_json))["records"]  # one run's report: its records at the top
    ok = "bench: reused 4 of the 4 records" in err
    for i, (x, y) in enumerate(zip(first["datasets"], resumed["datasets"])):
        ok &= y["resumed_records"] == 2 and len(y["records"]) == 3
        ok &= y["summary"]["identical_outputs"] == 1.0 and y["block_size"] == (8 if i == 0 else 4)
        for k in range(2):
            ok &= y["records"][k].get("resumed", False) and y["records"][k]["dflash"] == x["records"][k]["dflash"]
        ok &= not y["records"][2].get("resumed", False)
    ok &= all(r["dflash"]["acceptance_lengths"] == f["dflash"]["acceptance_lengths"] and r["outputs_equal"] and
              r["dflash"]["output_tokens"] == f["dflash"]["output_tokens"]
              for r, f in zip(resumed["datasets"][0]["records"], fast))
    ok &= resumed["datasets"][1].get("plain_reused_records", 0) >= 1  # the third sample's plain decoding
    return {"ok": bool(ok), "build": resumed["build"], "device": resumed["device"],
            "reused_line": [l for l in err.splitlines() if "reused" in l],
            "tau": [d["summary"]["tau"] for d in resumed["datasets"]],
            "plain_reused_records": [d.get("plain_reused_records", 0) for d in resumed["datasets"]]}


if __name__ == "__main__":
    main()
