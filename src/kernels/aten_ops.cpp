// aten_ops.cpp — see aten_ops.h.
#include "kernels/aten_ops.h"

#include <ATen/cuda/CUDAContext.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include <fmt/ranges.h>

#include "core/error.h"
#include "kernels/attention.h"
#include "kernels/decode_step.h"
#include "kernels/gemm_small.h"
#include "kernels/gemm_wg16.h"
#include "kernels/gemv.h"
#include "kernels/gemv_mlp.h"
#include "kernels/gemv_o_gate_up.h"
#include "kernels/launch.h"
#include "kernels/lt_linear.h"
#include "kernels/qk_norm_rope.h"
#include "kernels/rmsnorm.h"
#include "kernels/skinny_gemm.h"
#include "kernels/step_trace.h"
#include "kernels/swiglu.h"

namespace specpress::kernels {

void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail("CUDA error in {}: {}", what, cudaGetErrorString(e));
}

namespace {

cudaStream_t stream() { return at::cuda::getCurrentCUDAStream().stream(); }

void require(const at::Tensor& t, const char* name, at::ScalarType dtype, bool contiguous = true) {
  if (!t.defined()) fail("kernel argument {}: undefined tensor", name);
  if (!t.is_cuda()) fail("kernel argument {}: expected a CUDA tensor", name);
  if (t.scalar_type() != dtype) fail("kernel argument {}: expected {}, found {}", name, at::toString(dtype), at::toString(t.scalar_type()));
  if (contiguous && !t.is_contiguous()) fail("kernel argument {}: expected a contiguous tensor", name);
}

// Rows of a 2-D tensor whose columns are contiguous; returns the row stride.
int64_t row_stride(const at::Tensor& t, const char* name) {
  if (t.dim() != 2 || t.stride(1) != 1) fail("kernel argument {}: expected a 2-D tensor with unit column stride", name);
  return t.stride(0);
}

__nv_bfloat16* bf(const at::Tensor& t) { return reinterpret_cast<__nv_bfloat16*>(t.data_ptr()); }
bool aligned16(const at::Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0; }

// An optional fp32 row factor of `rows` rows (a folded RMSNorm's, row_rms_out); nullptr when undefined.
const float* row_scale_of(const at::Tensor& row_scale, int64_t rows, const char* what) {
  if (!row_scale.defined()) return nullptr;
  require(row_scale, "row_scale", at::kFloat);
  if (row_scale.numel() != rows) fail("{}: row_scale has {} elements for {} rows", what, row_scale.numel(), rows);
  return row_scale.data_ptr<float>();
}

}  // namespace

namespace {
// Checked kernel arguments of rmsnorm_out.
RmsNormArgs rmsnorm_args(const at::Tensor& y, const at::Tensor& x, const at::Tensor& weight, double eps,
                         const at::Tensor& residual, const at::Tensor& sum_out, const at::Tensor& sum_out2) {
  require(x, "rmsnorm x", at::kBFloat16);
  require(y, "rmsnorm y", at::kBFloat16);
  require(weight, "rmsnorm weight", at::kBFloat16);
  const int64_t H = x.size(-1), rows = x.numel() / H;
  if (weight.numel() != H || y.numel() != x.numel()) fail("rmsnorm: shapes of x, weight and y disagree");
  RmsNormArgs a;
  a.x = bf(x);
  a.weight = bf(weight);
  a.y = bf(y);
  a.rows = static_cast<int>(rows);
  a.H = static_cast<int>(H);
  a.eps = static_cast<float>(eps);
  if (residual.defined()) {
    require(residual, "rmsnorm residual", at::kBFloat16);
    if (residual.numel() != x.numel()) fail("rmsnorm: residual shape differs from x");
    a.residual = bf(residual);
    if (sum_out.defined()) {
      require(sum_out, "rmsnorm sum_out", at::kBFloat16);
      a.sum_out = bf(sum_out);
    }
    if (sum_out2.defined()) {
      require(sum_out2, "rmsnorm sum_out2", at::kBFloat16, false);
      a.ld_sum_out2 = row_stride(sum_out2, "rmsnorm sum_out2");
      if (sum_out2.size(0) != rows || sum_out2.size(1) != H) fail("rmsnorm: sum_out2 must be [rows, H]");
      a.sum_out2 = bf(sum_out2);
    }
  } else if (sum_out.defined() || sum_out2.defined()) {
    fail("rmsnorm: sum outputs need a residual");
  }
  return a;
}
}  // namespace

void rmsnorm_out(const at::Tensor& y, const at::Tensor& x, const at::Tensor& weight, double eps,
                 const at::Tensor& residual, const at::Tensor& sum_out, const at::Tensor& sum_out2) {
  check_cuda(rmsnorm(rmsnorm_args(y, x, weight, eps, residual, sum_out, sum_out2), stream()), "rmsnorm");
}

void row_rms_out(const at::Tensor& rs, const at::Tensor& x, double eps, const at::Tensor& tap) {
  require(x, "row_rms x", at::kBFloat16);
  require(rs, "row_rms rs", at::kFloat);
  const int64_t H = x.size(-1), rows = x.numel() / H;
  if (rs.numel() != rows) fail("row_rms: rs has {} elements for {} rows", rs.numel(), rows);
  if (H % 8 != 0 || !aligned16(x)) fail("row_rms: x needs H % 8 == 0 (H = {}) and 16-byte alignment", H);
  RowRmsArgs a;
  a.x = bf(x);
  a.rs = rs.data_ptr<float>();
  a.rows = static_cast<int>(rows);
  a.H = static_cast<int>(H);
  a.eps = static_cast<float>(eps);
  if (tap.defined()) {
    require(tap, "row_rms tap", at::kBFloat16, false);
    a.ld_tap = row_stride(tap, "row_rms tap");
    if (tap.size(0) != rows || tap.size(1) != H) fail("row_rms: tap shape differs from x");
    if (a.ld_tap % 8 != 0 || !aligned16(tap)) fail("row_rms: tap needs a row stride % 8 == 0 and 16-byte alignment");
    a.tap = bf(tap);
  }
  check_cuda(row_rms(a, stream()), "row_rms");
}

namespace {

// The arguments qk_norm_rope_out and context_kv_layers_out share, checked: qkv [T, ld] rows, k_norm (its last dim
// is head_dim), the RoPE table, the position, the caches (head_dim their last dim, capacity the one before it).
QkNormRopeArgs qk_norm_rope_args(const char* who, const at::Tensor& qkv, int64_t nkv, const at::Tensor& k_norm,
                                 const ops::RopeTable& rope, const at::Tensor& pos_base, const at::Tensor& k_cache,
                                 const at::Tensor& v_cache, double eps) {
  require(qkv, "qk_norm_rope qkv", at::kBFloat16, false);
  const int64_t ld = row_stride(qkv, "qk_norm_rope qkv");
  require(k_norm, "k_norm", at::kBFloat16);
  require(pos_base, "pos_base", at::kInt);
  require(k_cache, "k_cache", at::kBFloat16);
  require(v_cache, "v_cache", at::kBFloat16);
  require(rope.cos, "rope cos", at::kFloat);
  require(rope.sin, "rope sin", at::kFloat);
  const int64_t hd = k_norm.size(-1);
  if (!k_cache.sizes().equals(v_cache.sizes())) fail("{}: the K and V caches differ in shape", who);
  if (rope.cos.size(1) != hd) fail("{}: RoPE table width {} != head_dim {}", who, rope.cos.size(1), hd);
  QkNormRopeArgs a;
  a.qkv = bf(qkv);
  a.ld = ld;
  a.T = static_cast<int>(qkv.size(0));
  a.nkv = static_cast<int>(nkv);
  a.head_dim = static_cast<int>(hd);
  a.k_norm = bf(k_norm);
  a.cos = rope.cos.data_ptr<float>();
  a.sin = rope.sin.data_ptr<float>();
  a.pos_base = pos_base.data_ptr<int>();
  a.k_cache = bf(k_cache);
  a.v_cache = bf(v_cache);
  a.cache_capacity = k_cache.size(-2);
  a.eps = static_cast<float>(eps);
  return a;
}

}  // namespace

