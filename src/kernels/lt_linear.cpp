// lt_linear.cpp — see lt_linear.h. In cuBLASLt's column-major terms a problem is D (N x M, ld ldc) =
// op(A) · B with A = the weight read as K x N (ld lda) and op(A) = A^T, B = x read as K x M (ld ldb), bf16
// data, fp32 accumulation and scale, C = D, beta = 0 (the layouts of branch lt-probe's cublaslt_probe.cu), or
// beta = 1 in place for an accumulating launch (lt_linear_out's accumulate).
#include "kernels/lt_linear.h"

#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/core/InferenceMode.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <tuple>

#include "core/error.h"
#include "kernels/aten_ops.h"
#include "kernels/timing_events.h"

namespace specpress::kernels {
namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;
constexpr int kHeuristicResults = 16;
constexpr int kSplitKBases = 4;                   // heuristic results that get split-K variants
constexpr int32_t kSplitKs[] = {1, 2, 3, 4, 6, 8};
constexpr double kTolerance = 2e-2;               // max |candidate - at::mm_out| <= kTolerance * max |at::mm_out|
// kOn: a plan must beat at::mm_out alone by more than this fraction (SPECPRESS_LT_MIN_GAIN, in percent; default 3).
// Alone gains below that did not carry into the verify step: the qkv plans, 1.7-2.3% faster than at::mm_out alone,
// made 4B verify 25 us and 8B verify 15 us slower than at::mm_out in the step (docs/PERF.md, seventeenth pass).
double min_gain() {
  static const double gain = [] {
    const char* env = std::getenv("SPECPRESS_LT_MIN_GAIN");
    if (env == nullptr || *env == '\0') return 0.03;
    char* end = nullptr;
    const double v = std::strtod(env, &end);
    if (end == env || *end != '\0' || !(v >= 0 && v <= 100))
      fail("SPECPRESS_LT_MIN_GAIN: expected a percentage 0 .. 100, found '{}'", env);
    return v / 100.0;
  }();
  return gain;
}
constexpr int kMinLaunchesPerReplay = 32;         // a timed replay: passes over the weights until this many
constexpr double kMinBytesPerReplay = 1073741824; // launches or this many weight bytes
constexpr int kTimedReplays = 3;                  // after one warm-up replay; the best counts
constexpr uint32_t kMaxAlignment = 256;           // cuBLASLt's default (and largest) alignment preference

void check_lt(cublasStatus_t s, const char* call) {
  if (s != CUBLAS_STATUS_SUCCESS) fail("cuBLASLt {}: {} ({})", call, cublasLtGetStatusName(s), cublasLtGetStatusString(s));
}

// ---- the SPECPRESS_LT_TUNE switch

struct TuningName {
  const char* name;
  LtTuning tuning;
};
constexpr TuningName kTuningNames[] = {{"0", LtTuning::kOff}, {"1", LtTuning::kOn}, {"always", LtTuning::kAlways}};

LtTuning tuning_from_env() {
  const char* env = std::getenv("SPECPRESS_LT_TUNE");
  if (env == nullptr || *env == '\0') return LtTuning::kOn;
  for (const TuningName& t : kTuningNames)
    if (std::strcmp(env, t.name) == 0) return t.tuning;
  fail("SPECPRESS_LT_TUNE={}: expected 0 (at::mm_out only), 1 (tuned cuBLASLt plans where they are faster; the "
       "default) or always (a cuBLASLt plan for every tuned problem)",
       env);
}
// -1 until read: SPECPRESS_LT_TUNE is read on first use, not at static initialisation, so that a bad value
// fails as an error (and again on the next use, unless set_lt_tuning has replaced it).
std::atomic<int> g_tuning{-1};

// ---- descriptors

struct DescDestroy {
  void operator()(cublasLtMatmulDescOpaque_t* d) const { cublasLtMatmulDescDestroy(d); }
};
struct LayoutDestroy {
  void operator()(cublasLtMatrixLayoutOpaque_t* l) const { cublasLtMatrixLayoutDestroy(l); }
};
struct PreferenceDestroy {
  void operator()(cublasLtMatmulPreferenceOpaque_t* p) const { cublasLtMatmulPreferenceDestroy(p); }
};
using DescPtr = std::unique_ptr<cublasLtMatmulDescOpaque_t, DescDestroy>;
using LayoutPtr = std::unique_ptr<cublasLtMatrixLayoutOpaque_t, LayoutDestroy>;
using PreferencePtr = std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, PreferenceDestroy>;

struct LtKey {
  int64_t M, N, K, lda, ldb, ldc;
  int device;
  bool operator<(const LtKey& o) const {
    return std::tie(M, N, K, lda, ldb, ldc, device) < std::tie(o.M, o.N, o.K, o.lda, o.ldb, o.ldc, o.device);
  }
};

LayoutPtr make_layout(int64_t rows, int64_t cols, int64_t ld) {
  cublasLtMatrixLayout_t l = nullptr;
  check_lt(cublasLtMatrixLayoutCreate(&l, CUDA_R_16BF, static_cast<uint64_t>(rows), static_cast<uint64_t>(cols), ld),
           "cublasLtMatrixLayoutCreate");
  return LayoutPtr(l);
}

// The matmul and layout descriptors of one problem (see the top of the file).
struct LtProblem {
  DescPtr desc;
  LayoutPtr a, b, c;
  explicit LtProblem(const LtKey& k) {
    cublasLtMatmulDesc_t d = nullptr;
    check_lt(cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
    desc.reset(d);
    const int32_t transpose = CUBLAS_OP_T, keep = CUBLAS_OP_N;
    check_lt(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof transpose),
             "cublasLtMatmulDescSetAttribute(TRANSA)");
    check_lt(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSB, &keep, sizeof keep),
             "cublasLtMatmulDescSetAttribute(TRANSB)");
    a = make_layout(k.K, k.N, k.lda);
    b = make_layout(k.K, k.M, k.ldb);
    c = make_layout(k.N, k.M, k.ldc);
  }
};

