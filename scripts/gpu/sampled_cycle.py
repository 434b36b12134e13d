#!/usr/bin/env python3
"""sampled_cycle.py — what sampling costs a fast-path decoding step at the real Qwen3 shapes (GPU machine).

Writes (or reuses, in --work) real_shape_check.py's random bf16 Qwen3-4B (or 8B) target and DFlash draft, then runs
`specpress generate` on the CUDA fast path, greedy and at sampling settings, with and without the draft, and prints
one line a run: time a decoding step (a DFlash cycle: draft + verify + accept + the host's sampling; plain: one
token), decode tokens/s, and the step's cost over the greedy one. The random draft accepts nothing (tau 1), so every
DFlash cycle commits one token and the times are per cycle. Prints a JSON summary and writes it to --out. With --ab
every run is made with a switch on and off, and the script fails where the two give different tokens.

Usage (GPU machine, from the repo root after building specpress with CUDA):
  python3 scripts/gpu/sampled_cycle.py --specpress build-gpu/bin/specpress --work /tmp/rs --out $OUT/sampled.json
  (--ab SPECPRESS_DEVICE_DRAW --settings 3: temperature alone with the device draw and without, alternating)
"""
import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import real_shape_check as rsc  # noqa: E402  (its random checkpoints)

SETTINGS = [
    ("greedy", ["--temp", "0"]),
    ("qwen3 thinking (T 0.6, top-p 0.95, top-k 20)", ["--temp", "0.6", "--top-p", "0.95", "--top-k", "20"]),
    ("top-p 0.95 alone (T 0.8)", ["--temp", "0.8", "--top-p", "0.95"]),
    ("temperature 1 alone", ["--temp", "1"]),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--specpress", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--shape", default="4B", choices=sorted(rsc.SHAPES))
    ap.add_argument("-n", type=int, default=128, help="tokens a run")
    ap.add_argument("--out", required=True)
    ap.add_argument("--ab", metavar="VAR", help="an on/off switch (SPECPRESS_DEVICE_DRAW, say): every run twice, "
                    "VAR=1 then VAR=0, the step's cost over greedy's at the same value")
    ap.add_argument("--settings", help="comma-separated indices into SETTINGS (0 greedy, 1 thinking, 2 top-p, "
                    "3 temperature); default all. Greedy runs first whatever the list, as every row's base")
    args = ap.parse_args()
    settings = SETTINGS
    if args.settings:
        try:
            chosen = sorted({0} | {int(i) for i in args.settings.split(",")})
            if chosen[0] < 0:
                raise IndexError
            settings = [SETTINGS[i] for i in chosen]
        except (ValueError, IndexError):
            ap.error(f"--settings: expected comma-separated indices 0-{len(SETTINGS) - 1}, got {args.settings!r}")
    values = ["1", "0"] if args.ab else [None]
    os.makedirs(args.work, exist_ok=True)
    target, draft = os.path.join(args.work, "target"), os.path.join(args.work, "draft")
    if not os.path.exists(os.path.join(target, "config.json")):
        rsc.log("creating the random target and draft")
        _, cfg = rsc.make_target(args.work, args.shape, seed=0)
        rsc.make_draft(args.work, cfg, seed=1)
    prompt = ",".join(str(i) for i in range(1000, 1512))  # a 512-token context, as fast_perf's
    rows = []
    for with_draft in (True, False):
        base, ids = {}, {}
        for (name, flags), value in ((st, v) for st in settings for v in values):
            cmd = [args.specpress, "generate", "-m", target, "--prompt-ids", prompt, "-n", str(args.n), "--ignore-eos",
                   "--json", "--device", "cuda", "--dtype", "bf16", "--seed", "5"] + flags
            if with_draft:
                cmd += ["-md", draft]
            if value is not None:
                os.environ[args.ab] = value
            j = json.loads(rsc.run(cmd).stdout)
            t = j["timings"]
            # decode time: plain decoding's first token comes from the prefill, outside it; DFlash's cycles are all
            # in it but the first draft, timed apart
            steps = len(j["acceptance_lengths"]) if with_draft else t["predicted_n"] - 1
            step_ms = t["predicted_ms"] / steps
            base.setdefault(value, step_ms)
            row = {"draft": with_draft, "setting": name, "steps": steps, "step_ms": step_ms,
                   "tokens_per_s": t["predicted_per_second"], "over_greedy": step_ms / base[value]}
            if value is not None:
                row[args.ab] = value
            if with_draft:
                row |= {"draft_ms": t["draft_ms"] / steps, "verify_ms": t["verify_ms"] / steps}
            rows.append(row)
            ids[value] = j["output_ids"]
            if value == "0":  # the A/B's pair: the switch must not change the tokens (the same seed)
                row["same_tokens_as_1"] = ids["0"] == ids["1"]
            label = name if value is None else f"{name} [{args.ab}={value}]"
            print(f"{'DFlash' if with_draft else 'plain ':6s} {label:46s} {step_ms:7.3f} ms a step "
                  f"({steps} steps), {t['predicted_per_second']:8.1f} tokens/s, {step_ms / base[value]:5.3f}x "
                  "greedy's" + (f", same tokens as =1: {row['same_tokens_as_1']}" if value == "0" else ""),
                  flush=True)
    summary = {"shape": args.shape, "device": rsc.torch.cuda.get_device_name(), "n": args.n, "rows": rows}
    with open(args.out, "w") as f:
        json.dump(summary, f, indent=1)
    print(json.dumps(summary))
    if any(r.get("same_tokens_as_1") is False for r in rows):
        sys.exit(f"sampled_cycle: {args.ab}=0 changed the tokens of a run")


if __name__ == "__main__":
    main()
