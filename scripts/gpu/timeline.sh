#!/usr/bin/env bash
# timeline.sh — when each kernel of one decode, verify and draft step of the CUDA fast path starts and ends as
# the graphs replay them (PDL overlaps included), from LibTorch's Kineto profiler (fast_perf --profile gemv
# --timeline). ncu (profile_kernels.sh) times kernels one at a time; this shows what a step's time is made of
# when they run together: per kernel class, the mean time it adds to the step after the previous kernel's end.
# Needs build-gpu/bin/fast_perf. Writes $OUT/timeline_w<warps>.Qwen3-<shape>.json (Chrome traces) and
# $OUT/timeline_w<warps>.log (fast_perf's output), and prints the summaries (scripts/gpu/timeline_summary.py).
# Exits non-zero if any run or summary failed, after trying the others.
# Env: SHAPES (4B), WARPS (0: the small-T attention's default blocks; or a list such as 0,4).
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
status=0
for w in $(echo "${WARPS:-0}" | tr , ' '); do
  if ! ./build-gpu/bin/fast_perf --shapes "${SHAPES:-4B}" --profile gemv --profile-attention-warps "$w" \
    --timeline "$OUT/timeline_w$w" >"$OUT/timeline_w$w.log" 2>&1; then
    echo "timeline.sh: fast_perf failed for WARPS=$w ($OUT/timeline_w$w.log):" >&2
    tail -20 "$OUT/timeline_w$w.log" >&2
    status=1
    continue
  fi
  for s in $(echo "${SHAPES:-4B}" | tr , ' '); do
    python3 scripts/gpu/timeline_summary.py "$OUT/timeline_w$w.Qwen3-$s.json" "Qwen3-$s, attention warps $w" || status=1
  done
done
exit $status
