#!/usr/bin/env bash
# fast_checks.sh — the CUDA fast path (issue 6) in one device call: configure and build the CUDA targets,
# run tests/gpu (each kernel vs its ATen twin, fast path vs reference path in bf16, golden greedy tokens,
# allocator stats) and the CUDA build's tests/test_train.cpp on the CPU, check `specpress generate --device cuda
# --dtype bf16` (fast path) against --reference-path on the golden pair, then the performance record
# (bench/fast_perf.cpp and the HF transformers baselines: decode, a 16-token forward, and the DFlash reference loop's
# cycle in eager). Logs and JSON go to $OUT: ten files with the HF steps (the device tool brings back 8 a call, so a
# caller that wants them all runs it with OUT=/tmp/fc and then `tar -C /tmp/fc -czf "$OUT/fast_checks.tgz" .`;
# docs/PERF.md, thirty-first pass).
# Env: SPECPRESS_GPU_DEPS / SPECPRESS_GPU_SHARED (default ./.gpu-deps, ./.gpu-shared), SHAPES (4B,8B),
#      GTEST_FILTER, SKIP_PERF=1, SKIP_HF=1, HF_SHAPES (4B). Exits 1 when a test run, the CLI check, fast_perf, an
#      HF baseline or the cycle comparison with the eager reference loop failed (after the rest).
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
source scripts/gpu/gpu_env.sh
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
t0=$(date +%s)
gpu_build . build-gpu /tmp/fast_checks specpress test_gpu test_train fast_perf || exit 1
echo "configure+build: $(( $(date +%s) - t0 )) s"

# Every run's exit status is printed; any failure (a test, a crash, the CLI check) makes the script exit 1 at
# the end, after the performance record.
status=0
run_tests() {  # LABEL FILTER [VAR=VALUE...]: test_gpu under those variables, appended to test_gpu.log
  local label=$1 filter=$2
  shift 2
  env "$@" ./build-gpu/bin/test_gpu --gtest_filter="$filter" >>"$OUT/test_gpu.log" 2>&1
  local rc=$?
  echo "test_gpu${label:+ ($label)} exit $rc"
  [ $rc -eq 0 ] || status=1
}
: >"$OUT/test_gpu.log"
run_tests "" "${GTEST_FILTER:-*}"
# The golden fast-path suite again under one setting: golden VAR=VALUE [NOTE] (the label is the setting).
golden() { run_tests "$1${2:+: $2}, FastPathGolden" 'FastPathGolden.*' "$1"; }
golden SPECPRESS_GEMM=skinny "the opt-in batch-invariant matmul kernel"
golden SPECPRESS_GEMM=cublas "cuBLAS at M = 1 too (the default mode uses the GEMV kernel there)"
# programmatic dependent launch off (on by default in decode, kernels/launch.h), with the kernels' tests too
run_tests "SPECPRESS_PDL=0, FastPathGolden + Kernels" 'FastPathGolden.*:Kernels.*' SPECPRESS_PDL=0
golden SPECPRESS_PDL=1 "PDL in verify and draft too"
golden SPECPRESS_LC_EDGES=0 "no launch-completion edges"
golden SPECPRESS_LC_SKIP=none "launch-completion edges into the SwiGLU too (kernels/launch.h)"
golden SPECPRESS_LT_TUNE=0 "at::mm_out for every multi-row product (src/kernels/lt_linear.h)"
# the streaming small-M modes (the residual adds' at::mm_out-less fallback; stream_all is batch-invariant)
golden SPECPRESS_GEMM=stream
golden SPECPRESS_GEMM=stream_all
golden SPECPRESS_FOLD_NORMS=0 "the RMSNorms unfolded (model/qwen3_fast.h)"
golden SPECPRESS_ARGMAX_SPLIT=0 "one block a row in the argmax kernel (kernels/decode_step.h)"
golden SPECPRESS_DRAFT_KV_BATCH=0 "the draft's K/V injection a product a layer (model/qwen3_fast.h)"
golden SPECPRESS_PIPELINE=0 "the synchronous decoding loops (decode/fast_generation.h)"
golden SPECPRESS_INJECT_IN_VERIFY=0 "the draft's context injection in the draft step (model/qwen3_fast.h)"
golden SPECPRESS_RECORD_MAPPED=0 "the cycle's record copied after the accept kernel (model/qwen3_fast.h)"
golden SPECPRESS_L2_PREFETCH=0 "no L2 prefetches in the multi-row steps: W_o, the gate/up and down row heads (model/qwen3_fast.h)"
golden SPECPRESS_GEMV_TMA=0 "the register GEMV for the LM heads too (kernels/gemv.h)"
golden SPECPRESS_GEMV_TMA=always "the TMA GEMV for every one-row product (kernels/gemv.h)"
golden SPECPRESS_GEMV_WIDE=0 "8 W loads a lane in every register GEMV (kernels/gemv.h)"
golden SPECPRESS_DECODE_PERSISTENT=1 "the decode step's layers as one persistent kernel (kernels/decode_layers.h)"
# the multi-row products as the capture-time choice (model/qwen3_fast.h) would not pick them: cuBLASLt, and the wgmma
# kernel with its SwiGLU form pinned (with its own tests)
golden SPECPRESS_WG16_AUTO=0 "the verify and draft products by cuBLASLt, not chosen at capture (model/qwen3_fast.h)"
golden SPECPRESS_WG16_HEAD_ARGMAX=0 "the wgmma products' LM heads by cuBLASLt + the argmax kernel (kernels/aten_ops.h)"
run_tests "SPECPRESS_WG16_CLUSTER_SUM=0: the wgmma K splits summed through the workspace only (kernels/aten_ops.h)" \
  'FastPathGolden.*:Kernels.Wg16*' SPECPRESS_WG16_CLUSTER_SUM=0