void qk_norm_rope_out(const at::Tensor& qkv, int64_t nq, int64_t nkv, const at::Tensor& q_norm,
                      const at::Tensor& k_norm, const ops::RopeTable& rope, const at::Tensor& pos_base,
                      const at::Tensor& q_out, const at::Tensor& k_cache, const at::Tensor& v_cache, double eps,
                      const at::Tensor& row_scale) {
  QkNormRopeArgs a = qk_norm_rope_args("qk_norm_rope", qkv, nkv, k_norm, rope, pos_base, k_cache, v_cache, eps);
  const int64_t hd = a.head_dim;
  if (k_norm.dim() != 1) fail("qk_norm_rope: k_norm must be [head_dim]");
  if (qkv.size(1) != (nq + 2 * nkv) * hd) fail("qk_norm_rope: qkv width {} != (nq + 2 nkv) * hd", qkv.size(1));
  if (k_cache.dim() != 3 || k_cache.size(0) != nkv || k_cache.size(2) != hd)
    fail("qk_norm_rope: caches must be [nkv, capacity, head_dim]");
  a.nq = static_cast<int>(nq);
  if (nq > 0) {
    require(q_norm, "q_norm", at::kBFloat16);
    require(q_out, "q_out", at::kBFloat16);
    if (q_out.numel() != qkv.size(0) * nq * hd) fail("qk_norm_rope: q_out must hold [T, nq, head_dim]");
    a.q_norm = bf(q_norm);
    a.q_out = bf(q_out);
  }
  a.row_scale = row_scale_of(row_scale, a.T, "qk_norm_rope");
  check_cuda(qk_norm_rope(a, stream()), "qk_norm_rope");
}

void context_kv_layers_out(const at::Tensor& kv, int64_t nkv, const at::Tensor& k_norms, const ops::RopeTable& rope,
                           const at::Tensor& pos_base, const at::Tensor& k_caches, const at::Tensor& v_caches,
                           double eps) {
  QkNormRopeArgs a =
      qk_norm_rope_args("context_kv_layers", kv, nkv, k_norms, rope, pos_base, k_caches, v_caches, eps);
  if (k_norms.dim() != 2) fail("context_kv_layers: k_norms must be [layers, head_dim]");
  const int64_t L = k_norms.size(0), hd = a.head_dim;
  if (kv.size(1) != L * 2 * nkv * hd) fail("context_kv_layers: kv width {} != layers * 2 nkv * hd", kv.size(1));
  if (k_caches.dim() != 4 || k_caches.size(0) != L || k_caches.size(1) != nkv || k_caches.size(3) != hd)
    fail("context_kv_layers: caches must be [layers, nkv, capacity, head_dim]");
  a.layers = static_cast<int>(L);
  a.qkv_layer_stride = 2 * nkv * hd;
  a.k_norm_layer_stride = hd;
  a.cache_layer_stride = k_caches.stride(0);
  check_cuda(qk_norm_rope(a, stream()), "context_kv_layers");
}

namespace {
int g_attention_block_warps = 0;
}  // namespace

void set_attention_block_warps(int warps) {
  if (warps != 0 && warps != 4 && warps != 8)
    fail("attention block warps: expected 0 (default), 4 or 8, got {}", warps);
  g_attention_block_warps = warps;
}

AttentionScratch make_attention_scratch(int64_t T, int64_t nq, int64_t nkv, int64_t head_dim, int splits,
                                        at::Device device) {
  AttentionScratch s;
  s.splits = splits;
  s.block_warps = g_attention_block_warps;
  const size_t bytes = attention_workspace_bytes(static_cast<int>(T), static_cast<int>(nq), static_cast<int>(head_dim), splits);
  const size_t counters = attention_counter_count(static_cast<int>(T), static_cast<int>(nq), static_cast<int>(nkv));
  s.workspace = at::empty({static_cast<int64_t>(bytes > 0 ? bytes : 16)}, at::TensorOptions().dtype(at::kByte).device(device));
  s.counters = at::zeros({static_cast<int64_t>(counters)}, at::TensorOptions().dtype(at::kInt).device(device));
  return s;
}

namespace {
// A diagnostic timeline's stamps (the wgmma products', the decode step's): one device buffer a process, handed out to
// launches in order. `what` names the timeline in errors.
struct StampBuffer {
  unsigned long long* stamps = nullptr;
  int64_t capacity = 0, used = 0;
  // Allocates `wanted` stamps on the first call (outside a graph capture), zeroes them and starts handing out from the
  // first; later calls keep the buffer (graphs captured earlier may still write it) and fail asking for more.
  void start(int64_t wanted, int64_t least, const char* what) {
    if (wanted < least) fail("{}: a capacity of at least {} stamps, found {}", what, least, wanted);
    if (stamps == nullptr) {
      check_cuda(cudaMalloc(&stamps, sizeof(unsigned long long) * static_cast<size_t>(wanted)), what);
      capacity = wanted;
    } else if (wanted > capacity) {
      fail("{}: the buffer holds {} stamps (one buffer a process, sized by the first call); {} asked for", what, capacity,
           wanted);
    }
    check_cuda(cudaMemset(stamps, 0, sizeof(unsigned long long) * static_cast<size_t>(capacity)), what);
    used = 0;
  }
  // The offset of `need` more stamps, or -1 when they do not fit (or no buffer).
  int64_t reserve(int64_t need) {
    if (stamps == nullptr || used + need > capacity) return -1;
    used += need;
    return used - need;
  }
  // The stamps copied to the host (int64, [capacity]; waits for the current stream), then zeroed on the current stream.
  at::Tensor take(const char* what) const {
    if (stamps == nullptr) fail("{}: read before it was started", what);
    at::Tensor host = at::empty({capacity}, at::TensorOptions().dtype(at::kLong));
    const size_t bytes = sizeof(unsigned long long) * static_cast<size_t>(capacity);
    check_cuda(cudaStreamSynchronize(stream()), what);
    check_cuda(cudaMemcpy(host.data_ptr<int64_t>(), stamps, bytes, cudaMemcpyDeviceToHost), what);
    check_cuda(cudaMemsetAsync(stamps, 0, bytes, stream()), what);
    return host;
  }
};
// A timeline's buffer, its listed launches and the launches that ran without stamps (the buffer full).
template <class Launch> struct Timeline {
  StampBuffer buffer;
  int64_t dropped = 0;
  std::vector<Launch> launches;
  void start(int64_t capacity, int64_t least, const char* what) {
    buffer.start(capacity, least, what);
    dropped = 0;
    launches.clear();
  }
};

thread_local bool g_step_trace_on = false;  // StepTraceScope
Timeline<StepTraceLaunch>& step_trace() {
  static Timeline<StepTraceLaunch> t;
  return t;
}
// Stamps for a launch of at most `blocks` blocks, or nullptr (no scope, no buffer, or full: counted as dropped).
unsigned long long* step_trace_slot(StepTraceKind kind, int64_t blocks) {
  Timeline<StepTraceLaunch>& t = step_trace();
  if (!g_step_trace_on || t.buffer.stamps == nullptr) return nullptr;
  const int64_t offset = t.buffer.reserve(blocks * kStepTraceFields);
  if (offset < 0) {
    ++t.dropped;
    return nullptr;
  }
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  check_cuda(cudaStreamIsCapturing(stream(), &capture), "step trace");
  t.launches.push_back(StepTraceLaunch{offset, static_cast<int>(blocks), kind, capture == cudaStreamCaptureStatusActive});
  return t.buffer.stamps + offset;
}
// Rows for a register GEMV of `rows` rows of W by K (kGemvTraceBlocksPerSm blocks an SM; a larger grid runs untraced),
// handed to its next call; none where the TMA GEMV takes the product (it has no stamps).
void gemv_trace_slot(StepTraceKind kind, int64_t rows, int64_t K) {
  if (!g_step_trace_on || gemv_tma_takes(static_cast<int>(rows), static_cast<int>(K))) return;
  int sms = 0;
  check_cuda(detail::sm_count(sms), "step trace");
  gemv_trace_next(step_trace_slot(kind, static_cast<int64_t>(sms) * kGemvTraceBlocksPerSm));
}
}  // namespace

