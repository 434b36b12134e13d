#!/usr/bin/env bash
# run_checks.sh — everything the GPU machine checks in one device call: configure and build specpress
# with CUDA against the machine's PyTorch, run the golden test suites on the CUDA path, then the
# real-shape comparison with HF transformers. Logs and the JSON summary go to $OUT.
# Needs `.gpu-deps` (../shared/tools/gpu-deps.sh .gpu-deps) and `.gpu-shared` (scripts/gpu/pack_shared.sh)
# carried with the checkout.
set -euo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
source scripts/gpu/gpu_env.sh
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
t0=$(date +%s)
# shellcheck disable=SC2086 # SPECPRESS_GPU_TARGETS is a list of targets
gpu_build . build-gpu "$OUT/gpu" ${SPECPRESS_GPU_TARGETS:-specpress test_engine} || exit 1
echo "configure+build: $(( $(date +%s) - t0 )) s"
if [ "${SPECPRESS_GPU_SKIP_TESTS:-0}" != 1 ]; then
  SPECPRESS_TEST_DEVICE=cuda ./build-gpu/bin/test_engine --gtest_filter='Qwen3Golden.*:DFlashGolden.*' 2>&1 | tee "$OUT/golden_cuda.log" | grep -E '^\[  (PASSED|FAILED) |Failure' | head -40
fi
if [ "${SPECPRESS_GPU_SKIP_REAL:-0}" != 1 ]; then
  PYTHONUNBUFFERED=1 python3 scripts/gpu/real_shape_check.py --specpress build-gpu/bin/specpress --work /tmp/rs \
    --shape "${SPECPRESS_GPU_SHAPE:-4B}" --prompts "${SPECPRESS_GPU_PROMPTS:-4}" --out "$OUT/real_shape.json" 2>&1 | tee "$OUT/real_shape.log" | tail -20
fi
