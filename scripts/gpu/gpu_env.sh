# gpu_env.sh — sourced, on the GPU machine, by fast_checks.sh, run_checks.sh, ab_compare.sh and env_ab.sh:
# the one place that points a build at the machine's PyTorch, the carried Debian deps (.gpu-deps) and the
# shared data (.gpu-shared, unpacked once; the demo tokenizer copied from it), and gpu_build, the one
# configure + build command for a CUDA tree.
# Sets root, deps, shared and torch_prefix; exports LD_LIBRARY_PATH.
# Env: SPECPRESS_GPU_DEPS / SPECPRESS_GPU_SHARED (default ./.gpu-deps, ./.gpu-shared).
root=$(pwd)
deps=${SPECPRESS_GPU_DEPS:-$root/.gpu-deps}
shared=${SPECPRESS_GPU_SHARED:-$root/.gpu-shared}
SPECPRESS_GPU_SHARED=$shared bash scripts/gpu/unpack_shared.sh
# the demo pair's tokenizer.json (git-ignored; scripts/setup.sh fetches it here), so that its tests run, not skip
SHARED=$shared bash scripts/fetch_demo_tokenizer.sh demo/target >/dev/null
export LD_LIBRARY_PATH=$deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
torch_prefix=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')

# gpu_build SRC BUILD_DIR LOG_PREFIX TARGET...: configures SRC into BUILD_DIR (Release, CUDA on, without the
# AddressSanitizer fuzz target; the HTTP server only where the carried deps have cpp-httplib) and builds the
# targets, logging to LOG_PREFIX.configure.log and LOG_PREFIX.build.log. On failure it prints the log's errors
# and returns 1.
gpu_build() {
  local src=$1 dir=$2 log=$3
  shift 3
  cmake -S "$src" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSPECPRESS_CUDA=ON -DSPECPRESS_FUZZ_ASAN=OFF -DSPECPRESS_SERVER=AUTO \
    -DCMAKE_PREFIX_PATH="$torch_prefix;$deps/usr" -DSPECPRESS_SHARED_DIR="$shared" >"$log.configure.log" 2>&1 ||
    { echo "configuring $src failed:"; tail -40 "$log.configure.log"; return 1; }
  ninja -C "$dir" -j16 "$@" >"$log.build.log" 2>&1 ||
    { echo "building $* in $dir failed:"; grep -E 'error|FAILED' -A4 "$log.build.log" | head -80; return 1; }
}