void step_trace_start(int64_t capacity) { step_trace().start(capacity, kStepTraceFields, "step trace"); }
StepTraceScope::StepTraceScope(bool on) : saved_(g_step_trace_on) { g_step_trace_on = on; }
StepTraceScope::~StepTraceScope() { g_step_trace_on = saved_; }
const std::vector<StepTraceLaunch>& step_trace_launches() { return step_trace().launches; }
int64_t step_trace_dropped() { return step_trace().dropped; }
at::Tensor step_trace_take() { return step_trace().buffer.take("step trace"); }

namespace {
// The checked arguments of an attention launch of T rows of nq heads over the caches, less the query source.
AttentionArgs attention_args(const at::Tensor& out, int64_t T, int64_t nq, int64_t hd, const at::Tensor& k_cache,
                             const at::Tensor& v_cache, const at::Tensor& kv_len_base, int64_t kv_len_add, bool causal,
                             AttentionScratch& scratch) {
  require(out, "attention out", at::kBFloat16);
  require(k_cache, "attention k_cache", at::kBFloat16);
  require(v_cache, "attention v_cache", at::kBFloat16);
  require(kv_len_base, "attention kv_len_base", at::kInt);
  if (k_cache.dim() != 3 || !k_cache.sizes().equals(v_cache.sizes()) || k_cache.size(2) != hd)
    fail("attention: expected caches [nkv, capacity, hd] with hd = {}", hd);
  const int64_t nkv = k_cache.size(0);
  if (out.numel() != T * nq * hd) fail("attention: out must hold [T, nq * hd]");
  if (scratch.splits > 1) {
    if (static_cast<size_t>(scratch.workspace.numel()) <
            attention_workspace_bytes(static_cast<int>(T), static_cast<int>(nq), static_cast<int>(hd), scratch.splits) ||
        static_cast<size_t>(scratch.counters.numel()) <
            attention_counter_count(static_cast<int>(T), static_cast<int>(nq), static_cast<int>(nkv)))
      fail("attention: scratch too small for T={} splits={}", T, scratch.splits);
  }
  AttentionArgs a;
  a.k_cache = bf(k_cache);
  a.v_cache = bf(v_cache);
  a.out = bf(out);
  a.kv_len_base = kv_len_base.data_ptr<int>();
  a.kv_len_add = static_cast<int>(kv_len_add);
  a.T = static_cast<int>(T);
  a.nq = static_cast<int>(nq);
  a.nkv = static_cast<int>(nkv);
  a.head_dim = static_cast<int>(hd);
  a.cache_capacity = k_cache.size(1);
  a.causal = causal;
  a.splits = scratch.splits;
  a.min_split_keys = scratch.min_split_keys;
  a.block_warps = scratch.block_warps;
  a.workspace = scratch.workspace.data_ptr();
  a.counters = reinterpret_cast<unsigned int*>(scratch.counters.data_ptr<int>());
  return a;
}
}  // namespace

void attention_out(const at::Tensor& out, const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                   const at::Tensor& kv_len_base, int64_t kv_len_add, bool causal, AttentionScratch& scratch) {
  require(q, "attention q", at::kBFloat16);
  if (q.dim() != 3) fail("attention: expected q [T, nq, hd]");
  AttentionArgs a = attention_args(out, q.size(0), q.size(1), q.size(2), k_cache, v_cache, kv_len_base, kv_len_add,
                                   causal, scratch);
  a.q = bf(q);
  check_cuda(attention(a, stream()), "attention");
}

void attention_qkv_out(const at::Tensor& out, const at::Tensor& qkv, int64_t nq, int64_t nkv, const at::Tensor& q_norm,
                       const at::Tensor& k_norm, const ops::RopeTable& rope, const at::Tensor& pos_base,
                       const at::Tensor& k_cache, const at::Tensor& v_cache, bool causal, double eps,
                       AttentionScratch& scratch, const at::Tensor& row_scale) {
  require(qkv, "attention qkv", at::kBFloat16, false);
  require(q_norm, "q_norm", at::kBFloat16);
  require(k_norm, "k_norm", at::kBFloat16);
  require(rope.cos, "rope cos", at::kFloat);
  require(rope.sin, "rope sin", at::kFloat);
  const int64_t ld = row_stride(qkv, "attention qkv"), T = qkv.size(0), hd = k_norm.numel();
  if (T > kAttentionSmallT) fail("attention_qkv: {} rows, the fused kernel takes at most {}", T, kAttentionSmallT);
  if (nkv <= 0 || nq % nkv != 0 || qkv.size(1) != (nq + 2 * nkv) * hd || q_norm.numel() != hd)
    fail("attention_qkv: qkv width {} != (nq + 2 nkv) * hd with nq = {}, nkv = {}, hd = {}", qkv.size(1), nq, nkv, hd);
  if (rope.cos.size(1) != hd) fail("attention_qkv: RoPE table width {} != head_dim {}", rope.cos.size(1), hd);
  if (k_cache.dim() != 3 || k_cache.size(0) != nkv) fail("attention_qkv: caches must be [nkv, capacity, head_dim]");
  AttentionArgs a = attention_args(out, T, nq, hd, k_cache, v_cache, pos_base, T, causal, scratch);
  a.qkv = bf(qkv);
  a.ld_qkv = ld;
  a.q_norm = bf(q_norm);
  a.k_norm = bf(k_norm);
  a.rope_cos = rope.cos.data_ptr<float>();
  a.rope_sin = rope.sin.data_ptr<float>();
  a.eps = static_cast<float>(eps);
  a.k_cache_out = bf(k_cache);
  a.v_cache_out = bf(v_cache);
  a.qkv_row_scale = row_scale_of(row_scale, T, "attention_qkv");
  const int64_t group_rows = T * (nq / nkv);
  a.trace = step_trace_slot(StepTraceKind::kAttention, nkv * ((group_rows + 15) / 16) * scratch.splits);
  check_cuda(attention(a, stream()), "attention_qkv");
}

void silu_mul_out(const at::Tensor& out, const at::Tensor& gate_up, const at::Tensor& row_scale) {
  require(out, "silu_mul out", at::kBFloat16);
  require(gate_up, "silu_mul gate_up", at::kBFloat16);
  const int64_t inter = out.size(-1), rows = out.numel() / inter;
  if (gate_up.numel() != 2 * out.numel()) fail("silu_mul: gate_up must be [rows, 2 * inter]");
  check_cuda(silu_mul(bf(gate_up), bf(out), static_cast<int>(rows), static_cast<int>(inter), stream(),
                      row_scale_of(row_scale, rows, "silu_mul")),
             "silu_mul");
}

void embedding_out(const at::Tensor& out, const at::Tensor& table, const at::Tensor& ids) {
  require(out, "embedding out", at::kBFloat16);
  require(table, "embedding table", at::kBFloat16);
  require(ids, "embedding ids", at::kLong);
  const int64_t H = table.size(1);
  if (out.numel() != ids.numel() * H) fail("embedding: out must be [T, H]");
  check_cuda(embedding_gather(bf(table), ids.data_ptr<int64_t>(), bf(out), static_cast<int>(ids.numel()),
                              static_cast<int>(H), stream()),
             "embedding");
}

EnvSwitch& argmax_split_switch() {
  static EnvSwitch s("SPECPRESS_ARGMAX_SPLIT", true);
  return s;
}

void argmax_out(const at::Tensor& out, const at::Tensor& logits) {
  require(out, "argmax out", at::kLong);
  require(logits, "argmax logits", at::kBFloat16, false);
  const int64_t ld = row_stride(logits, "argmax logits");
  if (out.numel() != logits.size(0)) fail("argmax: out must have one entry per row");
  check_cuda(argmax_rows(bf(logits), ld, static_cast<int>(logits.size(0)), static_cast<int>(logits.size(1)),
                         out.data_ptr<int64_t>(), argmax_split_switch().on(), stream()),
             "argmax");
}