run_tests "SPECPRESS_WG16=1 SPECPRESS_WG16_SWIGLU=1: the wgmma products pinned, FastPathGolden + Kernels.Wg16*" \
  'FastPathGolden.*:Kernels.Wg16*' SPECPRESS_WG16=1 SPECPRESS_WG16_SWIGLU=1
run_tests "SPECPRESS_WG16=1 SPECPRESS_WG16_SWIGLU=1 SPECPRESS_WG16_O_RING_KB=120 SPECPRESS_WG16_O_SPLITS=0: the o products' former ring and splits, FastPathGolden" \
  'FastPathGolden.*' SPECPRESS_WG16=1 SPECPRESS_WG16_SWIGLU=1 SPECPRESS_WG16_O_RING_KB=120 SPECPRESS_WG16_O_SPLITS=0
run_tests "SPECPRESS_WG16=1 SPECPRESS_WG16_SWIGLU=1 SPECPRESS_WG16_TRIGGER_EARLY=0: the products' PDL trigger after their loads, FastPathGolden" \
  'FastPathGolden.*' SPECPRESS_WG16=1 SPECPRESS_WG16_SWIGLU=1 SPECPRESS_WG16_TRIGGER_EARLY=0
run_tests "SPECPRESS_WG16=1 SPECPRESS_WG16_SWIGLU=1 SPECPRESS_WG16_SILU_HOLD=1: the gate/up products' former held stage, FastPathGolden" \
  'FastPathGolden.*' SPECPRESS_WG16=1 SPECPRESS_WG16_SWIGLU=1 SPECPRESS_WG16_SILU_HOLD=1
run_tests "SPECPRESS_WG16=1 SPECPRESS_WG16_SWIGLU=1 SPECPRESS_WG16_X_BOX=0: the products' X copied a chunk at a time, FastPathGolden" \
  'FastPathGolden.*' SPECPRESS_WG16=1 SPECPRESS_WG16_SWIGLU=1 SPECPRESS_WG16_X_BOX=0
run_tests "SPECPRESS_WG16=1 SPECPRESS_WG16_SWIGLU=1 SPECPRESS_WG16_QKV_NORM=0: the qkv products' norm factors by the side stream's row_rms, FastPathGolden" \
  'FastPathGolden.*' SPECPRESS_WG16=1 SPECPRESS_WG16_SWIGLU=1 SPECPRESS_WG16_QKV_NORM=0