// Pointer alignments in bytes (powers of two up to kMaxAlignment) of the weight (A), x (B) and out (C, D).
struct Alignment {
  uint32_t a = kMaxAlignment, b = kMaxAlignment, c = kMaxAlignment;
  // Whether a plan tuned with these alignments may run on pointers aligned as `p`.
  bool allows(const Alignment& p) const { return a <= p.a && b <= p.b && c <= p.c; }
};
uint32_t alignment_of(const at::Tensor& t) {
  const auto address = reinterpret_cast<uintptr_t>(t.data_ptr());
  uint32_t al = kMaxAlignment;
  while (al > 1 && address % al != 0) al /= 2;
  return al;
}
Alignment alignment_of(const at::Tensor& out, const at::Tensor& x, const at::Tensor& weight) {
  return {alignment_of(weight), alignment_of(x), alignment_of(out)};
}

// What a plan runs: the problem's descriptors and the chosen algorithm. `problem` is null when at::mm_out won.
struct LtEntry {
  std::unique_ptr<LtProblem> problem;
  cublasLtMatmulAlgo_t algo{};
  bool plain = true;         // plain launches use the plan (false: kept for accumulating launches only)
  bool accumulates = false;  // the plan was also checked with beta = 1 (tune_linear's `accumulates`)
  Alignment alignment;
  size_t record = 0;  // index in Registry::records
};

struct DeviceLt {
  cublasLtHandle_t handle = nullptr;
  // kWorkspaceBytes, uint8, one per stream that has run a plan: products on two streams at once (the fast
  // engine's draft injection beside the verify forward) must not share one
  std::map<cudaStream_t, at::Tensor> workspaces;
};

struct Registry {
  std::mutex mu;
  std::map<int, DeviceLt> devices;
  std::map<LtKey, LtEntry> entries;
  std::vector<LtTuneRecord> records;
  std::atomic<int64_t> launches{0};
};
// Never destroyed: the handles and workspaces live until the process ends (a static destructor could run
// after the caching allocator or the CUDA context is gone).
Registry& registry() {
  static Registry* r = new Registry();
  return *r;
}

// The device's handle, made on first use. Call with r.mu held.
DeviceLt& device_state(Registry& r, const at::Device& device) {
  DeviceLt& d = r.devices[device.index()];
  if (d.handle == nullptr) {
    cublasLtHandle_t h = nullptr;
    check_lt(cublasLtCreate(&h), "cublasLtCreate");
    d.handle = h;
  }
  return d;
}