void dflash_accept(const at::Tensor& block_ids, const at::Tensor& posterior, int64_t mask_id, const at::Tensor& start,
                   const at::Tensor& ctx_start, const at::Tensor& record, int64_t* host_record) {
  require(block_ids, "accept block_ids", at::kLong);
  require(posterior, "accept posterior", at::kLong);
  require(record, "accept record", at::kLong);
  require(start, "accept start", at::kInt);
  require(ctx_start, "accept ctx_start", at::kInt);
  const int64_t B = block_ids.numel();
  if (posterior.numel() != B || record.numel() < 2 * B + 1) fail("dflash_accept: buffer sizes disagree with B={}", B);
  check_cuda(kernels::dflash_accept(block_ids.data_ptr<int64_t>(), posterior.data_ptr<int64_t>(), static_cast<int>(B),
                                    mask_id, start.data_ptr<int>(), ctx_start.data_ptr<int>(),
                                    record.data_ptr<int64_t>(), stream(), host_record),
             "dflash_accept");
}

void advance_counter(const at::Tensor& counter, int inc) {
  require(counter, "counter", at::kInt);
  check_cuda(kernels::advance_counter(counter.data_ptr<int>(), inc, stream()), "advance_counter");
}

namespace {
constexpr GemmMode kAllModes[] = {GemmMode::kGemv, GemmMode::kCublas, GemmMode::kSkinny, GemmMode::kStream,
                                  GemmMode::kStreamAll};
bool mode_of_name(const char* name, GemmMode& mode) {
  for (GemmMode m : kAllModes)
    if (std::strcmp(name, gemm_mode_name(m)) == 0) {
      mode = m;
      return true;
    }
  return false;
}
// "gemv, cublas, skinny, stream or stream_all", for messages.
std::string mode_names() {
  std::string names;
  for (size_t i = 0; i < std::size(kAllModes); ++i)
    names += (i == 0 ? "" : i + 1 == std::size(kAllModes) ? " or " : ", ") + std::string(gemm_mode_name(kAllModes[i]));
  return names;
}
GemmMode initial_gemm_mode() {
  const char* env = std::getenv("SPECPRESS_GEMM");
  GemmMode mode = GemmMode::kGemv;
  if (env == nullptr || *env == '\0' || mode_of_name(env, mode)) return mode;
  // Static initialisation: no exception can be caught here, so say so and keep the default.
  std::fprintf(stderr, "specpress: SPECPRESS_GEMM=%s is not %s; using gemv\n", env, mode_names().c_str());
  return GemmMode::kGemv;
}
GemmMode g_gemm_mode = initial_gemm_mode();

// The layouts the GEMV kernel takes (checked again, with errors, by gemv_out).
bool gemv_fits(const at::Tensor& out, const at::Tensor& x, const at::Tensor& weight) {
  return x.dim() == 2 && out.dim() == 2 && weight.dim() == 2 && x.size(0) == 1 && out.size(0) == 1 &&
         x.stride(1) == 1 && out.stride(1) == 1 && weight.is_contiguous() && x.size(1) % 8 == 0 &&
         x.scalar_type() == at::kBFloat16 && weight.scalar_type() == at::kBFloat16 &&
         out.scalar_type() == at::kBFloat16 && aligned16(x) && aligned16(weight) &&
         x.size(1) <= std::numeric_limits<int>::max() && weight.size(0) <= std::numeric_limits<int>::max();
}
// Modes whose one-row matmuls are the GEMV's (with its fused RMSNorm prologue, SwiGLU and residual epilogues).
bool gemv_at_one_row() { return g_gemm_mode == GemmMode::kGemv || g_gemm_mode == GemmMode::kStream; }

// The layouts the streaming small-M kernel takes for M rows (checked again, with errors, by gemm_small_out).
bool gemm_small_fits(const at::Tensor& out, const at::Tensor& x, const at::Tensor& weight) {
  return x.dim() == 2 && out.dim() == 2 && weight.dim() == 2 && x.size(0) >= 1 && x.size(0) <= 16 &&
         out.size(0) == x.size(0) && x.stride(1) == 1 && (x.size(0) == 1 || x.stride(0) % 8 == 0) &&
         out.stride(1) == 1 && weight.is_contiguous() && x.size(1) % 8 == 0 && x.scalar_type() == at::kBFloat16 &&
         weight.scalar_type() == at::kBFloat16 && out.scalar_type() == at::kBFloat16 && aligned16(x) &&
         aligned16(weight) && x.size(1) <= std::numeric_limits<int>::max() &&
         weight.size(0) <= std::numeric_limits<int>::max();
}
}  // namespace

GemmMode gemm_mode() { return g_gemm_mode; }
void set_gemm_mode(GemmMode mode) { g_gemm_mode = mode; }
GemmMode parse_gemm_mode(const std::string& name, const char* what) {
  GemmMode mode = GemmMode::kGemv;
  if (!mode_of_name(name.c_str(), mode))
    fail("{}: unknown matmul mode '{}' (expected {})", what, name, mode_names());
  return mode;
}

const char* gemm_mode_name(GemmMode mode) {
  switch (mode) {
    case GemmMode::kSkinny: return "skinny";
    case GemmMode::kCublas: return "cublas";
    case GemmMode::kGemv: return "gemv";
    case GemmMode::kStream: return "stream";
    case GemmMode::kStreamAll: return "stream_all";
  }
  return "?";
}

namespace {
// The optional RMSNorm prologue of the GEMV entry points, checked against K.
GemvNorm gemv_norm_of(const at::Tensor& norm_weight, double eps, int64_t K, const char* what, bool folded) {
  GemvNorm norm;
  if (folded) {
    if (norm_weight.defined()) fail("{}: a folded norm takes no norm weight (it is in the matmul's weight)", what);
    norm.folded = true;
    norm.eps = static_cast<float>(eps);
    return norm;
  }
  if (!norm_weight.defined()) return norm;
  require(norm_weight, "gemv norm weight", at::kBFloat16);
  if (norm_weight.numel() != K || K > kGemvNormMaxK || !aligned16(norm_weight))
    fail("{}: norm weight must hold K={} elements (K <= {}), 16-byte aligned", what, K, kGemvNormMaxK);
  norm.weight = bf(norm_weight);
  norm.eps = static_cast<float>(eps);
  return norm;
}

// Checks of a one-row GEMV: x [K] or [1, K], out [N'] or [1, N'] with n_out elements, weight [N, K].
void check_one_row(const at::Tensor& out, const at::Tensor& x, const at::Tensor& weight, int64_t n_out,
                   const char* what) {
  require(x, "gemv x", at::kBFloat16, false);
  require(out, "gemv out", at::kBFloat16, false);
  require(weight, "gemv weight", at::kBFloat16);
  if (weight.dim() != 2) fail("{}: weight must be [N, K]", what);
  const int64_t K = weight.size(1);
  if (x.numel() != K || out.numel() != n_out) fail("{}: x must hold K={} and out {} elements", what, K, n_out);
  if (x.dim() > 2 || out.dim() > 2 || (x.dim() == 2 && x.size(0) != 1) || (out.dim() == 2 && out.size(0) != 1))
    fail("{}: x and out must be one row", what);
  if (x.stride(-1) != 1 || out.stride(-1) != 1) fail("{}: x and out need unit column stride", what);
  if (K % 8 != 0 || !aligned16(x) || !aligned16(weight)) fail("{}: K % 8 == 0 and 16-byte aligned x, weight needed", what);
  if (weight.size(0) > std::numeric_limits<int>::max() || K > std::numeric_limits<int>::max())
    fail("{}: N or K too large", what);
}
}  // namespace

void gemv_out(const at::Tensor& out, const at::Tensor& x, const at::Tensor& weight, const at::Tensor& norm_weight,
              double eps, bool folded_norm) {
  check_one_row(out, x, weight, weight.dim() == 2 ? weight.size(0) : -1, "gemv");
  const int64_t N = weight.size(0), K = weight.size(1);
  const GemvNorm norm = gemv_norm_of(norm_weight, eps, K, "gemv", folded_norm);
  gemv_trace_slot(StepTraceKind::kGemv, N, K);
  check_cuda(gemv(bf(x), bf(weight), bf(out), static_cast<int>(N), static_cast<int>(K), stream(), norm), "gemv");
}

