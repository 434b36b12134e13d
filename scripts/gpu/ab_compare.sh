#!/usr/bin/env bash
# ab_compare.sh — a same-run A/B of the CUDA fast path on the GPU machine: builds fast_perf from the working
# tree (B) and from the baseline in .ab-base/ (A, made by scripts/gpu/ab_prepare.sh REV), then, alternating
# A B A B, times the small-T attention alone (fast_perf --attention 1) and, once each, the steps
# (fast_perf --shapes $SHAPES). So a kernel change is measured against its baseline in one call, on one
# machine, minutes apart (docs/PERF.md, seventh pass). Logs under $OUT: ab_attention_{A,B}.txt,
# ab_perf_{A,B}.{log,json}.
# Env: SPECPRESS_GPU_DEPS / SPECPRESS_GPU_SHARED (default ./.gpu-deps, ./.gpu-shared), SHAPES (4B,8B),
#      ATTENTION (1: the attention tables; 0: skip them), STEPS (1: the step runs; 0: skip them),
#      MODES (default: fast_perf --modes default, the engine's default configuration only, on each side whose
#      fast_perf has the flag; all: every matmul mode), REF_ITERS (fast_perf --ref-iters, default 5).
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
[ -f .ab-base/AB_REVISION ] || { echo "ab_compare.sh: no .ab-base/AB_REVISION: run scripts/gpu/ab_prepare.sh REV first and carry .ab-base" >&2; exit 2; }
source scripts/gpu/gpu_env.sh
echo "A = $(cat .ab-base/AB_REVISION) (.ab-base), B = the working tree"
declare -A bin=([A]=.ab-base/build-gpu/bin/fast_perf [B]=build-gpu/bin/fast_perf)
gpu_build .ab-base .ab-base/build-gpu /tmp/ab_A fast_perf || exit 1
gpu_build . build-gpu /tmp/ab_B fast_perf || exit 1
if [ "${ATTENTION:-1}" = 1 ]; then
  for side in A B A B; do
    echo "== attention alone, $side"
    ${bin[$side]} --attention 1 2>&1 | tee -a "$OUT/ab_attention_$side.txt" | grep -E '^T=' | cut -c1-64
  done
fi
if [ "${STEPS:-1}" = 1 ]; then
  for side in A B; do
    echo "== steps, $side"
    src=$([ "$side" = A ] && echo .ab-base || echo .)
    modes=()
    grep -q -- '"--modes"' "$src/bench/fast_perf.cpp" && modes=(--modes "${MODES:-default}")
    ${bin[$side]} --shapes "${SHAPES:-4B,8B}" --ref-iters "${REF_ITERS:-5}" "${modes[@]}" --json "$OUT/ab_perf_$side.json" \
      >"$OUT/ab_perf_$side.log" 2>&1 ||
      { echo "fast_perf ($side) failed:"; tail -5 "$OUT/ab_perf_$side.log"; }
    grep -E '^device|^Qwen3-.B \(|^decode \(|^verify|^draft|^DFlash|^ratios' "$OUT/ab_perf_$side.log"
  done
fi