// The workspace of `stream` (the current stream of `device`), allocated by its first planned product, which must
// not be inside a graph capture (the engine's warm-up runs every body before capturing it). Call with r.mu held.
void* workspace_of(DeviceLt& d, cudaStream_t stream, const at::Device& device) {
  const auto it = d.workspaces.find(stream);
  if (it != d.workspaces.end()) return it->second.data_ptr();
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  check_cuda(cudaStreamIsCapturing(stream, &capturing), "cudaStreamIsCapturing");
  if (capturing != cudaStreamCaptureStatusNone)
    fail("cuBLASLt plans: the first planned matmul on a stream is inside a graph capture; run the captured work "
         "once before capturing it, which allocates the stream's workspace");
  at::Tensor w = at::empty({static_cast<int64_t>(kWorkspaceBytes)}, at::TensorOptions().dtype(at::kByte).device(device));
  return d.workspaces.emplace(stream, std::move(w)).first->second.data_ptr();
}

// 2-D bf16 CUDA tensors on one device, unit column strides, row strides that cuBLASLt layouts take.
bool lt_layout(const at::Tensor& out, const at::Tensor& x, const at::Tensor& w) {
  auto rows_of_bf16 = [](const at::Tensor& t) {
    return t.defined() && t.is_cuda() && t.dim() == 2 && t.scalar_type() == at::kBFloat16 && t.stride(1) == 1 &&
           t.size(0) >= 1 && t.size(1) >= 1;
  };
  if (!rows_of_bf16(out) || !rows_of_bf16(x) || !rows_of_bf16(w)) return false;
  const int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  return w.size(1) == K && out.size(0) == M && out.size(1) == N && x.device() == w.device() &&
         out.device() == x.device() && w.stride(0) >= K && x.stride(0) >= K && out.stride(0) >= N;
}

LtKey key_of(const at::Tensor& out, const at::Tensor& x, const at::Tensor& w) {
  return {x.size(0), w.size(0), x.size(1), w.stride(0), x.stride(0), out.stride(0), static_cast<int>(x.device().index())};
}

cublasStatus_t launch(cublasLtHandle_t handle, void* workspace, const LtProblem& p, const cublasLtMatmulAlgo_t& algo,
                      const at::Tensor& out, const at::Tensor& x, const at::Tensor& w, cudaStream_t stream,
                      bool accumulate = false) {
  static const float one = 1.f, zero = 0.f;
  return cublasLtMatmul(handle, p.desc.get(), &one, w.data_ptr(), p.a.get(), x.data_ptr(), p.b.get(),
                        accumulate ? &one : &zero, out.data_ptr(), p.c.get(), out.data_ptr(), p.c.get(), &algo,
                        workspace, kWorkspaceBytes, stream);
}

// ---- algorithm descriptions

template <typename T> long long config_of(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attr) {
  T value{};
  size_t written = 0;
  if (cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, &value, sizeof value, &written) != CUBLAS_STATUS_SUCCESS)
    return -1;
  return static_cast<long long>(value);
}

const char* reduction_name(long long scheme) {
  switch (scheme) {
    case CUBLASLT_REDUCTION_SCHEME_NONE: return "none";
    case CUBLASLT_REDUCTION_SCHEME_INPLACE: return "in-place";
    case CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE: return "compute-type";
    case CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE: return "output-type";
  }
  return "?";
}

std::string describe_algo(const cublasLtMatmulAlgo_t& a, size_t workspace) {
  return fmt::format("algo {} tile {} split-K {} reduction {} stages {} swizzle {} custom {} inner-shape {} cluster {}, "
                     "workspace {} B",
                     config_of<int32_t>(a, CUBLASLT_ALGO_CONFIG_ID), config_of<uint32_t>(a, CUBLASLT_ALGO_CONFIG_TILE_ID),
                     config_of<int32_t>(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM),
                     reduction_name(config_of<uint32_t>(a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME)),
                     config_of<uint32_t>(a, CUBLASLT_ALGO_CONFIG_STAGES_ID),
                     config_of<uint32_t>(a, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING),
                     config_of<uint32_t>(a, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION),
                     config_of<uint16_t>(a, CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID),
                     config_of<uint16_t>(a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID), workspace);
}

// ---- tuning

struct Candidate {
  cublasLtMatmulAlgo_t algo;
  size_t workspace;
  std::string origin;  // "heuristic #i" or "heuristic #i, split-K s / reduction"
};