void gemm_small_out(const at::Tensor& out, const at::Tensor& x, const at::Tensor& weight) {
  require(x, "gemm_small x", at::kBFloat16, false);
  require(out, "gemm_small out", at::kBFloat16, false);
  require(weight, "gemm_small weight", at::kBFloat16);
  if (x.dim() != 2 || out.dim() != 2 || weight.dim() != 2) fail("gemm_small: expected x [M, K], weight [N, K], out [M, N]");
  const int64_t M = x.size(0), K = x.size(1), N = weight.size(0);
  if (weight.size(1) != K || out.size(0) != M || out.size(1) != N)
    fail("gemm_small: shapes disagree: x [{}, {}], weight [{}, {}], out [{}, {}]", M, K, N, weight.size(1), out.size(0),
         out.size(1));
  if (M < 1 || M > 16) fail("gemm_small: {} rows, the kernel takes 1 to 16", M);
  if (x.stride(1) != 1 || out.stride(1) != 1) fail("gemm_small: x and out need unit column stride");
  if (K % 8 != 0 || (M > 1 && x.stride(0) % 8 != 0) || !aligned16(x) || !aligned16(weight))
    fail("gemm_small: K % 8 == 0, x row stride % 8 == 0 and 16-byte aligned x, weight needed");
  if (N > std::numeric_limits<int>::max() || K > std::numeric_limits<int>::max()) fail("gemm_small: N or K too large");
  check_cuda(gemm_small(bf(x), x.stride(0), bf(weight), bf(out), out.stride(0), static_cast<int>(M),
                        static_cast<int>(N), static_cast<int>(K), stream()),
             "gemm_small");
}

void gemv_silu_mul_out(const at::Tensor& act, const at::Tensor& x, const at::Tensor& gate_up,
                       const at::Tensor& norm_weight, double eps, bool folded_norm) {
  if (gate_up.dim() != 2 || gate_up.size(0) % 2 != 0) fail("gemv_silu_mul: gate_up must be [2I, K]");
  const int64_t I = gate_up.size(0) / 2, K = gate_up.size(1);
  check_one_row(act, x, gate_up, I, "gemv_silu_mul");
  const GemvNorm norm = gemv_norm_of(norm_weight, eps, K, "gemv_silu_mul", folded_norm);
  gemv_trace_slot(StepTraceKind::kGemvSwiglu, 2 * I, K);
  check_cuda(gemv_swiglu(bf(x), bf(gate_up), bf(act), static_cast<int>(I), static_cast<int>(K), stream(), norm),
             "gemv_swiglu");
}

void gemv_residual_out(const at::Tensor& residual, const at::Tensor& x, const at::Tensor& weight, const at::Tensor& tap) {
  check_one_row(residual, x, weight, weight.dim() == 2 ? weight.size(0) : -1, "gemv_residual");
  const int64_t N = weight.size(0), K = weight.size(1);
  __nv_bfloat16* tap_ptr = nullptr;
  if (tap.defined()) {
    require(tap, "gemv_residual tap", at::kBFloat16, false);
    if (tap.numel() != N || tap.stride(-1) != 1 || (tap.dim() == 2 && tap.size(0) != 1))
      fail("gemv_residual: tap must be one row of N={} elements with unit column stride", N);
    tap_ptr = bf(tap);
  }
  const auto* r = static_cast<const char*>(residual.data_ptr());
  const auto* xp = static_cast<const char*>(x.data_ptr());
  if (r < xp + x.numel() * 2 && xp < r + N * 2) fail("gemv_residual: residual overlaps x");
  gemv_trace_slot(StepTraceKind::kGemvResidual, N, K);
  check_cuda(gemv_residual(bf(x), bf(weight), bf(residual), tap_ptr, static_cast<int>(N), static_cast<int>(K), stream()),
             "gemv_residual");
}

bool gemv_o_gate_up_takes(const at::Tensor& x, const at::Tensor& o_proj, const at::Tensor& gate_up) {
  if (o_proj.dim() != 2 || gate_up.dim() != 2 || gate_up.size(0) % 2 != 0 || o_proj.size(0) != x.numel() ||
      gate_up.size(1) != x.numel() || x.numel() > std::numeric_limits<int>::max() ||
      o_proj.size(1) > std::numeric_limits<int>::max() || gate_up.size(0) > std::numeric_limits<int>::max())
    return false;
  return kernels::gemv_o_gate_up_takes(static_cast<int>(x.numel()), static_cast<int>(o_proj.size(1)),
                                       static_cast<int>(gate_up.size(0) / 2));
}

void gemv_o_gate_up_out(const at::Tensor& x, const at::Tensor& attn, const at::Tensor& o_proj, const at::Tensor& act,
                        const at::Tensor& gate_up, double eps, const at::Tensor& barrier) {
  check_one_row(x, attn, o_proj, o_proj.dim() == 2 ? o_proj.size(0) : -1, "gemv_o_gate_up (o)");
  if (gate_up.dim() != 2 || gate_up.size(0) % 2 != 0) fail("gemv_o_gate_up: gate_up must be [2I, H]");
  const int64_t H = o_proj.size(0), Ko = o_proj.size(1), I = gate_up.size(0) / 2;
  check_one_row(act, x, gate_up, I, "gemv_o_gate_up (gate/up)");
  if (!aligned16(act) || !aligned16(x)) fail("gemv_o_gate_up: x and act must be 16-byte aligned");
  require(barrier, "gemv_o_gate_up barrier", at::kInt);
  if (barrier.numel() != kGemvOGateUpBarrierWords)
    fail("gemv_o_gate_up: barrier must be int32 [{}]", kGemvOGateUpBarrierWords);
  const auto overlaps = [&](const at::Tensor& t) {
    const auto* a = static_cast<const char*>(t.data_ptr());
    const auto* b = static_cast<const char*>(x.data_ptr());
    return a < b + H * 2 && b < a + t.numel() * t.element_size();
  };
  if (overlaps(attn) || overlaps(act)) fail("gemv_o_gate_up: x overlaps attn or act");
  if (!gemv_o_gate_up_takes(x, o_proj, gate_up))
    fail("gemv_o_gate_up: H={} K_o={} I={} not taken on this device (kernels/gemv_o_gate_up.h)", H, Ko, I);
  unsigned long long* trace = step_trace_slot(StepTraceKind::kOGateUp, (H + 3) / 4);
  check_cuda(kernels::gemv_o_gate_up(bf(attn), bf(o_proj), bf(x), bf(gate_up), bf(act), static_cast<int>(H),
                                     static_cast<int>(Ko), static_cast<int>(I), static_cast<float>(eps),
                                     reinterpret_cast<unsigned*>(barrier.data_ptr()), stream(), trace),
             "gemv_o_gate_up");
}

void gemv_mlp_out(const at::Tensor& x, const at::Tensor& gate_up, const at::Tensor& down_t, double eps,
                  const at::Tensor& acc, const at::Tensor& counter, const at::Tensor& tap, bool ordered) {
  require(x, "gemv_mlp x", at::kBFloat16);
  require(gate_up, "gemv_mlp gate_up", at::kBFloat16);
  require(down_t, "gemv_mlp down_t", at::kBFloat16);
  require(acc, "gemv_mlp acc", at::kFloat);
  require(counter, "gemv_mlp counter", at::kInt);
  const int64_t H = x.numel();
  if (x.dim() < 1 || x.dim() > 2 || (x.dim() == 2 && x.size(0) != 1)) fail("gemv_mlp: x must be one row [1, H] or [H]");
  if (gate_up.dim() != 2 || gate_up.size(0) % 2 != 0 || gate_up.size(1) != H)
    fail("gemv_mlp: gate_up must be [2I, H] with H = {} (x's width)", H);
  const int64_t I = gate_up.size(0) / 2;
  if (down_t.dim() != 2 || down_t.size(0) != I || down_t.size(1) != H)
    fail("gemv_mlp: down_t must be [I, H] = [{}, {}] (W_down transposed)", I, H);
  if (H > std::numeric_limits<int>::max() || I > std::numeric_limits<int>::max() ||
      !kernels::gemv_mlp_takes(static_cast<int>(H), static_cast<int>(I)))
    fail("gemv_mlp: H={} I={} not taken on this device (kernels/gemv_mlp.h)", H, I);
  const size_t acc_floats = kernels::gemv_mlp_acc_floats(static_cast<int>(H), static_cast<int>(I), ordered);
  if (ordered ? static_cast<size_t>(acc.numel()) < acc_floats : acc.numel() != H)
    fail("gemv_mlp: acc must be fp32 [{}]{}", acc_floats, ordered ? " or more (a row a block: the ordered sum)" : "");
  if (counter.numel() != 1) fail("gemv_mlp: counter must be int32 [1]");
  if (!aligned16(x) || !aligned16(gate_up) || !aligned16(down_t) || !aligned16(acc))
    fail("gemv_mlp: x, gate_up, down_t and acc must be 16-byte aligned");
  const auto* xb = static_cast<const char*>(x.data_ptr());
  const auto overlaps = [&](const at::Tensor& t) {
    const auto* p = static_cast<const char*>(t.data_ptr());
    return p < xb + H * 2 && xb < p + t.numel() * t.element_size();
  };
  __nv_bfloat16* tap_ptr = nullptr;
  if (tap.defined()) {
    require(tap, "gemv_mlp tap", at::kBFloat16, false);
    if (tap.numel() != H || tap.stride(-1) != 1 || (tap.dim() == 2 && tap.size(0) != 1) || !aligned16(tap))
      fail("gemv_mlp: tap must be one 16-byte aligned row of H={} elements with unit column stride", H);
    if (overlaps(tap)) fail("gemv_mlp: tap overlaps x");
    tap_ptr = bf(tap);
  }
  if (overlaps(acc) || overlaps(gate_up) || overlaps(down_t)) fail("gemv_mlp: x overlaps acc or a weight");
  unsigned long long* trace = nullptr;
  if (ordered && g_step_trace_on) {
    int sms = 0;
    check_cuda(detail::sm_count(sms), "gemv_mlp");
    trace = step_trace_slot(StepTraceKind::kMlp, sms);  // a block an SM at most
  }
  check_cuda(kernels::gemv_mlp(bf(x), bf(gate_up), bf(down_t), tap_ptr, acc.data_ptr<float>(),
                               reinterpret_cast<unsigned*>(counter.data_ptr()), static_cast<int>(H),
                               static_cast<int>(I), static_cast<float>(eps), stream(), ordered, trace),
             "gemv_mlp");
}