# the o and gate/up GEMVs in one launch (opt-in), under each staging setting (read once a process), with its own test
run_tests "SPECPRESS_GEMV_O_GATE_UP=1: o + gate/up in one launch, FastPathGolden + Kernels.GemvOGateUp*" \
  'FastPathGolden.*:Kernels.GemvOGateUp*' SPECPRESS_GEMV_O_GATE_UP=1
run_tests "SPECPRESS_GEMV_O_GATE_UP=1 SPECPRESS_OGU_STAGE=0: nothing staged, FastPathGolden + Kernels.GemvOGateUp*" \
  'FastPathGolden.*:Kernels.GemvOGateUp*' SPECPRESS_GEMV_O_GATE_UP=1 SPECPRESS_OGU_STAGE=0
run_tests "SPECPRESS_GEMV_O_GATE_UP=1 SPECPRESS_OGU_STAGE=1 SPECPRESS_OGU_STAGE_WHEN=0: one step staged as o's row is issued" \
  'FastPathGolden.*:Kernels.GemvOGateUp*' SPECPRESS_GEMV_O_GATE_UP=1 SPECPRESS_OGU_STAGE=1 SPECPRESS_OGU_STAGE_WHEN=0
run_tests "SPECPRESS_GEMV_O_GATE_UP=1 SPECPRESS_OGU_STAGE_WHEN=2 SPECPRESS_PDL=0: staged after o's sums, no PDL" \
  'FastPathGolden.*:Kernels.GemvOGateUp*' SPECPRESS_GEMV_O_GATE_UP=1 SPECPRESS_OGU_STAGE_WHEN=2 SPECPRESS_PDL=0
run_tests "SPECPRESS_GEMV_O_GATE_UP=1 SPECPRESS_OGU_CARVEOUT=100: the largest shared-memory carveout" \
  'FastPathGolden.*:Kernels.GemvOGateUp*' SPECPRESS_GEMV_O_GATE_UP=1 SPECPRESS_OGU_CARVEOUT=100
run_tests "SPECPRESS_GEMV_MLP=1: the decode MLP in one launch (kernels/gemv_mlp.h), FastPathGolden + Kernels.GemvMlp*" \
  'FastPathGolden.*:Kernels.GemvMlp*' SPECPRESS_GEMV_MLP=1
run_tests "SPECPRESS_GEMV_MLP=1 SPECPRESS_GEMV_MLP_ORDERED=0: its sums in arrival order, FastPathGolden" \
  'FastPathGolden.*' SPECPRESS_GEMV_MLP=1 SPECPRESS_GEMV_MLP_ORDERED=0
run_tests "SPECPRESS_GEMV_MLP=0: the decode MLP pinned to two GEMVs (no capture-time choice), FastPathGolden" \
  'FastPathGolden.*' SPECPRESS_GEMV_MLP=0
run_tests "SPECPRESS_GEMV_MLP=1 SPECPRESS_PDL=0: the decode MLP in one launch without PDL, FastPathGolden" \
  'FastPathGolden.*' SPECPRESS_GEMV_MLP=1 SPECPRESS_PDL=0
# the TMA GEMV's other layouts (read once a process), bitwise against the register GEMV
run_tests "SPECPRESS_GEMV_TMA_WARPS=2" 'Kernels.GemvTma*' SPECPRESS_GEMV_TMA_WARPS=2
run_tests "SPECPRESS_GEMV_TMA_WARPS=8" 'Kernels.GemvTma*' SPECPRESS_GEMV_TMA_WARPS=8
run_tests "SPECPRESS_GEMV_TMA_STAGES=2" 'Kernels.GemvTma*' SPECPRESS_GEMV_TMA_STAGES=2
if [ -n "${GDB_FILTER:-}" ]; then
  cuda-gdb -batch -ex run -ex bt --args ./build-gpu/bin/test_gpu --gtest_filter="$GDB_FILTER" >"$OUT/gdb.txt" 2>&1
  grep -E '^#[0-9]+ |SIGSEGV|OK \]|FAILED|exited' "$OUT/gdb.txt" | head -30
