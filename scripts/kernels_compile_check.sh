#!/usr/bin/env bash
# kernels_compile_check.sh — compiles the torch-free CUDA kernels (src/kernels/*.cu, specpress_kernels) with this
# machine's nvcc as the CUDA build does (C++20, sm_90a unless ARCH, -Xptxas=-warn-spills), so that a kernel change is
# known to compile, and its register spills are seen, before a device call (the GPU machine is scarce). Needs nvcc
# (CUDA 12.8 or later); no GPU and no LibTorch. Prints each file's errors and warnings; exits 1 if any file failed.
# Env: NVCC (default nvcc, else /usr/local/cuda/bin/nvcc), ARCH (sm_90a), JOBS (2). Args: .cu files (default all).
set -uo pipefail
cd "$(dirname "$0")/.."
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
[ -x "$NVCC" ] || { echo "kernels_compile_check: no nvcc (set NVCC=/path/to/nvcc)" >&2; exit 2; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
files=("$@")
[ ${#files[@]} -gt 0 ] || files=(src/kernels/*.cu)
printf '%s\n' "${files[@]}" | xargs -P "${JOBS:-2}" -I{} sh -c \
  '"$0" -std=c++20 -arch="$1" -Xptxas=-warn-spills -I src -c "{}" -o "$2/$(basename "{}").o" > "$2/$(basename "{}").log" 2>&1 ||
   echo failed > "$2/$(basename "{}").failed"' "$NVCC" "${ARCH:-sm_90a}" "$out"
status=0
for f in "${files[@]}"; do
  b=$(basename "$f")
  if [ -f "$out/$b.failed" ]; then status=1; echo "FAILED $f"; else echo "ok     $f"; fi
  [ -s "$out/$b.log" ] && sed 's/^/    /' "$out/$b.log"
done
exit $status