bool fused_one_row(int64_t rows) { return rows == 1 && gemv_at_one_row(); }

bool multirow_by_cublas() { return g_gemm_mode == GemmMode::kGemv || g_gemm_mode == GemmMode::kCublas; }

bool linear_uses_lt_plans() { return multirow_by_cublas() && lt_tuning() != LtTuning::kOff; }

void linear_silu_mul_out(const at::Tensor& act, const at::Tensor& gu, const at::Tensor& x, const at::Tensor& gate_up,
                         const at::Tensor& row_scale) {
  if (!row_scale.defined() && gemv_at_one_row() && x.dim() == 2 && x.size(0) == 1 && act.dim() == 2 &&
      act.size(0) == 1 && act.stride(1) == 1 && gate_up.dim() == 2 && gate_up.size(0) == 2 * act.size(1) &&
      gemv_fits(gu, x, gate_up)) {
    gemv_silu_mul_out(act, x, gate_up);
    return;
  }
  if (wg16_swiglu_takes(act, x, gate_up)) {
    wg16_silu_mul_out(act, x, gate_up, row_scale);
    return;
  }
  linear_out(gu, x, gate_up);
  silu_mul_out(act, gu, row_scale);
}

EnvSwitch& wg16_switch() {
  static EnvSwitch s("SPECPRESS_WG16", false);
  return s;
}

namespace {
// x [M <= 16, K] and weight [N <= max_rows, K] as the wgmma kernel's tensor maps take them (the TMA's layout rules).
bool wg16_operands_fit(const at::Tensor& x, const at::Tensor& weight, int64_t max_rows = kWg16MaxRows) {
  return x.dim() == 2 && weight.dim() == 2 && x.size(0) >= 1 && x.size(0) <= kWg16MaxT && x.size(1) == weight.size(1) &&
         weight.size(0) <= max_rows && x.stride(1) == 1 && weight.stride(1) == 1 && x.stride(0) % 8 == 0 &&
         weight.stride(0) % 8 == 0 && x.size(1) % 8 == 0 && x.scalar_type() == at::kBFloat16 &&
         weight.scalar_type() == at::kBFloat16 && aligned16(x) && aligned16(weight) &&
         x.size(1) <= std::numeric_limits<int>::max();
}
// out [M, n] with unit column stride, bf16.
bool wg16_output_fits(const at::Tensor& out, const at::Tensor& x, int64_t n) {
  return out.dim() == 2 && out.size(0) == x.size(0) && out.size(1) == n && out.stride(1) == 1 &&
         out.scalar_type() == at::kBFloat16;
}
}  // namespace

bool wg16_fits(const at::Tensor& out, const at::Tensor& x, const at::Tensor& weight) {
  return wg16_operands_fit(x, weight) && wg16_output_fits(out, x, weight.size(0));
}

bool wg16_silu_mul_fits(const at::Tensor& act, const at::Tensor& x, const at::Tensor& gate_up) {
  return wg16_operands_fit(x, gate_up) && gate_up.size(0) % 16 == 0 && wg16_output_fits(act, x, gate_up.size(0) / 2);
}

namespace {
// gemm_wg16's scratch, one set for each (device, stream): the split-K partials and tile counters (wg16_plan splits only
// where tiles x splits <= the SM count, so one partial and one counter a block cover every plan) and the fused argmax's
// per-block bests and counter (kWg16ArgmaxBlocks blocks). The products of one stream run one after another and share
// its set; products on two streams at once (the fast engine's draft injection on its own stream beside the verify
// forward's last layers, both with K-split products of N = 2560 at Qwen3-4B) must not share counters or partials, so
// each stream has its own. A set is allocated at its stream's first product that needs it, outside a graph capture (the
// fast engine's warm-up runs every step on its streams before it captures any), and kept for the process.
constexpr int kWg16ArgmaxBlocks = 8192;
struct Wg16Scratch {
  float* workspace = nullptr;
  unsigned* counters = nullptr;
  float* argmax_values = nullptr;
  int* argmax_indices = nullptr;
  unsigned* argmax_counter = nullptr;
};
Wg16Scratch wg16_scratch(int sms) {
  static std::mutex mutex;
  static std::map<std::pair<int, cudaStream_t>, Wg16Scratch> sets;
  int dev = 0;
  check_cuda(cudaGetDevice(&dev), "wg16 scratch");
  const cudaStream_t st = stream();
  std::lock_guard<std::mutex> lock(mutex);
  const auto found = sets.find({dev, st});
  if (found != sets.end()) return found->second;
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  check_cuda(cudaStreamIsCapturing(st, &capturing), "wg16 scratch");
  if (capturing != cudaStreamCaptureStatusNone)
    fail("wg16: the scratch of a stream (K-split partials, the fused argmax's bests) is allocated at its first such "
         "product outside a graph capture (run the step once on that stream first)");
  Wg16Scratch s;
  const size_t argmax_entries = static_cast<size_t>(kWg16ArgmaxBlocks) * kWg16MaxT;
  check_cuda(cudaMalloc(&s.workspace, sizeof(float) * static_cast<size_t>(sms) * kWg16Rows * kWg16MaxT), "wg16 scratch");
  check_cuda(cudaMalloc(&s.counters, sizeof(unsigned) * (static_cast<size_t>(sms) + 1)), "wg16 scratch");
  check_cuda(cudaMemset(s.counters, 0, sizeof(unsigned) * (static_cast<size_t>(sms) + 1)), "wg16 scratch");
  check_cuda(cudaMalloc(&s.argmax_values, sizeof(float) * argmax_entries), "wg16 scratch");
  check_cuda(cudaMalloc(&s.argmax_indices, sizeof(int) * argmax_entries), "wg16 scratch");
  s.argmax_counter = s.counters + sms;  // the last of the counters
  sets.emplace(std::make_pair(dev, st), s);
  return s;
}
}  // namespace

