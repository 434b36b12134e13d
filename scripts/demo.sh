#!/usr/bin/env bash
# demo.sh — the main job on the bundled default: the demo pair in demo/ (a small Qwen3 target trained
# on GSM8K with the real Qwen3 tokenizer, and its DFlash draft; see demo/README.md) answers a GSM8K
# question greedily with and without the draft, then prints whether the outputs are identical, tau
# and the speedup in time per output token; with the pair's beacon compressor (demo/beacon) it also runs
# DFlash on the compressed KV cache and prints the memory it saved and how far the output moved.
# PAIR=../shared/golden/dflash-tiny-a runs the golden pair. DEVICE and DTYPE (default cpu, f32: the README's numbers,
# and exact agreement whatever the build) pick where it runs, e.g. DEVICE=auto DTYPE=auto as the commands default.
# BIN and PAIR, where given relative, are taken from the directory it is run in.
set -euo pipefail
here=$(pwd)
abs() { case $1 in /*) echo "$1" ;; *) echo "$here/$1" ;; esac; }
BIN=${BIN:+$(abs "$BIN")}
PAIR=${PAIR:+$(abs "$PAIR")}
cd "$(dirname "$0")/.."
BIN=${BIN:-build/bin/specpress}
PAIR=${PAIR:-demo}
[ -x "$BIN" ] || { echo "demo: $BIN not built; run scripts/setup.sh first" >&2; exit 1; }
[ -d "$PAIR/target" ] || { echo "demo: $PAIR/target not found" >&2; exit 1; }
placement=(--device "${DEVICE:-cpu}" --dtype "${DTYPE:-f32}")
if [ -f "$PAIR/target/config.json" ] && grep -q '"vocab_size": *151936' "$PAIR/target/config.json"; then
  [ -f "$PAIR/target/tokenizer.json" ] || scripts/fetch_demo_tokenizer.sh "$PAIR/target" >&2
  QUESTION='Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. How many clips did Natalia sell altogether in April and May?'
  PROMPT=${PROMPT:-"$QUESTION
Please reason step by step, and put your final answer within \\boxed{}."}
  common=(-m "$PAIR/target" "${placement[@]}" --chat -p "$PROMPT" -n "${N:-128}" --temp 0 --json)
else  # the golden tiny pair (token ids only)
  PROMPT=${PROMPT:-598,185,881,93,817,564,816,871,836,953,424,354,1,551,553,638,805,60,755,305,128,991,217,896,48,129,915,211,145,558,932,250,225,20,555,205,279,318,583}
  common=(-m "$PAIR/target" "${placement[@]}" --prompt-ids "$PROMPT" -n "${N:-64}" --temp 0 --stop-ids 1001 --json)
fi
# each run's JSON on stdout; its stderr (timings, notes) kept, and shown with the command if the run fails
err=$(mktemp)
trap 'rm -f "$err"' EXIT
gen() {
  "$BIN" generate "$@" 2>"$err" || { echo "demo: $BIN generate failed:" >&2; cat "$err" >&2; exit 1; }
}
plain=$(gen "${common[@]}")
spec=$(gen "${common[@]}" -md "$PAIR/draft")
compressed='{}'
if [ -f "$PAIR/beacon/compressor.json" ]; then
  compressed=$(gen "${common[@]}" -md "$PAIR/draft" --compress "$PAIR/beacon" --compress-window 32 --compress-merge 8)
fi
python3 - "$plain" "$spec" "$compressed" <<'PY'
import json, sys
plain, spec, comp = json.loads(sys.argv[1]), json.loads(sys.argv[2]), json.loads(sys.argv[3])
same = plain["output_ids"] == spec["output_ids"]
tp, ts = plain["timings"]["predicted_per_token_ms"], spec["timings"]["predicted_per_token_ms"]
if "text" in spec:
    print("output:", spec["text"][:300].replace("\n", " "), "..." if len(spec["text"]) > 300 else "")
print(f"generated {len(spec['output_ids'])} tokens; DFlash output == plain greedy output: {same}")
print(f"tau (mean acceptance length) = {spec['mean_acceptance_length']:.2f} over {len(spec['acceptance_lengths'])} steps, block size {spec['block_size']}")
print(f"time per output token: plain {tp:.2f} ms, DFlash {ts:.2f} ms -> speedup {tp / ts:.2f}x")
if "compression" in comp:
    c = comp["compression"]
    a, b = comp["output_ids"], spec["output_ids"]
    diverge = next((i for i in range(min(len(a), len(b))) if a[i] != b[i]), min(len(a), len(b)))
    print(f"with the beacon KV compressor (window 32, units of 8): {c['events']} units compressed, "
          f"{c['positions']} positions in {c['slots']} KV slots ({c['effective_ratio']:.2f}x), "
          f"tau {comp['mean_acceptance_length']:.2f}, output identical to uncompressed for {diverge}/{len(b)} tokens")
sys.exit(0 if same else 1)
PY
