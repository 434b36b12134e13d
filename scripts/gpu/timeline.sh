#!/usr/bin/env bash
# timeline.sh — when each kernel of one decode, verify and draft step of the CUDA fast path starts and ends as
# the graphs replay them (PDL overlaps included), from LibTorch's Kineto profiler (fast_perf --profile gemv
# --timeline). ncu (profile_kernels.sh) times kernels one at a time; this shows what a step's time is made of
# when they run together: per kernel class, the mean time it adds to the step after the previous kernel's end.
# Needs build-gpu/bin/fast_perf. Writes $OUT/timeline_w<warps>.<shape>.json (Chrome traces) and prints the
# summaries (scripts/gpu/timeline_summary.py).
# Env: SHAPES (4B), WARPS (0: the small-T attention's default blocks; or a list such as 0,4).
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
for w in $(echo "${WARPS:-0}" | tr , ' '); do
  ./build-gpu/bin/fast_perf --shapes "${SHAPES:-4B}" --profile gemv --profile-attention-warps "$w" \
    --timeline "$OUT/timeline_w$w" >"$OUT/timeline_w$w.log" 2>&1 || { tail -20 "$OUT/timeline_w$w.log"; continue; }
  for s in $(echo "${SHAPES:-4B}" | tr , ' '); do
    python3 scripts/gpu/timeline_summary.py "$OUT/timeline_w$w.Qwen3-$s.json" "Qwen3-$s, attention warps $w"
  done
done