// The heuristic's results within the workspace (never the in-place reduction) and split-K variants of its
// first kSplitKBases, each accepted by cublasLtMatmulAlgoCheck, without duplicates.
std::vector<Candidate> candidates_of(cublasLtHandle_t handle, const LtProblem& p, const Alignment& align) {
  cublasLtMatmulPreference_t raw = nullptr;
  check_lt(cublasLtMatmulPreferenceCreate(&raw), "cublasLtMatmulPreferenceCreate");
  PreferencePtr pref(raw);
  const uint64_t max_workspace = kWorkspaceBytes;
  check_lt(cublasLtMatmulPreferenceSetAttribute(raw, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_workspace,
                                                sizeof max_workspace),
           "cublasLtMatmulPreferenceSetAttribute(MAX_WORKSPACE_BYTES)");
  const std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t> alignments[] = {
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align.a},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align.b},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align.c},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align.c}};
  for (const auto& [attr, bytes] : alignments)
    check_lt(cublasLtMatmulPreferenceSetAttribute(raw, attr, &bytes, sizeof bytes),
             "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT)");
  cublasLtMatmulHeuristicResult_t results[kHeuristicResults] = {};
  int found = 0;
  const cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(handle, p.desc.get(), p.a.get(), p.b.get(), p.c.get(),
                                                          p.c.get(), raw, kHeuristicResults, results, &found);
  if (s == CUBLAS_STATUS_NOT_SUPPORTED) found = 0;  // no cuBLASLt algorithm for this problem: at::mm_out only
  else check_lt(s, "cublasLtMatmulAlgoGetHeuristic");

  std::vector<Candidate> out;
  auto add = [&](const cublasLtMatmulAlgo_t& algo, size_t workspace, std::string origin) {
    if (workspace > kWorkspaceBytes) return;
    if (config_of<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME) == CUBLASLT_REDUCTION_SCHEME_INPLACE) return;
    for (const Candidate& c : out)
      if (std::memcmp(&c.algo, &algo, sizeof algo) == 0) return;
    out.push_back({algo, workspace, std::move(origin)});
  };
  for (int i = 0; i < found; ++i)
    if (results[i].state == CUBLAS_STATUS_SUCCESS) add(results[i].algo, results[i].workspaceSize, fmt::format("heuristic #{}", i));
  const std::vector<uint32_t> split_schemes = {CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE, CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE};
  const std::vector<uint32_t> no_split_scheme = {CUBLASLT_REDUCTION_SCHEME_NONE};
  for (int i = 0; i < std::min(found, kSplitKBases); ++i) {
    if (results[i].state != CUBLAS_STATUS_SUCCESS) continue;
    for (int32_t splits : kSplitKs) {
      for (uint32_t scheme : splits == 1 ? no_split_scheme : split_schemes) {
        cublasLtMatmulAlgo_t algo = results[i].algo;
        cublasLtMatmulHeuristicResult_t check{};
        if (cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits, sizeof splits) !=
                CUBLAS_STATUS_SUCCESS ||
            cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &scheme, sizeof scheme) !=
                CUBLAS_STATUS_SUCCESS ||
            cublasLtMatmulAlgoCheck(handle, p.desc.get(), p.a.get(), p.b.get(), p.c.get(), p.c.get(), &algo, &check) !=
                CUBLAS_STATUS_SUCCESS)
          continue;
        add(algo, check.workspaceSize, fmt::format("heuristic #{}, split-K {} / {}", i, splits, reduction_name(scheme)));
      }
    }
  }
  return out;
}

// µs per product of one(w) (one launch of out = x · w^T), as replays of a CUDA graph of `passes` passes over
// all `weights` on the current stream: a warm-up replay, then the best of kTimedReplays. A graph, as the
// engine runs them, so that host launch costs (at::mm_out's dispatch) do not count.
template <typename One>
double graph_us_per_product(One&& one, const std::vector<at::Tensor>& weights, int passes, cudaStream_t stream,
                            TimingEvents& ev) {
  at::cuda::CUDAGraph graph;
  graph.capture_begin();
  try {
    for (int p = 0; p < passes; ++p)
      for (const at::Tensor& w : weights) one(w);
  } catch (...) {
    try {
      graph.capture_end();  // a capture left open would break every later CUDA call of the process
    } catch (...) {
    }
    throw;
  }
  graph.capture_end();
  graph.replay();
  double best = std::numeric_limits<double>::infinity();
  for (int t = 0; t < kTimedReplays; ++t) {
    check_cuda(cudaEventRecord(ev.start, stream), "cudaEventRecord");
    graph.replay();
    check_cuda(cudaEventRecord(ev.stop, stream), "cudaEventRecord");
    best = std::min(best, static_cast<double>(ev.elapsed_ms()));
  }
  return best * 1e3 / (static_cast<double>(passes) * static_cast<double>(weights.size()));
}