fi
grep -E '^\[  (PASSED|FAILED) |^\[  FAILED  \]|Failure|C\+\+ exception|Expected|Which is|actual|bf16 greedy|caching allocator|vs bf16 reference' \
  "$OUT/test_gpu.log" | head -70
tail -4 "$OUT/test_gpu.log"
# The CUDA build's training suite with the GPU hidden, as CI runs it with Debian's LibTorch: PyTorch's LibTorch under
# the same tests (it found std::filesystem bound to libtorch's copy, docs/VALIDATION.md); appended to test_gpu.log.
CUDA_VISIBLE_DEVICES= ./build-gpu/bin/test_train >>"$OUT/test_gpu.log" 2>&1
rc=$?; echo "test_train (CPU, PyTorch's LibTorch) exit $rc"; [ $rc -eq 0 ] || status=1

g=$shared/golden/dflash-tiny-a
prompt=$(python3 -c "import json;print(','.join(map(str,json.load(open('$g/dflash_runs.json'))['runs'][0]['prompt'])))")
for mode in fast ref; do
  extra=$([ $mode = ref ] && echo --reference-path)
  ./build-gpu/bin/specpress generate -m $g/target -md $g/draft --prompt-ids "$prompt" -n 64 --temp 0 --stop-ids 1001 \
    --device cuda --dtype bf16 --json $extra >/tmp/cli_$mode.json 2>/tmp/cli_$mode.err || cat /tmp/cli_$mode.err
done
cat /tmp/cli_fast.err /tmp/cli_ref.err >"$OUT/cli.txt"
python3 - "$OUT" "$g" <<'PY'
import json, sys
out, g = sys.argv[1], sys.argv[2]
f, r = (json.load(open(f"/tmp/cli_{m}.json")) for m in ("fast", "ref"))
gold = json.load(open(f"{g}/dflash_runs.json"))["runs"][0]["dflash_output"]
print("CLI bf16 DFlash: fast == reference path:", f["output_ids"] == r["output_ids"], "| fast == golden f32:",
      f["output_ids"] == gold, "| tpot ms fast/ref:", f["timings"].get("predicted_per_token_ms"), r["timings"].get("predicted_per_token_ms"))
sys.exit(0 if f["output_ids"] == r["output_ids"] == gold else 1)
PY
[ $? -eq 0 ] || status=1

if [ "${SKIP_PERF:-0}" != 1 ]; then
  ./build-gpu/bin/fast_perf --shapes "${SHAPES:-4B,8B}" --json "$OUT/perf.json" 2>&1 | tee "$OUT/perf.log" | grep -v '^JSON'
  [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "fast_perf failed"; status=1; }
fi
if [ "${SKIP_HF:-0}" != 1 ]; then
  # Each bench's whole output goes to its own log; its one JSON line to the shape's jsonl (emptied first, so a reused
  # $OUT compares only this run). A bench that prints no JSON line shows its log's tail and fails the script.
  : >"$OUT/hf.jsonl"
  : >"$OUT/hf_dflash.jsonl"
  hf_bench() {  # SCRIPT SHAPE JSONL
    local log="$OUT/$(basename "$1" .py)_$2.log"
    PYTHONUNBUFFERED=1 python3 "$1" --shape "$2" >"$log" 2>&1
    local rc=$? line
    line=$(grep '^{' "$log" | tail -1)
    if [ $rc -ne 0 ] || [ -z "$line" ]; then
      echo "$1 --shape $2 failed (exit $rc):"
      tail -5 "$log"
      status=1
      return
    fi
    echo "$line" | tee -a "$3"
  }
  for s in $(echo "${HF_SHAPES:-4B}" | tr , ' '); do
    hf_bench bench/hf_decode_bench.py "$s" "$OUT/hf.jsonl"
    hf_bench bench/hf_dflash_cycle_bench.py "$s" "$OUT/hf_dflash.jsonl"
  done
  # the fast cycle against the eager reference loop's, same call
  if [ "${SKIP_PERF:-0}" != 1 ]; then
    python3 scripts/gpu/cycle_speedup.py "$OUT/perf.json" "$OUT/hf_dflash.jsonl" 2>&1 | tee "$OUT/cycle_speedup.txt"
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  fi
fi
exit $status
