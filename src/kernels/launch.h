// launch.h — how src/kernels launches its kernels (torch-free): cudaLaunchKernelEx with, when enabled,
// programmatic dependent launch (PDL, Hopper). With PDL a kernel may be scheduled while the previous
// kernel of the stream is still running. Every kernel of src/kernels waits (pdl_wait, common.cuh) until
// the previous kernel has completed and its writes are visible, before any read of earlier results or
// any write, and only then lets the next kernel be scheduled (pdl_trigger): the small kernels at once
// (pdl_begin), the GEMV once its warps have read all their weights (the RMSNorm and the wgmma products let it be
// scheduled before their own wait: rmsnorm.cu, gemm_wg16.h). One exception, with its contract in
// attention.h: the fused small-T attention reads the length and the older cache rows before its wait,
// which holds because no kernel that may still run then (the qkv projection, the kernels before it that let it
// launch early) writes either. What overlaps is the next kernels' launch, block scheduling and any prologue that
// only touches constant data (the GEMV loads its first step of weights before it waits, the RMSNorm its weight), in
// the SM slots the running kernel leaves free: during an attention or q/k-norm kernel, or a GEMV's tail. (When
// every kernel let the next one in at its start, the GEMVs ran slower: docs/PERF.md.) A kernel launched without PDL
// (cuBLAS, or any kernel when it is off) serialises as usual, except for the launch-completion edges below. Graphs keep the setting
// they were captured with (capture records the launch attribute). By default (SPECPRESS_PDL=decode) it is on
// in the one-row decode step only: the fast engine captures its verify and draft graphs, whose matmuls are
// cuBLAS(Lt) kernels, without it (FastEngine::capture_graphs), which measured faster with the tuned cuBLASLt
// plans (docs/PERF.md, sixth pass). SPECPRESS_PDL=1 (set_pdl_in_multirow_steps(true)) puts it in every
// step, SPECPRESS_PDL=0 (set_pdl(false)) nowhere. With PDL on, the engine also rewrites the ordinary edges of
// its captured graphs from a kernel that is not ours (a cuBLAS(Lt) product, say) into ours into launch-completion
// edges (graph_edges.h, SPECPRESS_LC_EDGES): such a kernel may be resident while that one still runs, and the
// same contract (wait before reading earlier results or writing) keeps it
// correct. Folded norms (model/qwen3_fast.h) add a second chain beside the products: the row factors' kernel
// (kernels::row_rms) on a side stream, joined into its consumer by an ordinary edge (ours into ours, never
// relaxed), so the consumer still starts only after it has completed.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace specpress::kernels {

// A fast-path environment variable set to none of its values: fails naming it (std::invalid_argument, which the
// CLI prints as an error and exits 1 on), as SPECPRESS_GEMM and the switches of core/env_switch.h do. This header
// is torch- and fmt-free (the .cu files include it), hence not specpress::fail.
[[noreturn]] inline void bad_env_value(const char* name, const char* value, const char* expected) {
  throw std::invalid_argument(std::string(name) + ": expected " + expected + ", found '" + value + "'");
}

// A fast-path environment variable holding a decimal integer in lo .. hi: `fallback` when unset or empty, and
// bad_env_value (naming it and `expected`) for anything else.
inline int env_int(const char* name, int lo, int hi, int fallback, const char* expected) {
  const char* env = std::getenv(name);
  if (env == nullptr || *env == '\0') return fallback;
  char* end = nullptr;
  const long v = std::strtol(env, &end, 10);
  if (*env < '0' || *env > '9' || *end != '\0' || v < lo || v > hi) bad_env_value(name, env, expected);
  return static_cast<int>(v);
}
// The same for a variable that takes one of a few values (`allowed`, ascending).
inline int env_int_of(const char* name, std::initializer_list<int> allowed, int fallback, const char* expected) {
  const int v = env_int(name, *allowed.begin(), *(allowed.end() - 1), fallback, expected);
  if (v != fallback && std::find(allowed.begin(), allowed.end(), v) == allowed.end())
    bad_env_value(name, std::getenv(name), expected);
  return v;
}

