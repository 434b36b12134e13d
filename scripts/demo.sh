#!/usr/bin/env bash
# demo.sh — the main job on the bundled default: DFlash speculative decoding with the golden tiny
# Qwen3 target + DFlash draft (../shared/golden/dflash-tiny-a), greedy, compared with plain decoding
# of the same prompt: prints the tokens, tau and the speedup of time per output token.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-build/bin/specpress}
PAIR=${PAIR:-../shared/golden/dflash-tiny-a}
[ -x "$BIN" ] || { echo "demo: $BIN not built; run scripts/setup.sh first" >&2; exit 1; }
[ -d "$PAIR/target" ] || { echo "demo: $PAIR/target not found (the golden fixtures live in ../shared)" >&2; exit 1; }
PROMPT=${PROMPT:-598,185,881,93,817,564,816,871,836,953,424,354,1,551,553,638,805,60,755,305,128,991,217,896,48,129,915,211,145,558,932,250,225,20,555,205,279,318,583}
common=(-m "$PAIR/target" --prompt-ids "$PROMPT" -n "${N:-64}" --temp 0 --stop-ids 1001 --json)
plain=$("$BIN" generate "${common[@]}" 2>/dev/null)
spec=$("$BIN" generate "${common[@]}" -md "$PAIR/draft" 2>/dev/null)
python3 - "$plain" "$spec" <<'PY'
import json, sys
plain, spec = json.loads(sys.argv[1]), json.loads(sys.argv[2])
same = plain["output_ids"] == spec["output_ids"]
tp, ts = plain["timings"]["predicted_per_token_ms"], spec["timings"]["predicted_per_token_ms"]
print(f"generated {len(spec['output_ids'])} tokens; DFlash output == plain greedy output: {same}")
print(f"tau (mean acceptance length) = {spec['mean_acceptance_length']:.2f} over {len(spec['acceptance_lengths'])} steps, block size {spec['block_size']}")
print(f"time per output token: plain {tp:.2f} ms, DFlash {ts:.2f} ms -> speedup {tp / ts:.2f}x")
sys.exit(0 if same else 1)
PY
