#!/usr/bin/env python3
"""hf_export_check.py — does Hugging Face transformers load what `specpress train-lm` exports, and agree with it?

Loads a train-lm output directory (default: the bundled demo target, demo/target) with
AutoModelForCausalLM and AutoTokenizer, as a user would, then on the GPU machine:
  1. tokenizer: HF's encoding of a GSM8K-style question against `specpress tokenize`;
  2. logits: HF (CUDA, float32) against `specpress dump` (CUDA, float32) on those ids, as the max relative
     error (max |diff| / max |HF logit|) and the argmax agreement over the positions;
  3. greedy: 32 new tokens by HF `generate(do_sample=False)` against `specpress generate --temp 0`.
Prints one JSON line and writes it to --out. Exits 1 if a check fails (error >= 1e-3 or a greedy or
tokenizer mismatch).

Usage (repo root, after building with CUDA; the demo target's tokenizer.json is not committed, so fetch it
first, from .gpu-shared on the GPU machine):
  SHARED=.gpu-shared scripts/fetch_demo_tokenizer.sh
  python3 scripts/gpu/hf_export_check.py --specpress build-gpu/bin/specpress --model demo/target --out $OUT/hf_export.json
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer

QUESTION = ("Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
            "How many clips did Natalia sell altogether in April and May?")


def run(cmd):
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({res.returncode}):\n{res.stderr[-2000:]}")
    return res.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--specpress", required=True)
    ap.add_argument("--model", default="demo/target")
    ap.add_argument("--out", required=True)
    ap.add_argument("--new-tokens", type=int, default=32)
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    summary = {"model": args.model, "files": sorted(os.listdir(args.model))}

    tok = AutoTokenizer.from_pretrained(args.model)
    hf_ids = tok(QUESTION)["input_ids"]
    sp_ids = json.loads(run([args.specpress, "tokenize", "-m", args.model, "-p", QUESTION]))
    summary["tokenizer_equal"] = hf_ids == sp_ids
    summary["prompt_tokens"] = len(hf_ids)

    hf = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).to("cuda").eval()
    summary["hf_class"] = type(hf).__name__
    with torch.no_grad():
        ref = hf(torch.tensor([hf_ids], device="cuda")).logits[0].float().cpu()
    with tempfile.TemporaryDirectory() as work:
        dump = os.path.join(work, "dump.safetensors")
        run([args.specpress, "dump", "-m", args.model, "--prompt-ids", ",".join(map(str, hf_ids)), "-o", dump,
             "--device", "cuda", "--dtype", "f32"])
        ours = load_file(dump)["logits"].float()
    summary["max_rel_logit_error_f32"] = ((ours - ref).abs().max() / ref.abs().max()).item()
    summary["argmax_agreement_f32"] = (ours.argmax(-1) == ref.argmax(-1)).float().mean().item()

    n = args.new_tokens
    with torch.no_grad():
        out = hf.generate(torch.tensor([hf_ids], device="cuda"), max_new_tokens=n, min_new_tokens=n, do_sample=False,
                          eos_token_id=None, pad_token_id=0)
    hf_new = out[0, len(hf_ids):].tolist()
    res = json.loads(run([args.specpress, "generate", "-m", args.model, "--prompt-ids", ",".join(map(str, hf_ids)),
                          "-n", str(n), "--temp", "0", "--ignore-eos", "--device", "cuda", "--dtype", "f32",
                          "--json"]))
    sp_new = res["output_ids"]
    summary["greedy_equal"] = hf_new == sp_new
    summary["greedy_hf"] = hf_new
    summary["greedy_specpress"] = sp_new

    ok = summary["tokenizer_equal"] and summary["max_rel_logit_error_f32"] < 1e-3 and summary["greedy_equal"]
    summary["pass"] = ok
    line = json.dumps(summary)
    print(line)
    with open(args.out, "w") as f:
        f.write(line + "\n")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