namespace {
// SPECPRESS_WG16_TILES_PER_BLOCK (unset or empty: wg16_plan's rule): the tiles a block takes in the plans without a
// K split, so that one binary can time plans against each other (docs/PERF.md, twenty-sixth pass); an integer >= 1.
int wg16_tiles_per_block_override() {
  static const int value =
      env_int("SPECPRESS_WG16_TILES_PER_BLOCK", 1, 1024, 0, "an integer from 1 to 1024 (unset: the plan's rule)");
  return value;
}

thread_local int g_wg16_ring_kb = 0;      // Wg16RingScope's budget (0: the plan's)
thread_local int g_wg16_max_splits = 0;  // Wg16RingScope's K-split cap (0: the plan's rule)
thread_local bool g_wg16_trace_on = false;  // Wg16TraceScope

Timeline<Wg16TraceLaunch>& wg16_trace() {
  static Timeline<Wg16TraceLaunch> t;
  return t;
}

// This product's stamps, or nullptr (no scope, no buffer, or full).
unsigned long long* wg16_trace_slot(const Wg16Args& a) {
  Timeline<Wg16TraceLaunch>& t = wg16_trace();
  if (!g_wg16_trace_on || t.buffer.stamps == nullptr) return nullptr;
  const int blocks = wg16_blocks(a.N, a.plan);
  const int64_t offset = t.buffer.reserve(static_cast<int64_t>(blocks) * kWg16TraceFields);
  if (offset < 0) {
    ++t.dropped;
    return nullptr;
  }
  Wg16TraceLaunch l;
  l.offset = offset;
  l.blocks = blocks;
  l.T = a.T;
  l.N = a.N;
  l.K = a.K;
  l.splits = a.plan.splits;
  l.stages = a.plan.stages;
  l.kb = a.plan.kb;
  l.tiles_per_block = a.plan.tiles_per_block;
  l.silu_mul = a.silu_mul;
  t.launches.push_back(l);
  return t.buffer.stamps + l.offset;
}

// Y = x @ weight^T by gemm_wg16 with wg16_plan's plan, in the form `a` names (residual, SwiGLU); `what` names the
// switch that chose it, for the error on a GPU without wgmma. hold_stages: the plan's ring stages filled only after the
// PDL wait (Wg16Args::prefill = stages - hold_stages; 0: the whole ring before it).
void run_wg16(Wg16Args a, const at::Tensor& x, const at::Tensor& weight, const char* what, int hold_stages = 0) {
  int sms = 0;
  check_cuda(detail::sm_count(sms), "wg16");
  a.W = bf(weight);
  a.ldw = weight.stride(0);
  a.X = bf(x);
  a.ldx = x.stride(0);
  a.T = static_cast<int>(x.size(0));
  a.N = static_cast<int>(weight.size(0));
  a.K = static_cast<int>(x.size(1));
  // row_norm: each block sums its rows' squares over all of K; the fused argmax: each block's rows are whole
  a.plan = wg16_plan(a.N, a.K, sms, /*split_k=*/!a.row_norm && a.argmax == nullptr, wg16_tiles_per_block_override(),
                     g_wg16_ring_kb > 0 ? g_wg16_ring_kb : kWg16RingKb, g_wg16_max_splits);
  a.trigger_early = wg16_trigger_early();
  a.cluster_sum = wg16_cluster_sum();
  a.x_stage_box = wg16_x_stage_box();
  if (hold_stages > 0) a.prefill = std::max(0, a.plan.stages - hold_stages);
  if (a.plan.splits > 1 || a.argmax != nullptr) {
    const Wg16Scratch s = wg16_scratch(sms);
    a.workspace = s.workspace;
    a.counters = s.counters;
    a.argmax_values = s.argmax_values;
    a.argmax_indices = s.argmax_indices;
    a.argmax_counter = s.argmax_counter;
    if (a.argmax != nullptr && wg16_blocks(a.N, a.plan) > kWg16ArgmaxBlocks)
      fail("{}: the fused argmax's plan runs {} blocks, past the {} its scratch holds (SPECPRESS_WG16_TILES_PER_BLOCK "
           "too small for {} rows?)",
           what, wg16_blocks(a.N, a.plan), kWg16ArgmaxBlocks, a.N);
  }
  a.trace = wg16_trace_slot(a);
  const cudaError_t e = gemm_wg16(a, stream());
  if (e == cudaErrorNotSupported)
    fail("{}: the wgmma kernel needs an sm_90 (Hopper) GPU and a driver with tensor maps; unset it here", what);
  check_cuda(e, "gemm_wg16");
}
}  // namespace

bool wg16_trigger_early() {
  static const bool on = env_int("SPECPRESS_WG16_TRIGGER_EARLY", 0, 1, 1, "0 or 1") == 1;
  return on;
}

bool wg16_cluster_sum() {
  static const bool on = env_int("SPECPRESS_WG16_CLUSTER_SUM", 0, 1, 1, "0 or 1") == 1;
  return on;
}

bool wg16_x_stage_box() {
  static const bool on = env_int("SPECPRESS_WG16_X_BOX", 0, 1, 1, "0 or 1") == 1;
  return on;
}

namespace {
int& wg16_silu_hold_setting() {  // read once; a bad value fails naming the variable
  static int stages = env_int("SPECPRESS_WG16_SILU_HOLD", 0, 12, 0, "an integer from 0 to 12 (ring stages)");
  return stages;
}
}  // namespace
int wg16_silu_hold() { return wg16_silu_hold_setting(); }
void set_wg16_silu_hold(int stages) { wg16_silu_hold_setting() = std::clamp(stages, 0, 12); }

Wg16RingScope::Wg16RingScope(int ring_kb, int max_splits)
    : saved_(g_wg16_ring_kb), saved_splits_(g_wg16_max_splits) {
  g_wg16_ring_kb = ring_kb;
  g_wg16_max_splits = max_splits;
}
Wg16RingScope::~Wg16RingScope() {
  g_wg16_ring_kb = saved_;
  g_wg16_max_splits = saved_splits_;
}

void wg16_trace_start(int64_t capacity) { wg16_trace().start(capacity, kWg16TraceFields, "wg16 trace"); }
Wg16TraceScope::Wg16TraceScope(bool on) : saved_(g_wg16_trace_on) { g_wg16_trace_on = on; }
Wg16TraceScope::~Wg16TraceScope() { g_wg16_trace_on = saved_; }
const std::vector<Wg16TraceLaunch>& wg16_trace_launches() { return wg16_trace().launches; }
int64_t wg16_trace_dropped() { return wg16_trace().dropped; }
at::Tensor wg16_trace_take() { return wg16_trace().buffer.take("wg16 trace"); }

namespace {
// The plain form's operands (wg16_fits), or an error naming `what` and what was found.
void check_wg16_linear(const at::Tensor& out, const at::Tensor& x, const at::Tensor& weight, const char* what) {
  require(x, fmt::format("{} x", what).c_str(), at::kBFloat16, false);
  require(out, fmt::format("{} out", what).c_str(), at::kBFloat16, false);
  require(weight, fmt::format("{} weight", what).c_str(), at::kBFloat16, false);
  if (!wg16_fits(out, x, weight))
    fail("{}: expected x [M <= {}, K], weight [N <= {}, K], out [M, N], bf16, unit column strides, x and weight "
         "16-byte aligned with row strides % 8 == 0, K % 8 == 0; found x [{}], weight [{}], out [{}]",
         what, kWg16MaxT, kWg16MaxRows, fmt::join(x.sizes().vec(), ", "), fmt::join(weight.sizes().vec(), ", "),
         fmt::join(out.sizes().vec(), ", "));
}
}  // namespace

void wg16_linear_out(const at::Tensor& out, const at::Tensor& x, const at::Tensor& weight, bool accumulate) {
  check_wg16_linear(out, x, weight, "wg16");
  Wg16Args a;
  a.Y = bf(out);
  a.ldy = out.stride(0);
  if (accumulate) {
    a.R = a.Y;
    a.ldr = a.ldy;
  }
  run_wg16(a, x, weight, "SPECPRESS_WG16");
}

namespace {
void check_wg16_silu_mul(const at::Tensor& act, const at::Tensor& x, const at::Tensor& gate_up) {
  require(x, "wg16_silu_mul x", at::kBFloat16, false);
  require(act, "wg16_silu_mul act", at::kBFloat16, false);
  require(gate_up, "wg16_silu_mul gate_up", at::kBFloat16, false);
  if (!wg16_silu_mul_fits(act, x, gate_up))
    fail("wg16_silu_mul: expected x [M <= {}, K], gate_up [2I <= {}, K] with I % 8 == 0, act [M, I], bf16, unit "
         "column strides, x and gate_up 16-byte aligned with row strides % 8 == 0, K % 8 == 0; found x [{}], gate_up "
         "[{}], act [{}]",
         kWg16MaxT, kWg16MaxRows, fmt::join(x.sizes().vec(), ", "), fmt::join(gate_up.sizes().vec(), ", "),
         fmt::join(act.sizes().vec(), ", "));
}
}  // namespace