std::string label_suffix(const std::string& label) { return label.empty() ? std::string() : " (" + label + ")"; }

void add_label(LtTuneRecord& record, const std::string& label) {
  if (label.empty() || (", " + record.label + ", ").find(", " + label + ", ") != std::string::npos) return;
  record.label += (record.label.empty() ? "" : ", ") + label;
}

}  // namespace

LtTuning lt_tuning() {
  int t = g_tuning.load(std::memory_order_relaxed);
  if (t < 0) {
    t = static_cast<int>(tuning_from_env());
    g_tuning.store(t, std::memory_order_relaxed);
  }
  return static_cast<LtTuning>(t);
}
void set_lt_tuning(LtTuning tuning) { g_tuning.store(static_cast<int>(tuning), std::memory_order_relaxed); }
const char* lt_tuning_name(LtTuning tuning) {
  for (const TuningName& t : kTuningNames)
    if (t.tuning == tuning) return t.name;
  return "?";
}

bool lt_linear_out(const at::Tensor& out, const at::Tensor& x, const at::Tensor& weight, bool accumulate) {
  if (lt_tuning() == LtTuning::kOff) return false;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  if (r.entries.empty() || !lt_layout(out, x, weight)) return false;
  const auto it = r.entries.find(key_of(out, x, weight));
  if (it == r.entries.end() || it->second.problem == nullptr) return false;
  const LtEntry& e = it->second;
  if (accumulate ? !e.accumulates : !e.plain) return false;  // not checked with beta = 1 / kept for accumulating only
  if (!e.alignment.allows(alignment_of(out, x, weight))) return false;
  DeviceLt& d = r.devices.at(static_cast<int>(x.device().index()));
  const c10::cuda::CUDAGuard device_guard(x.device());
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream(x.device().index()).stream();
  const cublasStatus_t s =
      launch(d.handle, workspace_of(d, stream, x.device()), *e.problem, e.algo, out, x, weight, stream, accumulate);
  if (s != CUBLAS_STATUS_SUCCESS)
    fail("cuBLASLt cublasLtMatmul (plan for M={} N={} K={}: {}): {} ({})", x.size(0), weight.size(0),
         x.size(1), r.records[e.record].algo, cublasLtGetStatusName(s), cublasLtGetStatusString(s));
  r.launches.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void tune_linear(const at::Tensor& out, const at::Tensor& x, const std::vector<at::Tensor>& weights,
                 const std::string& label, bool accumulates) {
  const LtTuning tuning = lt_tuning();
  if (tuning == LtTuning::kOff) return;
  (void)min_gain();  // a bad SPECPRESS_LT_MIN_GAIN fails here, at the first tuning, whatever the candidates
  if (weights.empty()) fail("tune_linear{}: no weights", label_suffix(label));
  const at::Tensor& w0 = weights[0];
  for (size_t i = 1; i < weights.size(); ++i) {
    const at::Tensor& w = weights[i];
    if (!w.sizes().equals(w0.sizes()) || !w.strides().equals(w0.strides()) || w.scalar_type() != w0.scalar_type() ||
        w.device() != w0.device())
      fail("tune_linear{}: weight {} differs from weight 0 in shape, strides, dtype or device (one problem per call)",
           label_suffix(label), i);
  }
  if (!lt_layout(out, x, w0)) return;  // not a layout plans take: linear_out keeps at::mm_out for it
  Alignment align = alignment_of(out, x, w0);
  for (const at::Tensor& w : weights) align.a = std::min(align.a, alignment_of(w));
  const LtKey key = key_of(out, x, w0);
  Registry& r = registry();
  {
    std::lock_guard<std::mutex> lock(r.mu);
    const auto it = r.entries.find(key);
    if (it != r.entries.end() && it->second.alignment.allows(align) &&
        (!accumulates || (it->second.problem != nullptr && it->second.accumulates))) {
      add_label(r.records[it->second.record], label);
      return;
    }
  }

  c10::InferenceMode inference;  // x and out may be inference tensors
  const c10::cuda::CUDAGuard device_guard(x.device());
  const c10::DeviceIndex dev = x.device().index();
  std::optional<c10::cuda::CUDAStreamGuard> side;  // graphs cannot be captured on the default stream
  if (at::cuda::getCurrentCUDAStream(dev) == c10::cuda::getDefaultCUDAStream(dev)) {
    at::cuda::getCurrentCUDAStream(dev).synchronize();
    side.emplace(c10::cuda::getStreamFromPool(false, dev));
  }
  const c10::cuda::CUDAStream stream = at::cuda::getCurrentCUDAStream(dev);
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  check_cuda(cudaStreamIsCapturing(stream.stream(), &capturing), "cudaStreamIsCapturing");
  if (capturing != cudaStreamCaptureStatusNone)
    fail("tune_linear{}: called while the stream is capturing a CUDA graph (tune before the capture)", label_suffix(label));
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    DeviceLt& d = device_state(r, x.device());  // std::map: the element and its workspaces stay where they are
    handle = d.handle;
    workspace = workspace_of(d, stream.stream(), x.device());
  }
  auto problem = std::make_unique<LtProblem>(key);

  // A fixed test input (no RNG state is touched), and at::mm_out's product on the first weight as reference.
  x.copy_(at::sin(at::arange(x.numel(), at::TensorOptions().dtype(at::kFloat).device(x.device())) * 0.37).reshape(x.sizes()));
  auto mm = [&](const at::Tensor& w) {
    at::Tensor o = out;  // mm_out takes a non-const reference to the output handle
    at::mm_out(o, x, w.t());
  };
  mm(w0);
  const at::Tensor ref = out.to(at::kFloat);
  const double ref_max = ref.abs().max().item<double>();
  // the old out of an accumulating check: a fixed pattern of the product's magnitude
  const at::Tensor residual =
      (at::cos(at::arange(out.numel(), at::TensorOptions().dtype(at::kFloat).device(out.device())) * 0.11) *
       (std::isfinite(ref_max) ? ref_max : 1.0))
          .reshape(out.sizes())
          .to(out.scalar_type());
  const double residual_max = residual.to(at::kFloat).abs().max().item<double>();

  LtTuneRecord rec;
  rec.label = label;
  rec.M = key.M, rec.N = key.N, rec.K = key.K, rec.lda = key.lda, rec.ldb = key.ldb, rec.ldc = key.ldc;
  rec.device = key.device;
  rec.weights = static_cast<int64_t>(weights.size());

  const double weight_bytes = 2.0 * static_cast<double>(key.N) * static_cast<double>(key.K);
  const double n = static_cast<double>(weights.size());
  int passes = 1;
  while (passes * n < kMinLaunchesPerReplay && passes * n * weight_bytes < kMinBytesPerReplay) ++passes;
  TimingEvents ev;
  const cudaStream_t st = stream.stream();
  // at::mm_out timed first and last (clock drift over the candidates), its best time counts
  rec.mm_us = graph_us_per_product(mm, weights, passes, st, ev);

  const std::vector<Candidate> candidates = std::isfinite(ref_max) ? candidates_of(handle, *problem, align) : std::vector<Candidate>();
  rec.candidates = static_cast<int>(candidates.size());
  const Candidate* best = nullptr;
  rec.lt_us = std::numeric_limits<double>::infinity();
  for (const Candidate& c : candidates) {
    // correct first: two runs on the first weight, poisoned output before each, bitwise equal and close to at::mm_out
    out.fill_(NAN);
    if (launch(handle, workspace, *problem, c.algo, out, x, w0, st) != CUBLAS_STATUS_SUCCESS) {
      ++rec.rejected_launch;
      continue;
    }
    const at::Tensor first = out.clone();
    out.fill_(NAN);
    if (launch(handle, workspace, *problem, c.algo, out, x, w0, st) != CUBLAS_STATUS_SUCCESS) {
      ++rec.rejected_launch;
      continue;
    }
    if (!at::equal(first, out)) {
      ++rec.rejected_nondeterministic;
      continue;
    }
    const double diff = (first.to(at::kFloat) - ref).abs().max().item<double>();
    if (!(diff <= kTolerance * ref_max)) {
      ++rec.rejected_inaccurate;
      continue;
    }
    if (accumulates) {  // out += x · w^T in place (beta = 1, C = D), against the reference plus the old out
      out.copy_(residual);
      if (launch(handle, workspace, *problem, c.algo, out, x, w0, st, /*accumulate=*/true) != CUBLAS_STATUS_SUCCESS) {
        ++rec.rejected_launch;
        continue;
      }
      const double acc_diff = (out.to(at::kFloat) - (ref + residual.to(at::kFloat))).abs().max().item<double>();
      if (!(acc_diff <= kTolerance * (ref_max + residual_max))) {
        ++rec.rejected_inaccurate;
        continue;
      }
    }
    const double us = graph_us_per_product(
        [&](const at::Tensor& w) { check_lt(launch(handle, workspace, *problem, c.algo, out, x, w, st), "cublasLtMatmul (tuning)"); },
        weights, passes, st, ev);
    if (c.origin == "heuristic #0") rec.heuristic_us = us;
    if (us < rec.lt_us) {
      rec.lt_us = us;
      best = &c;
    }
  }
  rec.mm_us = std::min(rec.mm_us, graph_us_per_product(mm, weights, passes, st, ev));
  stream.synchronize();

  if (best == nullptr) {
    rec.lt_us = 0;
    rec.algo = !std::isfinite(ref_max)  ? "none: at::mm_out's product on the test input is not finite"
               : candidates.empty()     ? "none: cuBLASLt offered no candidate"
                                        : "none: every cuBLASLt candidate was rejected";
  } else {
    rec.algo = describe_algo(best->algo, best->workspace) + " [" + best->origin + "]";
    const bool won = tuning == LtTuning::kAlways || rec.lt_us < rec.mm_us * (1.0 - min_gain());
    rec.plan = won || accumulates;
    rec.accumulate_only = !won && accumulates;
  }
  LtEntry entry;
  entry.alignment = align;
  if (rec.plan) {
    entry.problem = std::move(problem);
    entry.algo = best->algo;
    entry.plain = !rec.accumulate_only;
    entry.accumulates = accumulates;
  }
  std::lock_guard<std::mutex> lock(r.mu);
  const auto it = r.entries.find(key);
  if (it != r.entries.end()) {  // tuned before with more aligned pointers: this plan replaces it
    entry.record = it->second.record;
    add_label(rec, r.records[entry.record].label);
    r.records[entry.record] = rec;
    it->second = std::move(entry);
  } else {
    entry.record = r.records.size();
    r.records.push_back(rec);
    r.entries.emplace(key, std::move(entry));
  }
}

