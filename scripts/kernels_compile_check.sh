#!/usr/bin/env bash
# kernels_compile_check.sh — compiles the torch-free CUDA kernels (src/kernels/*.cu, specpress_kernels) with this
# machine's nvcc as the CUDA build does (C++20, sm_90a unless ARCH, -Xptxas=-warn-spills), so that a kernel change is
# known to compile, and its register spills are seen, before a device call (the GPU machine is scarce). Needs nvcc
# (CUDA 12.8 or later); no GPU and no LibTorch. Prints each file's errors and warnings; exits 1 if any file failed.
# Env: NVCC (default nvcc, else /usr/local/cuda/bin/nvcc), ARCH (sm_90a), JOBS (2). Args: .cu files (default all).
set -uo pipefail
files=()
for f in "$@"; do files+=("$(realpath "$f")"); done  # paths as given, from wherever the script is run
cd "$(dirname "$0")/.."
NVCC=$(command -v "${NVCC:-nvcc}" || command -v /usr/local/cuda/bin/nvcc)
[ -n "$NVCC" ] || { echo "kernels_compile_check: no nvcc (set NVCC=/path/to/nvcc)" >&2; exit 2; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
[ ${#files[@]} -gt 0 ] || files=("$PWD"/src/kernels/*.cu)
# each file as an argument (never pasted into the shell text); its outputs named by its whole path
printf '%s\0' "${files[@]}" | xargs -0 -n 1 -P "${JOBS:-2}" sh -c '
  b=$(printf %s "$3" | tr / _)
  "$0" -std=c++20 -arch="$1" -Xptxas=-warn-spills -I src -c "$3" -o "$2/$b.o" >"$2/$b.log" 2>&1 || : >"$2/$b.failed"
' "$NVCC" "${ARCH:-sm_90a}" "$out"
status=0
for f in "${files[@]}"; do
  b=$(printf %s "$f" | tr / _)
  if [ -f "$out/$b.failed" ]; then status=1; echo "FAILED $f"; else echo "ok     $f"; fi
  [ -s "$out/$b.log" ] && sed 's/^/    /' "$out/$b.log"
done
exit $status
