#!/usr/bin/env python3
"""ppl_check.py — `specpress perplexity` against HF transformers on the same ids and rule (GPU machine).

For each model directory: the first GSM8K test questions and answers, tokenized by the Qwen3 tokenizer, cut into
--chunks chunks of --ctx tokens; HF's AutoModelForCausalLM scores the second half of each chunk (llama-perplexity's
rule, as tools/perplexity.h) in float32 and bfloat16 on the GPU; `specpress perplexity --prompt-ids ... --json` does
the same with --device cuda --dtype f32 and bf16. Float32 must agree within 1e-4 relative, bfloat16 within 2e-2
(other kernels, bf16 rounding). Prints one JSON line per model and exits non-zero on a mismatch.

Usage: python3 scripts/gpu/ppl_check.py --specpress build-gpu/bin/specpress --shared .gpu-shared \
           --model demo/target --model /tmp/tc/target [--ctx 128] [--chunks 4]
"""
import argparse, json, math, os, subprocess, sys
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


def hf_ppl(model_dir, ids, ctx, chunks, dtype):
    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=dtype).cuda().eval()
    nlls = []
    with torch.no_grad():
        for c in range(chunks):
            chunk = torch.tensor(ids[c * ctx:(c + 1) * ctx], device="cuda")[None]
            logp = torch.log_softmax(model(input_ids=chunk).logits[0].float(), -1)
            for j in range(ctx // 2, ctx - 1):
                nlls.append(-logp[j, chunk[0, j + 1]].item())
    del model
    torch.cuda.empty_cache()
    return math.exp(sum(nlls) / len(nlls)), len(nlls)


def specpress_ppl(binary, model_dir, ids, ctx, chunks, dtype):
    r = subprocess.run([binary, "perplexity", "-m", model_dir, "--prompt-ids", ",".join(map(str, ids)), "-c", str(ctx),
                        "--chunks", str(chunks), "--device", "cuda", "--dtype", dtype, "--json"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"specpress perplexity failed on {model_dir} ({dtype}):\n{r.stderr}")
    return json.loads(r.stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--specpress", required=True)
    ap.add_argument("--shared", required=True)
    ap.add_argument("--model", action="append", required=True)
    ap.add_argument("--ctx", type=int, default=128)
    ap.add_argument("--chunks", type=int, default=4)
    a = ap.parse_args()
    tok = AutoTokenizer.from_pretrained(os.path.join(a.shared, "data/qwen3-tokenizer"))
    rows = [json.loads(l) for l in open(os.path.join(a.shared, "data/gsm8k_test.jsonl"))][:60]
    ids = tok("\n\n".join(r["prompt"] + "\n" + r["answer"] for r in rows))["input_ids"][:a.ctx * a.chunks]
    if len(ids) < a.ctx * a.chunks:
        raise SystemExit(f"{len(ids)} tokens: too few for {a.chunks} chunks of {a.ctx}")
    ok = True
    for m in a.model:
        line = {"model": m, "ctx": a.ctx, "chunks": a.chunks}
        for name, dtype, tol in [("f32", torch.float32, 1e-4), ("bf16", torch.bfloat16, 2e-2)]:
            hf, n = hf_ppl(m, ids, a.ctx, a.chunks, dtype)
            sp = specpress_ppl(a.specpress, m, ids, a.ctx, a.chunks, name)
            rel = abs(sp["ppl"] - hf) / hf
            good = rel <= tol and sp["tokens_scored"] == n
            ok &= good
            line[name] = {"hf": hf, "specpress": sp["ppl"], "specpress_stderr": sp["ppl_stderr"], "rel": rel,
                          "tol": tol, "tokens_scored": n, "ok": good, "seconds": sp["seconds"]}
        line["build"] = sp["build"]
        line["device"] = sp["device"]
        print(json.dumps(line))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
