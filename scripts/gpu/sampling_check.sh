#!/usr/bin/env bash
# sampling_check.sh — on the GPU machine, after gpu_build of specpress and sampler_bench (BUILD, default build-gpu):
# times the sampler on CUDA (bench/sampler_bench.cpp: the candidate path against the whole vocabulary, same run),
# then DFlash and plain generation on the fast path at Qwen3's recommended thinking settings (T 0.6, top-p 0.95,
# top-k 20, seed 5) with SPECPRESS_SAMPLER_CANDIDATES=1 and =0, and on CUDA at temperature 1 alone with
# SPECPRESS_DEVICE_DRAW=1 and =0 (the fast loops' device draw against the ATen transform), at the thinking settings
# and at top-p 0.95 alone with SPECPRESS_DEVICE_CANDIDATES=1 and =0 (the candidates' kernels against topk), and
# checks that each pair gives the same tokens. PAIR is a fast-path pair with the tokenizer files
# (scripts/gpu/tools_check.py --work DIR writes one). Logs to OUT. Exits non-zero when the outputs differ. Also runs
# on a CPU build: BUILD=build DEVICE=cpu DTYPE=f32 PAIR=demo.
set -euo pipefail
BUILD=${BUILD:-build-gpu}
DEVICE=${DEVICE:-cuda}
DTYPE=${DTYPE:-bf16}
N=${N:-256}
PAIR=${PAIR:?PAIR: a fast-path pair directory (DIR/target, DIR/draft)}
OUT=${OUT:-/tmp/sampling_check}
mkdir -p "$OUT"
if [ "$DEVICE" = cuda ]; then
  "$BUILD/bin/sampler_bench" --device cuda --iters 50 | tee "$OUT/sampler_bench_cuda.log"
fi
"$BUILD/bin/sampler_bench" --device cpu --iters 5 | tee "$OUT/sampler_bench_cpu.log"
BASE=(--device "$DEVICE" --dtype "$DTYPE" -p "Natalia sold clips to 48 of her friends in April" -n "$N" --ignore-eos
      --json --seed 5)
status=0
# compare NAME VARIABLE SAMPLING-FLAGS...: generate with and without the draft under VARIABLE=1 and =0; the same
# tokens both ways, and the decode speed of each
compare() {
  local name=$1 var=$2
  shift 2
  for draft in with without; do
    models=(-m "$PAIR/target")
    [ "$draft" = with ] && models+=(-md "$PAIR/draft")
    for c in 1 0; do
      env "$var=$c" "$BUILD/bin/specpress" generate "${models[@]}" "${BASE[@]}" "$@" \
        > "$OUT/${name}_${draft}_draft_$c.json" 2> "$OUT/${name}_${draft}_draft_$c.err"
    done
    python3 - "$OUT/${name}_${draft}_draft_1.json" "$OUT/${name}_${draft}_draft_0.json" "$name, $draft draft" \
      "$var" <<'EOF' || status=1
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
ta, tb = a["timings"], b["timings"]
same = a["output_ids"] == b["output_ids"]
print(f"{sys.argv[3]}: decode tokens/s {sys.argv[4]}=1 {ta['predicted_per_second']:.1f} | =0 "
      f"{tb['predicted_per_second']:.1f} ({ta['predicted_per_second'] / tb['predicted_per_second']:.2f}x); "
      f"{len(a['output_ids'])} tokens, identical: {same}")
sys.exit(0 if same else 1)
EOF
  done
}
# the candidate path against the whole vocabulary, at Qwen3's thinking settings
compare candidates SPECPRESS_SAMPLER_CANDIDATES --temp 0.6 --top-p 0.95 --top-k 20
# the fast loops' device draw against the ATen transform, at a plain temperature (CUDA only)
if [ "$DEVICE" = cuda ]; then
  compare device_draw SPECPRESS_DEVICE_DRAW --temp 1
  # the candidates' kernels against topk
  compare device_candidates SPECPRESS_DEVICE_CANDIDATES --temp 0.6 --top-p 0.95 --top-k 20
  compare device_candidates_top_p SPECPRESS_DEVICE_CANDIDATES --temp 0.8 --top-p 0.95
fi
exit $status