void wg16_silu_mul_out(const at::Tensor& act, const at::Tensor& x, const at::Tensor& gate_up,
                       const at::Tensor& row_scale) {
  check_wg16_silu_mul(act, x, gate_up);
  Wg16Args a;
  a.Y = bf(act);
  a.ldy = act.stride(0);
  a.silu_mul = true;
  a.row_scale = row_scale_of(row_scale, x.size(0), "wg16_silu_mul");
  run_wg16(a, x, gate_up, "SPECPRESS_WG16_SWIGLU");
}

void wg16_silu_mul_norm_out(const at::Tensor& act, const at::Tensor& x, const at::Tensor& gate_up, double eps) {
  check_wg16_silu_mul(act, x, gate_up);
  if (!(eps >= 0)) fail("wg16_silu_mul: eps must be >= 0, found {}", eps);
  Wg16Args a;
  a.Y = bf(act);
  a.ldy = act.stride(0);
  a.silu_mul = true;
  a.row_norm = true;
  a.eps = static_cast<float>(eps);
  run_wg16(a, x, gate_up, "SPECPRESS_WG16_SWIGLU", wg16_silu_hold());
}

void wg16_linear_norm_out(const at::Tensor& out, const at::Tensor& x, const at::Tensor& weight, double eps) {
  check_wg16_linear(out, x, weight, "wg16_linear_norm");
  if (!(eps >= 0)) fail("wg16_linear_norm: eps must be >= 0, found {}", eps);
  Wg16Args a;
  a.Y = bf(out);
  a.ldy = out.stride(0);
  a.row_norm = true;
  a.eps = static_cast<float>(eps);
  run_wg16(a, x, weight, "SPECPRESS_WG16");
}

namespace {
constexpr int64_t kWg16HeadMaxRows = int64_t{1} << 30;  // an LM head's vocabulary: any that int arithmetic holds
bool wg16_head_argmax_fits(const at::Tensor& logits, const at::Tensor& tokens, const at::Tensor& x,
                           const at::Tensor& weight) {
  return wg16_operands_fit(x, weight, kWg16HeadMaxRows) && wg16_output_fits(logits, x, weight.size(0)) &&
         tokens.dim() == 1 && tokens.numel() == x.size(0) && tokens.scalar_type() == at::kLong &&
         tokens.is_contiguous() && tokens.device() == logits.device();
}
}  // namespace

void wg16_head_argmax_out(const at::Tensor& logits, const at::Tensor& tokens, const at::Tensor& x,
                          const at::Tensor& weight) {
  require(x, "wg16_head_argmax x", at::kBFloat16, false);
  require(logits, "wg16_head_argmax logits", at::kBFloat16, false);
  require(weight, "wg16_head_argmax weight", at::kBFloat16, false);
  require(tokens, "wg16_head_argmax tokens", at::kLong);
  if (!wg16_head_argmax_fits(logits, tokens, x, weight))
    fail("wg16_head_argmax: expected x [M <= {}, K], weight [V, K], logits [M, V], bf16, unit column strides, x and "
         "weight 16-byte aligned with row strides % 8 == 0, K % 8 == 0, tokens int64 [M] contiguous; found x [{}], "
         "weight [{}], logits [{}], tokens [{}]",
         kWg16MaxT, fmt::join(x.sizes().vec(), ", "), fmt::join(weight.sizes().vec(), ", "),
         fmt::join(logits.sizes().vec(), ", "), fmt::join(tokens.sizes().vec(), ", "));
  Wg16Args a;
  a.Y = bf(logits);
  a.ldy = logits.stride(0);
  a.argmax = tokens.data_ptr<int64_t>();
  run_wg16(a, x, weight, "SPECPRESS_WG16_HEAD_ARGMAX");
}

EnvSwitch& wg16_head_argmax_switch() {
  static EnvSwitch s("SPECPRESS_WG16_HEAD_ARGMAX", true);
  return s;
}

bool wg16_head_argmax_takes(const at::Tensor& logits, const at::Tensor& tokens, const at::Tensor& x,
                            const at::Tensor& weight) {
  return x.dim() == 2 && x.size(0) >= 2 && multirow_by_cublas() && wg16_switch().on() &&
         wg16_head_argmax_switch().on() && wg16_head_argmax_fits(logits, tokens, x, weight);
}

EnvSwitch& wg16_swiglu_switch() {
  static EnvSwitch s("SPECPRESS_WG16_SWIGLU", false);
  return s;
}

bool wg16_swiglu_takes(const at::Tensor& act, const at::Tensor& x, const at::Tensor& gate_up) {
  return x.dim() == 2 && x.size(0) >= 2 && multirow_by_cublas() && wg16_swiglu_switch().on() &&
         wg16_silu_mul_fits(act, x, gate_up);
}

namespace {
// Whether linear_out / linear_residual_out give this product to the wgmma kernel.
bool wg16_takes(const at::Tensor& out, const at::Tensor& x, const at::Tensor& weight) {
  return x.size(0) >= 2 && multirow_by_cublas() && wg16_switch().on() && wg16_fits(out, x, weight);
}
}  // namespace

bool wg16_linear_norm_takes(const at::Tensor& out, const at::Tensor& x, const at::Tensor& weight) {
  return wg16_takes(out, x, weight);
}

void linear_residual_out(const at::Tensor& residual, const at::Tensor& x, const at::Tensor& weight, const at::Tensor& tmp) {
  const int64_t M = x.size(0);
  if (fused_one_row(M) && gemv_fits(residual, x, weight)) {
    gemv_residual_out(residual, x, weight);
    return;
  }
  if (wg16_takes(residual, x, weight)) {
    wg16_linear_out(residual, x, weight, /*accumulate=*/true);
    return;
  }
  if (M >= 2 && linear_uses_lt_plans() && lt_linear_out(residual, x, weight, /*accumulate=*/true)) return;
  linear_out(tmp, x, weight);
  at::add_out(const_cast<at::Tensor&>(residual), residual, tmp);
}

void linear_out(const at::Tensor& out, const at::Tensor& x, const at::Tensor& weight) {
  const int64_t M = x.size(0), K = x.size(1), N = weight.size(0);
  if (gemv_at_one_row() && M == 1 && gemv_fits(out, x, weight)) {
    if (weight.size(1) != K || out.size(1) != N) fail("linear: shapes disagree");
    gemv_out(out, x, weight);
    return;
  }
  const bool stream_rows = (g_gemm_mode == GemmMode::kStream && M >= 2) || g_gemm_mode == GemmMode::kStreamAll;
  if (stream_rows && M <= 16 && gemm_small_fits(out, x, weight)) {
    gemm_small_out(out, x, weight);
    return;
  }
  const bool skinny = g_gemm_mode == GemmMode::kSkinny && M <= 16 && K % 32 == 0 && x.dim() == 2 && out.dim() == 2 &&
                      x.stride(1) == 1 && x.stride(0) % 8 == 0 && out.stride(1) == 1 && weight.is_contiguous() &&
                      x.scalar_type() == at::kBFloat16 && weight.scalar_type() == at::kBFloat16 &&
                      out.scalar_type() == at::kBFloat16 && aligned16(x) && aligned16(weight);
  if (skinny) {
    if (weight.size(1) != K || out.size(0) != M || out.size(1) != N) fail("linear: shapes disagree");
    check_cuda(skinny_gemm(bf(x), x.stride(0), bf(weight), bf(out), out.stride(0), static_cast<int>(M),
                           static_cast<int>(N), static_cast<int>(K), stream()),
               "skinny_gemm");
    return;
  }
  if (wg16_takes(out, x, weight)) {
    wg16_linear_out(out, x, weight, /*accumulate=*/false);
    return;
  }
  if (M >= 2 && linear_uses_lt_plans() && lt_linear_out(out, x, weight)) return;
  at::Tensor o = out;  // mm_out takes a non-const reference to the output handle
  at::mm_out(o, x, weight.t());
}

}  // namespace specpress::kernels