// SPECPRESS_PDL as (on, in the multi-row steps too); unset or empty: decode; an unknown value fails, naming it.
inline std::pair<bool, bool> pdl_from_env() {
  const char* env = std::getenv("SPECPRESS_PDL");
  if (env == nullptr || *env == '\0' || std::strcmp(env, "decode") == 0) return {true, false};
  if (std::strcmp(env, "1") == 0) return {true, true};
  if (std::strcmp(env, "0") == 0) return {false, false};
  bad_env_value("SPECPRESS_PDL", env, "decode, 1 or 0");
}
inline std::pair<bool, bool>& pdl_settings() {
  static std::pair<bool, bool> settings = pdl_from_env();  // read once
  return settings;
}
inline bool& pdl_flag() { return pdl_settings().first; }
inline bool pdl_enabled() { return pdl_flag(); }
inline void set_pdl(bool on) { pdl_flag() = on; }
inline bool& pdl_multirow_flag() { return pdl_settings().second; }
// Whether the engine's multi-row steps (verify, draft) use PDL when it is on.
inline bool pdl_in_multirow_steps() { return pdl_multirow_flag(); }
inline void set_pdl_in_multirow_steps(bool on) { pdl_multirow_flag() = on; }

// SPECPRESS_LC_EDGES (default 1): with PDL on, the fast engine's graphs start each of our kernels once every
// block of the kernel before it has begun (graph_edges.h), where PDL does not already chain the two: after
// the cuBLAS(Lt) products of verify and draft, and in cuBLAS matmul mode. 0 turns it off; PDL off turns it off;
// another value fails, naming the variable.
inline bool& lc_edges_flag() {
  static bool on = [] {
    const char* env = std::getenv("SPECPRESS_LC_EDGES");
    if (env == nullptr || *env == '\0' || std::strcmp(env, "1") == 0) return true;
    if (std::strcmp(env, "0") == 0) return false;
    bad_env_value("SPECPRESS_LC_EDGES", env, "1 or 0");
  }();
  return on;
}
inline bool lc_edges_enabled() { return lc_edges_flag() && pdl_enabled(); }

// SPECPRESS_LC_SKIP: our kernels kept out of that rewrite, so that the edges into them stay ordinary (the kernel
// launches once the product before it has completed). A comma-separated list of silu_mul, rmsnorm, row_rms, argmax,
// attention and wg16, or none; unset or empty: silu_mul. The SwiGLU has nothing to do before its wait, and woke from it
// about 1 us later than an ordinary launch started it: skipping it took 4B verify 3.092-3.100 -> 3.067-3.069 ms and
// 8B 4.691-4.693 -> 4.651, while skipping the attention, which loads the older cache rows before its wait, made
// verify 77-115 us slower, and argmax and rmsnorm were within noise (docs/PERF.md, twenty-second pass).
// wg16 names the wgmma product kernel (gemm_wg16.h), whose SwiGLU form follows a cuBLASLt product in verify.
enum LcKernel : unsigned {
  kLcSiluMul = 1,
  kLcRmsnorm = 2,
  kLcRowRms = 4,
  kLcArgmax = 8,
  kLcAttention = 16,
  kLcWg16 = 32
};
constexpr unsigned kLcSkipDefault = kLcSiluMul;
constexpr std::pair<const char*, unsigned> kLcKernelNames[] = {{"silu_mul", kLcSiluMul}, {"rmsnorm", kLcRmsnorm},
                                                               {"row_rms", kLcRowRms},   {"argmax", kLcArgmax},
                                                               {"attention", kLcAttention}, {"wg16", kLcWg16}};
