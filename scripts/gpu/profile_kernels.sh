#!/usr/bin/env bash
# profile_kernels.sh — kernel-by-kernel time of one decode, verify and draft step of the CUDA fast path at
# the real Qwen3 shapes (random bf16 weights, bench/fast_perf.cpp --profile), under Nsight Compute. ncu
# runs each kernel alone, so the sum of a step's kernel times against the step's graph-replay time (from
# fast_perf's normal run) is what the launch gaps cost. Needs build-gpu/bin/fast_perf (fast_checks.sh builds
# it). Writes $OUT/profile_<shape>_<mode>.csv (raw) and prints a per-step, per-kernel summary.
# Env: SHAPES (4B), MODES (gemv).
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
for s in $(echo "${SHAPES:-4B}" | tr , ' '); do
  for m in $(echo "${MODES:-gemv}" | tr , ' '); do
    csv="$OUT/profile_${s}_${m}.csv"
    ncu --profile-from-start off --clock-control none --cache-control none \
      --metrics gpu__time_duration.sum,dram__bytes_read.sum --csv --print-kernel-base demangled \
      ./build-gpu/bin/fast_perf --shapes "$s" --profile "$m" >"$csv" 2>"/tmp/ncu_${s}_${m}.err" ||
      { tail -20 "/tmp/ncu_${s}_${m}.err"; continue; }
    python3 scripts/gpu/profile_summary.py "$csv" "$s $m"
  done
done
