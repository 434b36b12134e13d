#!/usr/bin/env bash
# sampling_check.sh — on the GPU machine, after gpu_build of specpress and sampler_bench (BUILD, default build-gpu):
# times the sampler on CUDA (bench/sampler_bench.cpp: the candidate path against the whole vocabulary, same run),
# then DFlash and plain generation on the fast path at Qwen3's recommended thinking settings (T 0.6, top-p 0.95,
# top-k 20, seed 5) with SPECPRESS_SAMPLER_CANDIDATES=1 and =0, and checks that both give the same tokens. PAIR is
# a fast-path pair with the tokenizer files (scripts/gpu/tools_check.py --work DIR writes one). Logs to OUT.
# Exits non-zero when the outputs differ. Also runs on a CPU build: BUILD=build DEVICE=cpu DTYPE=f32 PAIR=demo.
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
FLAGS=(--device "$DEVICE" --dtype "$DTYPE" -p "Natalia sold clips to 48 of her friends in April" -n "$N" --ignore-eos
       --json --temp 0.6 --top-p 0.95 --top-k 20 --seed 5)
status=0
for draft in with without; do
  models=(-m "$PAIR/target")
  [ "$draft" = with ] && models+=(-md "$PAIR/draft")
  for c in 1 0; do
    SPECPRESS_SAMPLER_CANDIDATES=$c "$BUILD/bin/specpress" generate "${models[@]}" "${FLAGS[@]}" \
      > "$OUT/generate_${draft}_draft_candidates$c.json" 2> "$OUT/generate_${draft}_draft_candidates$c.err"
  done
  python3 - "$OUT/generate_${draft}_draft_candidates1.json" "$OUT/generate_${draft}_draft_candidates0.json" \
    "$draft draft" <<'EOF' || status=1
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
ta, tb = a["timings"], b["timings"]
same = a["output_ids"] == b["output_ids"]
print(f"{sys.argv[3]}: decode tokens/s candidates {ta['predicted_per_second']:.1f} | whole vocabulary "
      f"{tb['predicted_per_second']:.1f} ({ta['predicted_per_second'] / tb['predicted_per_second']:.2f}x); "
      f"{len(a['output_ids'])} tokens, identical: {same}")
sys.exit(0 if same else 1)
EOF
done
exit $status
