#!/usr/bin/env bash
# one-off: ncu source-level stall sampling of the decode (T=1) and verify (T=16) attention kernels at 4B
set -uo pipefail
OUT=${OUT:-/tmp/out}
deps=$(pwd)/.gpu-deps
export LD_LIBRARY_PATH=$deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
for skip in 0 36; do
  ncu --profile-from-start off --kernel-name regex:decode_attention --launch-skip $skip --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section SourceCounters --section LaunchStats --import-source yes \
    -o "$OUT/attn_$skip" ./build-gpu/bin/fast_perf --shapes 4B --profile gemv >/tmp/ncu_$skip.log 2>&1 || tail -5 /tmp/ncu_$skip.log
  ncu -i "$OUT/attn_$skip.ncu-rep" --page details >"$OUT/attn_${skip}_details.txt" 2>&1
  ncu -i "$OUT/attn_$skip.ncu-rep" --page source --csv --print-source cuda >"$OUT/attn_${skip}_source.csv" 2>&1
  grep -E "Duration|Warp Cycles Per Issued|Stall|stall" "$OUT/attn_${skip}_details.txt" | head -20
  wc -l "$OUT/attn_${skip}_source.csv"
done