// The names of a mask's kernels, comma-separated ("none" for none), as SPECPRESS_LC_SKIP takes them.
inline std::string lc_skip_names(unsigned mask) {
  std::string names;
  for (const auto& [n, b] : kLcKernelNames)
    if ((mask & b) != 0) names += (names.empty() ? "" : ",") + std::string(n);
  return names.empty() ? "none" : names;
}
// SPECPRESS_LC_SKIP as a mask of LcKernel bits; a name not in the list fails, naming the variable.
inline unsigned lc_skip_from_env() {
  const char* env = std::getenv("SPECPRESS_LC_SKIP");
  if (env == nullptr || *env == '\0') return kLcSkipDefault;
  if (std::strcmp(env, "none") == 0) return 0;
  std::string expected = "a comma-separated list of";  // the names of kLcKernelNames, or none
  for (const auto& [n, b] : kLcKernelNames) expected += std::string(b == kLcSiluMul ? " " : ", ") + n;
  expected += ", or none";
  unsigned mask = 0;
  const std::string list(env);
  for (size_t begin = 0; begin <= list.size();) {
    const size_t end = std::min(list.find(',', begin), list.size());
    const std::string name = list.substr(begin, end - begin);
    unsigned bit = 0;
    for (const auto& [n, b] : kLcKernelNames)
      if (name == n) bit = b;
    if (bit == 0) bad_env_value("SPECPRESS_LC_SKIP", env, expected.c_str());
    mask |= bit;
    begin = end + 1;
  }
  return mask;
}
inline unsigned lc_skip_mask() {
  static const unsigned mask = lc_skip_from_env();  // read once
  return mask;
}

// While set on this thread, launch_kernel appends each kernel it launches here. The fast engine records its
// graph captures this way to know which kernel nodes are src/kernels' own (graph_edges.h): every one of them
// waits (pdl_wait) before it reads an earlier kernel's results or writes anything (the fused attention's early
// reads, above, being the one documented exception).
inline std::vector<const void*>*& launch_recorder() {
  thread_local std::vector<const void*>* recorder = nullptr;
  return recorder;
}

// While alive, the launches of kernel `k` are not recorded (launch_recorder) if SPECPRESS_LC_SKIP names it, so the
// engine does not rewrite the edges into them. Every launch of a kernel goes through one such scope: the rewrite
// goes by the kernel's function, so one recorded launch would relax the edges into all its nodes.
class LcSkipScope {
 public:
  explicit LcSkipScope(LcKernel k) : saved_(launch_recorder()) {
    if ((lc_skip_mask() & k) != 0) launch_recorder() = nullptr;
  }
  ~LcSkipScope() { launch_recorder() = saved_; }
  LcSkipScope(const LcSkipScope&) = delete;
  LcSkipScope& operator=(const LcSkipScope&) = delete;

 private:
  std::vector<const void*>* saved_;
};

namespace detail {

// The current device's SM count, looked up once (the kernels size one-wave grids and partitions from it).
inline cudaError_t sm_count(int& sms) {
  static int cached = 0;
  if (cached == 0) {
    int dev = 0, n = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev);
    if (e != cudaSuccess) return e;
    cached = n > 0 ? n : 1;
  }
  sms = cached;
  return cudaSuccess;
}

// With cluster_x > 1: thread-block clusters of cluster_x blocks along x (grid.x a multiple of it).
template <typename... Params, typename... Args>
cudaError_t launch_kernel_cluster(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                                  unsigned cluster_x, Args&&... args) {
  if (std::vector<const void*>* recorder = launch_recorder()) recorder->push_back(reinterpret_cast<const void*>(kernel));
  cudaLaunchAttribute attr[2];
  unsigned n = 0;
  if (pdl_enabled()) {
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (cluster_x > 1) {
    attr[n].id = cudaLaunchAttributeClusterDimension;
    attr[n].val.clusterDim.x = cluster_x;
    attr[n].val.clusterDim.y = 1;
    attr[n++].val.clusterDim.z = 1;
  }
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = n > 0 ? attr : nullptr;
  cfg.numAttrs = n;
  return cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

template <typename... Params, typename... Args>
cudaError_t launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                          Args&&... args) {
  return launch_kernel_cluster(kernel, grid, block, smem, stream, 1u, std::forward<Args>(args)...);
}

}  // namespace detail
}  // namespace specpress::kernels