std::vector<LtTuneRecord> lt_tune_records() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  return r.records;
}

std::string format_lt_record(const LtTuneRecord& rec) {
  std::string s = fmt::format("{}: M={} N={} K={} (lda {} ldb {} ldc {}, {} weights): {}", rec.label.empty() ? "-" : rec.label,
                              rec.M, rec.N, rec.K, rec.lda, rec.ldb, rec.ldc, rec.weights,
                              !rec.plan ? "at::mm_out" : rec.accumulate_only ? "cuBLASLt for out += only, at::mm_out otherwise"
                                                                               : "cuBLASLt");
  if (rec.lt_us > 0)
    s += fmt::format("; fastest cuBLASLt {:.2f} us ({:+.1f}% vs at::mm_out {:.2f} us), heuristic's first {:.2f} us: {}",
                     rec.lt_us, 100.0 * (rec.lt_us / rec.mm_us - 1.0), rec.mm_us, rec.heuristic_us, rec.algo);
  else
    s += fmt::format("; at::mm_out {:.2f} us; {}", rec.mm_us, rec.algo);
  s += fmt::format("; {} candidates, rejected {} launch / {} nondeterministic / {} inaccurate", rec.candidates,
                   rec.rejected_launch, rec.rejected_nondeterministic, rec.rejected_inaccurate);
  return s;
}

int64_t lt_launch_count() { return registry().launches.load(std::memory_order_relaxed); }

void clear_lt_plans() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.entries.clear();
  r.records.clear();
}

}  // namespace specpress::kernels
