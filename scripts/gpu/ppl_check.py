#!/usr/bin/env python3
"""ppl_check.py — `specpress perplexity` against HF transformers on the same ids and rule (GPU machine).

For each model directory: the first GSM8K test questions and answers, tokenized by the Qwen3 tokenizer, cut into
--chunks chunks of --ctx tokens; HF's AutoModelForCausalLM scores the second half of each chunk (llama-perplexity's
rule, as tools/perplexity.h) in float32 and bfloat16 on the GPU; `specpress perplexity --prompt-ids ... --json` does
the same with --device cuda --dtype f32 and bf16. Float32 must agree within 1e-4 relative, bfloat16 within 2e-2
(other kernels, bf16 rounding). Then `--dtype bf16 --kl-base-dtype f32`'s mean KL(f32 || bf16) beside HF's over the
same rows: the two bf16 forwards round differently, so they must agree within a factor of 2, not exactly (or both be
below 1e-12: a model whose rows are one-hot, as the random real-vocabulary target's are, has none to compare). Prints one
JSON line per model and exits non-zero on a mismatch.

Usage: python3 scripts/gpu/ppl_check.py --specpress build-gpu/bin/specpress --shared .gpu-shared \
           --model demo/target --model /tmp/tc/target [--ctx 128] [--chunks 4]
"""
import argparse, json, math, os, subprocess, sys
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


def hf_rows(model_dir, ids, ctx, chunks, dtype):
    """Each chunk's scored rows' log_softmax (float64) and next tokens."""
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).cuda().eval()
    out = []
    with torch.no_grad():
        for c in range(chunks):
            chunk = torch.tensor(ids[c * ctx:(c + 1) * ctx], device="cuda")[None]
            logp = torch.log_softmax(model(input_ids=chunk).logits[0].float().double(), -1)
            out.append((logp[ctx // 2:ctx - 1], chunk[0, ctx // 2 + 1:]))
    del model
    torch.cuda.empty_cache()
    return out


def ppl_of(rows):
    nlls = torch.cat([-r.gather(1, t[:, None])[:, 0] for r, t in rows])
    return math.exp(nlls.mean().item()), nlls.numel()


def specpress_ppl(binary, model_dir, ids, ctx, chunks, dtype, *extra):
    r = subprocess.run([binary, "perplexity", "-m", model_dir, "--prompt-ids", ",".join(map(str, ids)), "-c", str(ctx),
                        "--chunks", str(chunks), "--device", "cuda", "--dtype", dtype, "--json", *extra],
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
    data = [json.loads(l) for l in open(os.path.join(a.shared, "data/gsm8k_test.jsonl"))][:60]
    ids = tok("\n\n".join(r["prompt"] + "\n" + r["answer"] for r in data))["input_ids"][:a.ctx * a.chunks]
    if len(ids) < a.ctx * a.chunks:
        raise SystemExit(f"{len(ids)} tokens: too few for {a.chunks} chunks of {a.ctx}")
    ok = True
    for m in a.model:
        line = {"model": m, "ctx": a.ctx, "chunks": a.chunks}
        rows = {}
        for name, dtype, tol in [("f32", torch.float32, 1e-4), ("bf16", torch.bfloat16, 2e-2)]:
            rows[name] = hf_rows(m, ids, a.ctx, a.chunks, dtype)
            hf, n = ppl_of(rows[name])
            sp = specpress_ppl(a.specpress, m, ids, a.ctx, a.chunks, name)
            rel = abs(sp["ppl"] - hf) / hf
            good = rel <= tol and sp["tokens_scored"] == n
            ok &= good
            line[name] = {"hf": hf, "specpress": sp["ppl"], "specpress_stderr": sp["ppl_stderr"], "rel": rel,
                          "tol": tol, "tokens_scored": n, "ok": good, "seconds": sp["seconds"]}
        hf_kld = torch.cat([(b.exp() * (b - l)).sum(-1) for (b, _), (l, _) in zip(rows["f32"], rows["bf16"])]).mean().item()
        sp = specpress_ppl(a.specpress, m, ids, a.ctx, a.chunks, "bf16", "--kl-base-dtype", "f32")
        both_zero = abs(hf_kld) < 1e-12 and abs(sp["kl"]["kld"]["mean"]) < 1e-12
        ratio = 1.0 if both_zero else sp["kl"]["kld"]["mean"] / hf_kld if hf_kld != 0 else float("inf")
        good = both_zero or 0.5 <= ratio <= 2.0
        ok &= good
        line["kl_f32_bf16"] = {"hf": hf_kld, "specpress": sp["kl"]["kld"]["mean"], "ratio": ratio,
                               "both_zero": both_zero,
                               "same_top": sp["kl"]["same_top"], "ok": good}
        line["build"] = sp["build"]
        line["device"] = sp["device"]
        print(json.dumps(line))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
