// qwen3_fast.cpp — see qwen3_fast.h.
#include "model/qwen3_fast.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <set>

#include "core/env_switch.h"
#include "core/error.h"
#include "kernels/attention.h"
#include "kernels/decode_layers.h"
#include "kernels/gemm_wg16.h"
#include "kernels/gemv_mlp.h"
#include "kernels/gemv_o_gate_up.h"
#include "kernels/graph_edges.h"
#include "kernels/l2_prefetch.h"
#include "kernels/launch.h"
#include "kernels/lt_linear.h"
#include "kernels/rmsnorm.h"
#include "kernels/timing_events.h"

namespace specpress::model {
namespace {

using kernels::check_cuda;

bool widths_supported(const Qwen3Config& c, const char* who, std::string* why) {
  auto no = [&](const std::string& reason) {
    if (why != nullptr) *why = std::string(who) + ": " + reason;
    return false;
  };
  if (c.hidden_size % 8 != 0 || c.hidden_size > 8192) return no("hidden_size must be a multiple of 8, at most 8192");
  if (c.intermediate_size % 8 != 0) return no("intermediate_size must be a multiple of 8");
  if (c.head_dim != 32 && c.head_dim != 64 && c.head_dim != 128) return no("head_dim must be 32, 64 or 128");
  if (c.num_heads / c.num_kv_heads > 64) return no("more than 64 query heads per kv head");
  return true;
}

// The fused QKV and gate/up weights; with `fold`, each with its RMSNorm weight folded into its columns,
// W diag(norm) computed in fp32 and rounded once to bf16 (FastEngine's folded norms).
FastLayer fuse_layer(const DecoderLayerWeights& w, bool fold) {
  at::Tensor qkv = at::cat({w.q_proj, w.k_proj, w.v_proj}, 0), gate_up = at::cat({w.gate_proj, w.up_proj}, 0);
  if (fold) {
    qkv = (qkv.to(at::kFloat) * w.input_norm.to(at::kFloat).unsqueeze(0)).to(qkv.scalar_type());
    gate_up = (gate_up.to(at::kFloat) * w.post_norm.to(at::kFloat).unsqueeze(0)).to(gate_up.scalar_type());
  }
  return FastLayer{w.input_norm, qkv.contiguous(), w.q_norm, w.k_norm, w.o_proj.contiguous(), w.post_norm,
                   gate_up.contiguous(), w.down_proj.contiguous()};
}

EnvSwitch& fold_switch() {
  static EnvSwitch s("SPECPRESS_FOLD_NORMS", true);
  return s;
}

EnvSwitch& draft_kv_batch_switch() {
  static EnvSwitch s("SPECPRESS_DRAFT_KV_BATCH", true);
  return s;
}

EnvSwitch& inject_in_verify_switch() {
  static EnvSwitch s("SPECPRESS_INJECT_IN_VERIFY", true);
  return s;
}

EnvSwitch& record_mapped_switch() {
  static EnvSwitch s("SPECPRESS_RECORD_MAPPED", true);
  return s;
}

EnvSwitch& decode_persistent_switch() {
  static EnvSwitch s("SPECPRESS_DECODE_PERSISTENT", false);
  return s;
}

EnvSwitch& o_gate_up_switch() {
  static EnvSwitch s("SPECPRESS_GEMV_O_GATE_UP", false);
  return s;
}

EnvSwitch& mlp_switch() {
  static EnvSwitch s("SPECPRESS_GEMV_MLP", false);
  return s;
}

EnvSwitch& mlp_ordered_switch() {
  static EnvSwitch s("SPECPRESS_GEMV_MLP_ORDERED", true);
  return s;
}

EnvSwitch& qkv_norm_switch() {
  static EnvSwitch s("SPECPRESS_WG16_QKV_NORM", true);
  return s;
}

EnvSwitch& l2_prefetch_switch() {
  static EnvSwitch s("SPECPRESS_L2_PREFETCH", true);
  return s;
}

// The decode step's attention (one query row), for tuning: SPECPRESS_DECODE_SPLIT_KEYS, the fewest keys a split
// takes (AttentionArgs::min_split_keys; unset: the kernel's 128), and SPECPRESS_DECODE_ATTN_WARPS, warps a block
// (4 or 8; unset: the kernel's 8). A process-wide kernels::set_attention_block_warps (fast_perf's comparisons) takes
// precedence over the variable. Read once; a bad value fails naming the variable. Only the decode step's buffers
// take them (the FastEngine constructor), not a one-token prefill's.
int decode_split_keys() {
  static const int keys = kernels::env_int("SPECPRESS_DECODE_SPLIT_KEYS", 8, 4096, 0, "8 .. 4096");
  return keys;
}
int decode_attention_warps() {
  static const int warps = kernels::env_int_of("SPECPRESS_DECODE_ATTN_WARPS", {4, 8}, 0, "4 or 8");
  return warps;
}

// A bf16 tensor's data as the torch-free kernels take it (kernels::DecodeLayer, DecodeLayersArgs).
__nv_bfloat16* bf(const at::Tensor& t) { return reinterpret_cast<__nv_bfloat16*>(t.data_ptr()); }

double tensor_bytes(const at::Tensor& t) { return static_cast<double>(t.numel()) * t.element_size(); }

double layer_bytes(const FastLayer& l) {
  return tensor_bytes(l.input_norm) + tensor_bytes(l.qkv) + tensor_bytes(l.q_norm) + tensor_bytes(l.k_norm) +
         tensor_bytes(l.o_proj) + tensor_bytes(l.post_norm) + tensor_bytes(l.gate_up) + tensor_bytes(l.down);
}

}  // namespace

bool fold_norms() { return fold_switch().on(); }

void set_fold_norms(bool on) { fold_switch().set(on); }

bool draft_kv_batch() { return draft_kv_batch_switch().on(); }

void set_draft_kv_batch(bool on) { draft_kv_batch_switch().set(on); }

bool inject_in_verify() { return inject_in_verify_switch().on(); }

namespace {
EnvSwitch& multirow_auto_switch() {
  static EnvSwitch s("SPECPRESS_WG16_AUTO", true);
  return s;
}
}  // namespace
bool multirow_auto() { return multirow_auto_switch().on(); }
void set_multirow_auto(bool on) { multirow_auto_switch().set(on); }
bool multirow_chooses() {
  // in the skinny and streaming modes the wgmma switches change nothing (kernels::multirow_by_cublas)
  return multirow_auto() && kernels::multirow_by_cublas() && !kernels::wg16_switch().chosen() &&
         !kernels::wg16_swiglu_switch().chosen() && kernels::gemm_wg16_available();
}

void set_inject_in_verify(bool on) { inject_in_verify_switch().set(on); }

bool record_mapped() { return record_mapped_switch().on(); }

void set_record_mapped(bool on) { record_mapped_switch().set(on); }

bool l2_prefetch_o() { return l2_prefetch_switch().on(); }

void set_l2_prefetch_o(bool on) { l2_prefetch_switch().set(on); }

int l2_prefetch_gate_up_percent() {
  static const int percent = kernels::env_int("SPECPRESS_L2_PREFETCH_GATE_UP", 0, 100, 3, "a percentage, 0 .. 100");
  return l2_prefetch_o() ? percent : 0;
}

int l2_prefetch_down_percent() {
  static const int percent = kernels::env_int("SPECPRESS_L2_PREFETCH_DOWN", 0, 100, 10, "a percentage, 0 .. 100");
  return l2_prefetch_o() ? percent : 0;
}

bool qkv_norm_in_product() { return qkv_norm_switch().on(); }

void set_qkv_norm_in_product(bool on) { qkv_norm_switch().set(on); }

int o_ring_kb() {
  static const int kb = kernels::env_int("SPECPRESS_WG16_O_RING_KB", 40, 200, 160, "an integer from 40 to 200 (KB)");
  return kb;
}

int o_splits() {
  static const int splits =
      kernels::env_int("SPECPRESS_WG16_O_SPLITS", 0, 16, 2, "an integer from 0 to 16 (0: the plan's rule)");
  return splits;
}

namespace {
bool& wg16_layer_trace_flag() {
  static bool on = false;
  return on;
}
}  // namespace

bool wg16_layer_trace() { return wg16_layer_trace_flag(); }

void set_wg16_layer_trace(bool on) { wg16_layer_trace_flag() = on; }

namespace {
bool& decode_step_trace_flag() {
  static bool on = false;
  return on;
}
}  // namespace

bool decode_step_trace() { return decode_step_trace_flag(); }

void set_decode_step_trace(bool on) { decode_step_trace_flag() = on; }

bool decode_persistent() { return decode_persistent_switch().on(); }

void set_decode_persistent(bool on) { decode_persistent_switch().set(on); }

bool gemv_o_gate_up_fused() { return o_gate_up_switch().on(); }

void set_gemv_o_gate_up_fused(bool on) { o_gate_up_switch().set(on); }

bool gemv_mlp_fused() { return mlp_switch().on(); }

void set_gemv_mlp_fused(bool on) { mlp_switch().set(on); }

bool gemv_mlp_timed() { return !mlp_switch().chosen(); }

EnvSwitch& gemv_mlp_switch() { return mlp_switch(); }

bool gemv_mlp_ordered() { return mlp_ordered_switch().on(); }

void set_gemv_mlp_ordered(bool on) { mlp_ordered_switch().set(on); }

namespace {
bool& persistent_trace_flag() {
  static bool on = false;
  return on;
}
}  // namespace

bool decode_persistent_trace() { return persistent_trace_flag(); }

void set_decode_persistent_trace(bool on) { persistent_trace_flag() = on; }

bool fast_path_supported(const Qwen3Model& target, const DFlashDraft* draft, std::string* why) {
  auto no = [&](const std::string& reason) {
    if (why != nullptr) *why = reason;
    return false;
  };
  if (!target.device().is_cuda()) return no("needs --device cuda");
  if (target.dtype() != at::kBFloat16) return no("needs --dtype bf16");
  {
    const c10::cuda::OptionalCUDAGuard on_the_models_gpu(target.device());  // LibTorch's view of it, restored after
    if (!kernels::kernels_run_on_current_device())
      return no("this build's CUDA kernels are not for this GPU (CMAKE_CUDA_ARCHITECTURES names those it has)");
  }
  if (!widths_supported(target.config(), "target", why)) return false;
  if (draft != nullptr) {
    const DFlashConfig& dc = draft->config();
    if (!widths_supported(dc.arch, "draft", why)) return false;
    std::set<int64_t> unique(dc.target_layer_ids.begin(), dc.target_layer_ids.end());
    if (unique.size() != dc.target_layer_ids.size()) return no("draft: repeated target_layer_ids");
    if (unique.empty()) return no("draft: no target_layer_ids (the layers whose hidden states it reads)");
    for (int64_t id : unique)
      if (id < 0 || id >= target.config().num_layers)
        return no(fmt::format("draft: target_layer_ids has {}, outside the target's layers 0..{}", id,
                              target.config().num_layers - 1));
  }
  return true;
}

FastEngine::FastEngine(const Qwen3Model& target, const DFlashDraft* draft, int64_t capacity, int64_t block_size,
                       const FastTargetLayers* shared)
    : target_(target),
      draft_(draft),
      capacity_(capacity),
      device_(target.device()),
      stream_(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, target.device().index())),
      side_stream_(c10::cuda::getStreamFromPool(/*isHighPriority=*/true, target.device().index())),
      inject_stream_(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, target.device().index())),
      prefetch_stream_(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, target.device().index())) {
  std::string why;
  if (!fast_path_supported(target, draft, &why)) fail("fast path: {}", why);
  const Qwen3Config& c = target.config();
  if (capacity < 2 || capacity > c.max_position_embeddings)
    fail("fast path: cache capacity {} outside 2..{}", capacity, c.max_position_embeddings);
  // Weights may still be in flight on another stream (the engine stream does not wait on the default one).
  check_cuda(cudaDeviceSynchronize(), "engine set-up");
  c10::cuda::CUDAStreamGuard guard(stream_);
  check_cuda(cudaEventCreateWithFlags(&fork_event_, cudaEventDisableTiming), "engine events");
  check_cuda(cudaEventCreateWithFlags(&join_event_, cudaEventDisableTiming), "engine events");
  check_cuda(cudaEventCreateWithFlags(&taps_event_, cudaEventDisableTiming), "engine events");
  check_cuda(cudaEventCreateWithFlags(&inject_event_, cudaEventDisableTiming), "engine events");
  check_cuda(cudaEventCreateWithFlags(&prefetch_fork_event_, cudaEventDisableTiming), "engine events");
  check_cuda(cudaEventCreateWithFlags(&prefetch_join_event_, cudaEventDisableTiming), "engine events");
  prefetch_o_ = l2_prefetch_o();
  qkv_norm_ = qkv_norm_in_product();
  prefetch_gate_up_percent_ = l2_prefetch_gate_up_percent();
  prefetch_down_percent_ = l2_prefetch_down_percent();
  folded_ = fold_norms();
  auto bf16 = at::TensorOptions().dtype(at::kBFloat16).device(device_);
  auto i32 = at::TensorOptions().dtype(at::kInt).device(device_);
  auto i64 = at::TensorOptions().dtype(at::kLong).device(device_);
  if (shared != nullptr && shared->model == &target && shared->folded == folded_ &&
      shared->layers.size() == target.weights().layers.size())
    t_layers_ = shared->layers;
  else
    for (const DecoderLayerWeights& w : target.weights().layers) t_layers_.push_back(fuse_layer(w, folded_));
  k_cache_ = at::zeros({c.num_layers, c.num_kv_heads, capacity, c.head_dim}, bf16);
  v_cache_ = at::zeros_like(k_cache_);
  start_ = at::zeros({1}, i32);
  ctx_start_ = at::zeros({1}, i32);
  token_in_ = at::zeros({1}, i64);
  decode_buf_ = make_target_buffers(1, 1, false, kernels::attention_default_splits(capacity, 1));
  decode_buf_.attn_scratch.min_split_keys = decode_split_keys();
  if (decode_buf_.attn_scratch.block_warps == 0) decode_buf_.attn_scratch.block_warps = decode_attention_warps();
  auto contiguous = [&] {
    for (const FastLayer& w : t_layers_)
      for (const at::Tensor* t : {&w.qkv, &w.o_proj, &w.gate_up, &w.down, &w.q_norm, &w.k_norm})
        if (!t->is_contiguous()) return false;
    return true;
  };
  if (gemv_o_gate_up_fused() && folded_ && !t_layers_.empty() && contiguous() &&
      kernels::gemv_o_gate_up_takes(static_cast<int>(c.hidden_size), static_cast<int>(t_layers_[0].o_proj.size(1)),
                                    static_cast<int>(t_layers_[0].gate_up.size(0) / 2))) {
    o_gate_up_ = true;
    o_gate_up_barrier_ = at::zeros({kernels::kGemvOGateUpBarrierWords}, i32);
  }
  if (decode_persistent() && folded_ && contiguous() &&
      kernels::decode_layers_supported(static_cast<int>(c.hidden_size), static_cast<int>(c.intermediate_size),
                                       static_cast<int>(c.num_heads), static_cast<int>(c.num_kv_heads),
                                       static_cast<int>(c.head_dim))) {
    std::vector<kernels::DecodeLayer> table;
    for (size_t l = 0; l < t_layers_.size(); ++l) {
      const FastLayer& w = t_layers_[l];
      const auto li = static_cast<int64_t>(l);
      table.push_back({bf(w.qkv), bf(w.o_proj), bf(w.gate_up), bf(w.down), bf(w.q_norm), bf(w.k_norm),
                       bf(k_cache_.select(0, li)), bf(v_cache_.select(0, li))});
    }
    const auto bytes = static_cast<int64_t>(table.size() * sizeof(kernels::DecodeLayer));
    persistent_layers_ = at::empty({bytes}, at::TensorOptions().dtype(at::kByte).device(device_));
    // on the engine stream, where the table was allocated (the legacy stream of a plain cudaMemcpy does not wait
    // for it), and waited for before `table` goes
    check_cuda(cudaMemcpyAsync(persistent_layers_.data_ptr(), table.data(), static_cast<size_t>(bytes),
                               cudaMemcpyHostToDevice, stream_.stream()),
               "persistent decode: layer table");
    check_cuda(cudaStreamSynchronize(stream_.stream()), "persistent decode: layer table");
    persistent_workspace_ = at::zeros({static_cast<int64_t>(kernels::decode_layers_workspace_floats(
                                          static_cast<int>(c.num_heads), static_cast<int>(c.num_kv_heads),
                                          static_cast<int>(c.head_dim)))},
                                      at::TensorOptions().dtype(at::kFloat).device(device_));
    persistent_counters_ = at::zeros({kernels::decode_layers_counter_count(static_cast<int>(c.num_kv_heads))}, i32);
    if (decode_persistent_trace()) {
      int dev = 0, sms = 0;
      check_cuda(cudaGetDevice(&dev), "persistent decode: trace");
      check_cuda(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), "persistent decode: trace");
      persistent_trace_ = at::zeros({sms, 5 * static_cast<int64_t>(t_layers_.size()) + 1, kernels::kDecodeTraceFields},
                                    at::TensorOptions().dtype(at::kLong).device(device_));
    }
    persistent_ = true;
  }
  // the fused decode MLP: pinned on, or timed at capture by engines for plain decoding (gemv_mlp_timed); only where
  // the decode step runs the one-row GEMV layers (the matmul mode: kernels::fused_one_row)
  const int64_t I = t_layers_.empty() ? 0 : t_layers_[0].gate_up.size(0) / 2;
  if (!o_gate_up_ && !persistent_ && folded_ && I > 0 && kernels::fused_one_row(1) &&
      (gemv_mlp_fused() || (gemv_mlp_timed() && draft == nullptr)) &&
      kernels::gemv_mlp_takes(static_cast<int>(c.hidden_size), static_cast<int>(I))) {
    mlp_ = true;
    mlp_timed_ = !gemv_mlp_fused();
    mlp_ordered_ = gemv_mlp_ordered();
    for (const FastLayer& w : t_layers_) down_t_.push_back(w.down.t().contiguous());
    const size_t acc_floats =
        kernels::gemv_mlp_acc_floats(static_cast<int>(c.hidden_size), static_cast<int>(I), mlp_ordered_);
    mlp_acc_ = at::zeros({static_cast<int64_t>(acc_floats)}, at::TensorOptions().dtype(at::kFloat).device(device_));
    mlp_counter_ = at::zeros({1}, i32);
  }
  if (draft != nullptr) {
    const DFlashConfig& dc = draft->config();
    const Qwen3Config& a = dc.arch;
    B_ = block_size == 0 ? dc.block_size : block_size;
    if (B_ < 2 || B_ > dc.block_size) fail("fast path: block size {} outside 2..{}", B_, dc.block_size);
    if (capacity < B_ + 1) fail("fast path: cache capacity {} below the block size + 1", capacity);
    tap_layers_ = dc.target_layer_ids;
    const int splits = kernels::attention_default_splits(capacity, static_cast<int>(B_));
    verify_buf_ = make_target_buffers(B_, B_, true, splits);
    // The draft's layers stay unfolded: its context K/V injection projects features its layers' input norms never
    // saw, and folding them measured above the numerics bound (draft logits 1.13e-2, docs/PERF.md, thirteenth pass).
    for (const DecoderLayerWeights& w : draft->weights().layers) d_layers_.push_back(fuse_layer(w, false));
    dk_cache_ = at::zeros({a.num_layers, a.num_kv_heads, capacity, a.head_dim}, bf16);
    dv_cache_ = at::zeros_like(dk_cache_);
    draft_rope_ = draft->rope();  // the reference draft's table (the target's where equal): shared, not built again
    draft_buf_ = make_buffers(B_, B_ - 1, a, 0, splits);
    draft_ctx_raw_ = at::zeros({B_, a.hidden_size}, bf16);
    draft_ctx_ = at::zeros({B_, a.hidden_size}, bf16);
    const int64_t kv_rows = 2 * a.num_kv_heads * a.head_dim;
    if (draft_kv_batch()) {
      std::vector<at::Tensor> kv;
      for (const DecoderLayerWeights& w : draft->weights().layers) {
        kv.push_back(w.k_proj);
        kv.push_back(w.v_proj);
      }
      draft_kv_weight_ = at::cat(kv, 0).contiguous();
      std::vector<at::Tensor> k_norms;
      for (const DecoderLayerWeights& w : draft->weights().layers) k_norms.push_back(w.k_norm);
      draft_k_norms_ = at::stack(k_norms, 0).contiguous();
    }
    draft_kv_ = at::zeros({B_, kv_rows * (draft_kv_weight_.defined() ? a.num_layers : 1)}, bf16);
    block_ids_ = at::full({B_}, dc.mask_token_id, i64);
    posterior_ = at::zeros({B_}, i64);
    record_ = at::zeros({2 * B_ + 1}, i64);
    inject_in_verify_ = inject_in_verify();
  }
  auto pinned = at::TensorOptions().dtype(at::kLong).pinned_memory(true);
  record_host_ = at::zeros({2, 2 * std::max<int64_t>(B_, 1) + 1}, pinned);
  scalar_host_ = at::zeros({2}, pinned);
  if (draft != nullptr && record_mapped()) {
    // Pinned memory is mapped into the device's address space where the device has unified addressing (every
    // 64-bit Linux system CUDA supports); where it is not, accept_into keeps the copy.
    void* mapped = nullptr;
    if (cudaHostGetDevicePointer(&mapped, record_host_.data_ptr(), 0) == cudaSuccess)
      record_host_device_ = static_cast<int64_t*>(mapped);
    else
      (void)cudaGetLastError();  // clear the error; the copy path is used
  }
  for (int i = 0; i < 2; ++i) {
    check_cuda(cudaEventCreateWithFlags(&token_copied_[i], cudaEventDisableTiming), "engine events");
    check_cuda(cudaEventCreateWithFlags(&record_copied_[i], cudaEventDisableTiming), "engine events");
  }
  check_cuda(cudaStreamSynchronize(stream_.stream()), "engine set-up");
}

FastEngine::~FastEngine() {
  // its work done before its buffers go back to the allocator (and shared layers, made on another engine's stream,
  // to that stream's pool)
  cudaStreamSynchronize(stream_.stream());
  for (cudaEvent_t e : token_copied_)
    if (e != nullptr) cudaEventDestroy(e);
  for (cudaEvent_t e : record_copied_)
    if (e != nullptr) cudaEventDestroy(e);
  for (cudaEvent_t e : {fork_event_, join_event_, taps_event_, inject_event_, prefetch_fork_event_, prefetch_join_event_})
    if (e != nullptr) cudaEventDestroy(e);
}

FastBuffers FastEngine::make_buffers(int64_t rows, int64_t logit_rows, const Qwen3Config& c, int64_t taps_width,
                                     int splits) const {
  auto bf16 = at::TensorOptions().dtype(at::kBFloat16).device(device_);
  const int64_t H = c.hidden_size, hd = c.head_dim, nq = c.num_heads, nkv = c.num_kv_heads;
  FastBuffers b;
  b.rows = rows;
  b.x = at::zeros({rows, H}, bf16);
  b.h = at::zeros({rows, H}, bf16);
  b.qkv = at::zeros({rows, (nq + 2 * nkv) * hd}, bf16);
  b.q = at::zeros({rows, nq, hd}, bf16);
  b.attn = at::zeros({rows, nq * hd}, bf16);
  b.o = at::zeros({rows, H}, bf16);
  b.gate_up = at::zeros({rows, 2 * c.intermediate_size}, bf16);
  b.act = at::zeros({rows, c.intermediate_size}, bf16);
  b.logits = at::zeros({std::max<int64_t>(logit_rows, 1), target_.config().vocab_size}, bf16);
  b.tokens = at::zeros({std::max<int64_t>(logit_rows, 1)}, at::TensorOptions().dtype(at::kLong).device(device_));
  if (taps_width > 0) b.taps = at::zeros({rows, taps_width}, bf16);
  b.rs = at::zeros({2, rows}, at::TensorOptions().dtype(at::kFloat).device(device_));
  b.attn_scratch = kernels::make_attention_scratch(rows, nq, nkv, hd, splits, device_);
  return b;
}

FastBuffers FastEngine::make_target_buffers(int64_t rows, int64_t logit_rows, bool taps, int splits) const {
  const int64_t width = taps ? static_cast<int64_t>(tap_layers_.size()) * target_.config().hidden_size : 0;
  return make_buffers(rows, logit_rows, target_.config(), width, splits);
}

void FastEngine::run_layers(const std::vector<FastLayer>& layers, const Qwen3Config& c, const ops::RopeTable& rope,
                            const at::Tensor& k_cache, const at::Tensor& v_cache, FastBuffers& b, int64_t T,
                            const at::Tensor& pos, bool causal, const at::Tensor& final_norm,
                            const std::vector<int64_t>& taps, const TapsReady* taps_ready) {
  const double eps = c.rms_norm_eps;
  const int64_t H = c.hidden_size;
  at::Tensor x = b.x.narrow(0, 0, T), h = b.h.narrow(0, 0, T), qkv = b.qkv.narrow(0, 0, T), q = b.q.narrow(0, 0, T);
  at::Tensor attn = b.attn.narrow(0, 0, T), o = b.o.narrow(0, 0, T), gu = b.gate_up.narrow(0, 0, T);
  at::Tensor act = b.act.narrow(0, 0, T);
  // q/k-norm + RoPE, the cache write and the attention of layer l: one launch for T <= 16 rows.
  // row_scale: a folded input norm's row factors (undefined: qkv is already the normed rows' projection).
  auto attend = [&](const FastLayer& w, const at::Tensor& kc, const at::Tensor& vc, const at::Tensor& row_scale = {}) {
    if (T <= kernels::kAttentionSmallT) {
      kernels::attention_qkv_out(attn, qkv, c.num_heads, c.num_kv_heads, w.q_norm, w.k_norm, rope, pos, kc, vc, causal,
                                 eps, b.attn_scratch, row_scale);
      return;
    }
    kernels::qk_norm_rope_out(qkv, c.num_heads, c.num_kv_heads, w.q_norm, w.k_norm, rope, pos, q, kc, vc, eps, row_scale);
    kernels::attention_out(attn, q, kc, vc, pos, T, causal, b.attn_scratch);
  };
  // The tap columns of layer l (undefined when l is not tapped).
  auto tap_of = [&](size_t l) {
    for (size_t i = 0; i < taps.size(); ++i)
      if (taps[i] == static_cast<int64_t>(l))
        return b.taps.narrow(0, 0, T).narrow(1, static_cast<int64_t>(i) * H, H);
    return at::Tensor();
  };
  const bool folded = folded_ && &layers == &t_layers_;
  static const at::Tensor none;
  // taps_ready: called once, right after the last tap's write is queued, with an event behind it.
  const int64_t last_tap = taps.empty() ? -1 : *std::max_element(taps.begin(), taps.end());
  const cudaStream_t main_stream = at::cuda::getCurrentCUDAStream().stream();
  auto announce_taps = [&](int64_t l, cudaEvent_t written = nullptr) {
    if (taps_ready == nullptr || l != last_tap) return;
    if (written == nullptr) {
      check_cuda(cudaEventRecord(taps_event_, main_stream), "taps written");
      written = taps_event_;
    }
    (*taps_ready)(written);
  };
  // l2_prefetch_o(): in the multi-row steps, all of W_o into the L2 while the attention runs, on prefetch_stream_
  // once the kernels queued so far (up to the qkv product) have completed; also the heads of the gate/up rows beside
  // the o product and of the down rows beside the SwiGLU (l2_prefetch_gate_up_percent, l2_prefetch_down_percent). The
  // prefetch stream runs them in order and is joined into the main stream when the layers end.
  const bool prefetch_o = prefetch_o_ && !kernels::fused_one_row(T) && T <= kernels::kAttentionSmallT;
  bool prefetched = false;
  // The first `percent`% of each row of W (all of it at 100) from the kernels queued so far on: a fork, one launch.
  auto prefetch_rows = [&](const at::Tensor& W, int percent) {
    if (!prefetch_o || percent <= 0) return;
    const int64_t row = W.size(1) * W.element_size(), stride = W.stride(0) * W.element_size();
    const int64_t bytes = std::min(row, (row * percent / 100 + 15) / 16 * 16);
    check_cuda(cudaEventRecord(prefetch_fork_event_, main_stream), "fork to the prefetch stream");
    check_cuda(cudaStreamWaitEvent(prefetch_stream_.stream(), prefetch_fork_event_), "fork to the prefetch stream");
    check_cuda(kernels::l2_prefetch_rows(W.data_ptr(), W.size(0), stride, 0, bytes, prefetch_stream_.stream()),
               "l2_prefetch_rows");
    prefetched = true;
  };
  auto prefetch_during_attention = [&](const FastLayer& w) { prefetch_rows(w.o_proj, 100); };
  auto join_prefetches = [&] {
    if (!prefetched) return;
    check_cuda(cudaEventRecord(prefetch_join_event_, prefetch_stream_.stream()), "join the prefetch stream");
    check_cuda(cudaStreamWaitEvent(main_stream, prefetch_join_event_), "join the prefetch stream");
  };
  if (persistent_ && &b == &decode_buf_ && folded && taps.empty() && &layers == &t_layers_) {
    // The decode step: every layer in one persistent kernel (kernels/decode_layers.h), x the residual row in place.
    kernels::DecodeLayersArgs a;
    a.layers = reinterpret_cast<const kernels::DecodeLayer*>(persistent_layers_.data_ptr());
    a.n_layers = static_cast<int>(layers.size());
    a.H = static_cast<int>(H);
    a.I = static_cast<int>(c.intermediate_size);
    a.nq = static_cast<int>(c.num_heads);
    a.nkv = static_cast<int>(c.num_kv_heads);
    a.hd = static_cast<int>(c.head_dim);
    a.cache_capacity = k_cache.size(2);
    a.eps = static_cast<float>(eps);
    a.rope_cos = rope.cos.data_ptr<float>();
    a.rope_sin = rope.sin.data_ptr<float>();
    a.pos = pos.data_ptr<int>();
    a.x = bf(x);
    a.qkv_out = bf(qkv);
    a.attn_out = bf(attn);
    a.act = bf(act);
    a.workspace = persistent_workspace_.data_ptr<float>();
    a.counters = reinterpret_cast<unsigned*>(persistent_counters_.data_ptr<int>());
    if (persistent_trace_.defined())
      a.trace = reinterpret_cast<unsigned long long*>(persistent_trace_.data_ptr<int64_t>());
    check_cuda(kernels::decode_layers(a, main_stream), "kernels::decode_layers");
    return;
  }
  if (kernels::fused_one_row(T)) {
    // One row: four GEMV launches and the attention (with q/k-norm + RoPE) per layer. The RMSNorms run as
    // the prologues of the qkv and gate/up GEMVs (x is the raw residual; folded: their weights are in W, and
    // each warp scales its sums by x's 1 / rms), the residual adds as the epilogues of o and down; h is not
    // written (the head applies the final norm the same way: head_logits).
    // The decode graph's launches stamp their timeline where asked (only while capturing, so that the eager warm-up
    // takes no rows; a caller's own scope stays as it is otherwise).
    std::optional<kernels::StepTraceScope> trace;
    if (decode_step_trace()) {
      cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
      check_cuda(cudaStreamIsCapturing(main_stream, &capture), "decode step trace");
      if (capture == cudaStreamCaptureStatusActive) trace.emplace(true);
    }
    for (size_t l = 0; l < layers.size(); ++l) {
      const FastLayer& w = layers[l];
      at::Tensor kc = k_cache.select(0, static_cast<int64_t>(l)), vc = v_cache.select(0, static_cast<int64_t>(l));
      kernels::gemv_out(qkv, x, w.qkv, folded ? none : w.input_norm, eps, folded);
      attend(w, kc, vc);
      // the decode step's fused forms (opt-in, at most one of them: the constructor)
      const bool o_gate_up = o_gate_up_ && folded && &b == &decode_buf_, mlp = mlp_ && folded && &b == &decode_buf_;
      if (o_gate_up)
        kernels::gemv_o_gate_up_out(x, attn, w.o_proj, act, w.gate_up, eps, o_gate_up_barrier_);  // o and gate/up
      else
        kernels::gemv_residual_out(x, attn, w.o_proj);  // x += attention
      if (mlp) {
        // x += mlp (tapped)
        kernels::gemv_mlp_out(x, w.gate_up, down_t_[l], eps, mlp_acc_, mlp_counter_, tap_of(l), mlp_ordered_);
      } else {
        if (!o_gate_up) kernels::gemv_silu_mul_out(act, x, w.gate_up, folded ? none : w.post_norm, eps, folded);
        kernels::gemv_residual_out(x, act, w.down, tap_of(l));  // x += mlp (tapped)
      }
      announce_taps(static_cast<int64_t>(l));
    }
    return;
  }
  if (folded) {
    // Norm weights folded into qkv and gate_up: the matmuls read the raw residual x, and the norms' row factors rs
    // (kernels::row_rms) run on the side stream beside them; the attention and the SwiGLU apply rs to their inputs. On
    // the wgmma kernel the products compute the factors themselves instead (its SwiGLU form; qkv_norm_in_product()),
    // except for the qkv products after a tapped layer, whose row_rms also copies the tap. The residual adds are the o
    // and down products' epilogues (linear_residual_out), so no kernel runs between two products but the attention and
    // the SwiGLU (docs/PERF.md, twelfth pass).
    auto side = [&](const at::Tensor& rs, const at::Tensor& tap) {
      check_cuda(cudaEventRecord(fork_event_, main_stream), "fork to the side stream");
      check_cuda(cudaStreamWaitEvent(side_stream_.stream(), fork_event_), "fork to the side stream");
      {
        c10::cuda::CUDAStreamGuard side_guard(side_stream_);
        kernels::row_rms_out(rs, x, eps, tap);
      }
      check_cuda(cudaEventRecord(join_event_, side_stream_.stream()), "join the side stream");
    };
    auto join = [&] { check_cuda(cudaStreamWaitEvent(main_stream, join_event_), "join the side stream"); };
    at::Tensor rs_attn = b.rs[0].narrow(0, 0, T), rs_mlp = b.rs[1].narrow(0, 0, T);
    int qkv_norm_count = 0;
    for (size_t l = 0; l < layers.size(); ++l) {
      const FastLayer& w = layers[l];
      at::Tensor kc = k_cache.select(0, static_cast<int64_t>(l)), vc = v_cache.select(0, static_cast<int64_t>(l));
      const at::Tensor prev_tap = l > 0 ? tap_of(l - 1) : at::Tensor();
      if (qkv_norm_ && !prev_tap.defined() && kernels::wg16_linear_norm_takes(qkv, x, w.qkv)) {
        // the product computes the norm's factors and writes the normed rows' projection: no row_rms beside it,
        // so nothing but the down product comes before it (a tap's copy still takes the side stream's row_rms)
        kernels::wg16_linear_norm_out(qkv, x, w.qkv, eps);
        ++qkv_norm_count;
        prefetch_during_attention(w);
        attend(w, kc, vc);
      } else {
        side(rs_attn, prev_tap);  // + the previous layer's tap
        if (l > 0) announce_taps(static_cast<int64_t>(l) - 1, join_event_);  // the side stream wrote it
        kernels::linear_out(qkv, x, w.qkv);
        prefetch_during_attention(w);
        join();
        attend(w, kc, vc, rs_attn);
      }
      prefetch_rows(w.gate_up, prefetch_gate_up_percent_);  // row heads, beside the o product
      {
        const kernels::Wg16RingScope ring(o_ring_kb(), o_splits());
        const kernels::Wg16TraceScope trace(wg16_layer_trace());
        kernels::linear_residual_out(x, attn, w.o_proj, o);  // x += attention
      }
      if (kernels::wg16_swiglu_takes(act, x, w.gate_up)) {
        // the product, the norm's factors and the SwiGLU in one launch: no row_rms, so nothing but the o product
        // comes before it (its ring fills while o runs, under PDL or a launch-completion edge). No down-row
        // prefetch beside it: that made verify 19-41 us slower at 4B and 45-132 at 8B (docs/PERF.md, 26th pass).
        const kernels::Wg16TraceScope trace(wg16_layer_trace());
        kernels::wg16_silu_mul_norm_out(act, x, w.gate_up, eps);
      } else {
        side(rs_mlp, at::Tensor());
        kernels::linear_out(gu, x, w.gate_up);
        join();
        prefetch_rows(w.down, prefetch_down_percent_);  // row heads, beside the SwiGLU and down's start
        kernels::silu_mul_out(act, gu, rs_mlp);
      }
      kernels::linear_residual_out(x, act, w.down, o);  // x += mlp
    }
    qkv_norm_layers_ = std::max(qkv_norm_layers_, qkv_norm_count);
    const at::Tensor tap_of_last = tap_of(layers.size() - 1);
    if (tap_of_last.defined()) kernels::row_rms_out(rs_attn, x, eps, tap_of_last);
    announce_taps(static_cast<int64_t>(layers.size()) - 1);
    join_prefetches();
    kernels::rmsnorm_out(h, x, final_norm, eps);
    return;
  }
  kernels::rmsnorm_out(h, x, layers[0].input_norm, eps);
  for (size_t l = 0; l < layers.size(); ++l) {
    const FastLayer& w = layers[l];
    at::Tensor kc = k_cache.select(0, static_cast<int64_t>(l)), vc = v_cache.select(0, static_cast<int64_t>(l));
    kernels::linear_out(qkv, h, w.qkv);
    prefetch_during_attention(w);
    attend(w, kc, vc);
    prefetch_rows(w.gate_up, prefetch_gate_up_percent_);  // row heads, beside the o product
    {
      const kernels::Wg16RingScope ring(o_ring_kb(), o_splits());
      const kernels::Wg16TraceScope trace(wg16_layer_trace());
      kernels::linear_out(o, attn, w.o_proj);
    }
    kernels::rmsnorm_out(h, o, w.post_norm, eps, x, x);  // x += attention; h = post-attention norm
    if (kernels::wg16_swiglu_takes(act, h, w.gate_up)) {  // the product and the SwiGLU in one launch (no prefetch)
      const kernels::Wg16TraceScope trace(wg16_layer_trace());
      kernels::linear_silu_mul_out(act, gu, h, w.gate_up);
    } else {
      // linear_silu_mul_out's form here (no fused one-row GEMV past the branch above), split for the prefetch
      kernels::linear_out(gu, h, w.gate_up);
      prefetch_rows(w.down, prefetch_down_percent_);  // row heads, beside the SwiGLU
      kernels::silu_mul_out(act, gu);
    }
    kernels::linear_out(o, act, w.down);
    const at::Tensor& next_norm = l + 1 < layers.size() ? layers[l + 1].input_norm : final_norm;
    kernels::rmsnorm_out(h, o, next_norm, eps, x, x, tap_of(l));  // x += mlp (tapped); h = next layer's norm
    announce_taps(static_cast<int64_t>(l));
  }
  join_prefetches();
}

void FastEngine::head_logits(const at::Tensor& logits, FastBuffers& b, int64_t T, const at::Tensor& final_norm,
                             double eps, const at::Tensor& tokens) {
  const int64_t rows = logits.size(0);
  const at::Tensor& lm_head = target_.weights().lm_head;
  if (kernels::fused_one_row(T)) {
    kernels::gemv_out(logits, b.x.narrow(0, 0, 1), lm_head, final_norm, eps);
  } else {
    const at::Tensor h = b.h.narrow(0, T - rows, rows);
    if (tokens.defined() && kernels::wg16_head_argmax_takes(logits, tokens, h, lm_head)) {
      kernels::wg16_head_argmax_out(logits, tokens, h, lm_head);  // the argmax in the product's last block
      return;
    }
    kernels::linear_out(logits, h, lm_head);
  }
  if (tokens.defined()) kernels::argmax_out(tokens, logits);
}

void FastEngine::target_forward(const at::Tensor& ids, FastBuffers& b, int64_t logit_rows, bool taps,
                                const TapsReady* taps_ready, const at::Tensor& tokens) {
  const int64_t T = ids.numel();
  if (T > b.rows || logit_rows > b.logits.size(0) || logit_rows > T) fail("fast path: forward of {} rows exceeds its buffers", T);
  kernels::embedding_out(b.x.narrow(0, 0, T), target_.weights().embed_tokens, ids);
  static const std::vector<int64_t> no_taps;
  run_layers(t_layers_, target_.config(), target_.rope(), k_cache_, v_cache_, b, T, start_, /*causal=*/true,
             target_.weights().final_norm, taps ? tap_layers_ : no_taps, taps ? taps_ready : nullptr);
  head_logits(b.logits.narrow(0, 0, logit_rows), b, T, target_.weights().final_norm, target_.config().rms_norm_eps,
              tokens);
}

void FastEngine::draft_inject(const at::Tensor& features, const at::Tensor& raw, const at::Tensor& ctx,
                              const at::Tensor& kv, const at::Tensor& pos) {
  const Qwen3Config& a = draft_->config().arch;
  const DFlashWeights& dw = draft_->weights();
  kernels::linear_out(raw, features, dw.fc);
  kernels::rmsnorm_out(ctx, raw, dw.hidden_norm, a.rms_norm_eps);
  const int64_t q_rows = a.num_heads * a.head_dim, kv_rows = 2 * a.num_kv_heads * a.head_dim;
  static const at::Tensor none;
  const bool copy = draft_kv_weight_.defined();
  if (copy && kv.size(1) == draft_kv_weight_.size(0)) {
    // every layer's K/V rows in one product, their k-norm + RoPE + cache write in one launch
    kernels::linear_out(kv, ctx, draft_kv_weight_);
    kernels::context_kv_layers_out(kv, a.num_kv_heads, draft_k_norms_, draft_rope_, pos, dk_cache_, dv_cache_,
                                   a.rms_norm_eps);
    return;
  }
  // A layer at a time (kv: [T, kv_rows]): without the copy, and for the prompt's rows in first_draft, whose
  // all-layer scratch would take L times the memory.
  for (size_t l = 0; l < d_layers_.size(); ++l) {
    const FastLayer& w = d_layers_[l];
    kernels::linear_out(kv, ctx,
                        copy ? draft_kv_weight_.narrow(0, static_cast<int64_t>(l) * kv_rows, kv_rows)
                             : w.qkv.narrow(0, q_rows, kv_rows));
    kernels::qk_norm_rope_out(kv, 0, a.num_kv_heads, none, w.k_norm, draft_rope_, pos,
                              none, dk_cache_.select(0, static_cast<int64_t>(l)),
                              dv_cache_.select(0, static_cast<int64_t>(l)), a.rms_norm_eps);
  }
}

void FastEngine::draft_block() {
  const Qwen3Config& a = draft_->config().arch;
  FastBuffers& b = draft_buf_;
  kernels::embedding_out(b.x.narrow(0, 0, B_), target_.weights().embed_tokens, block_ids_);
  static const std::vector<int64_t> no_taps;
  run_layers(d_layers_, a, draft_rope_, dk_cache_, dv_cache_, b, B_, start_, /*causal=*/false,
             draft_->weights().final_norm, no_taps);
  at::Tensor logits = b.logits.narrow(0, 0, B_ - 1);
  head_logits(logits, b, B_, draft_->weights().final_norm, a.rms_norm_eps, block_ids_.narrow(0, 1, B_ - 1));
}

void FastEngine::decode_body() {
  target_forward(token_in_, decode_buf_, 1, false, nullptr, token_in_);
  kernels::advance_counter(start_, 1);
}

void FastEngine::verify_body() {
  if (!inject_in_verify_) {
    target_forward(block_ids_, verify_buf_, B_, true, nullptr, posterior_);
    return;
  }
  // The next draft's context injection of the B tapped rows, at the block's positions (start_, which the accept
  // after this step advances), on inject_stream_ from the moment the last tap is written, beside the forward's
  // last layers and LM head; joined before the step ends. It writes the draft's caches and scratch only, which
  // nothing in this step reads. Rows past the accepted length are rewritten by the next draft's block, as
  // when the draft step injects them.
  const cudaStream_t main_stream = at::cuda::getCurrentCUDAStream().stream();
  bool injected = false;
  const TapsReady inject = [&](cudaEvent_t taps_written) {
    injected = true;
    check_cuda(cudaStreamWaitEvent(inject_stream_.stream(), taps_written), "fork to the injection stream");
    {
      c10::cuda::CUDAStreamGuard inject_guard(inject_stream_);
      draft_inject(verify_buf_.taps, draft_ctx_raw_, draft_ctx_, draft_kv_, start_);
    }
    check_cuda(cudaEventRecord(inject_event_, inject_stream_.stream()), "join the injection stream");
  };
  target_forward(block_ids_, verify_buf_, B_, true, &inject, posterior_);
  if (!injected) fail("fast path: internal error: the verify forward wrote no tapped layer, so nothing was injected");
  check_cuda(cudaStreamWaitEvent(main_stream, inject_event_), "join the injection stream");
}

void FastEngine::draft_body() {
  if (!inject_in_verify_) draft_inject(verify_buf_.taps, draft_ctx_raw_, draft_ctx_, draft_kv_, ctx_start_);
  draft_block();
}

void FastEngine::set_start(int64_t start, int64_t ctx_start) {
  c10::cuda::CUDAStreamGuard guard(stream_);
  start_.fill_(start);
  ctx_start_.fill_(ctx_start);
}

// The operands below mirror the bodies' calls (run_layers on B rows, head_logits, draft_inject): the same
// buffers, narrow()s and weights, so that the plans' keys (M, N, K and the three row strides) and pointer
// alignments are the ones the graphs will launch with. One call per projection, with that projection of
// every layer. The draft's layer products usually have the target's shapes and reuse its plans. Writes the
// scratch buffers only (tune_linear overwrites x and out).
void FastEngine::tune_matmuls() {
  if (draft_ == nullptr) return;  // decode alone runs one-row products only
  auto of_layers = [](const std::vector<FastLayer>& layers, auto member) {
    std::vector<at::Tensor> w;
    for (const FastLayer& l : layers) w.push_back(l.*member);
    return w;
  };
  // Folded layers add their residuals in the o and down products (linear_residual_out): those keep a plan.
  auto tune_layers = [&](const std::string& who, const std::vector<FastLayer>& layers, FastBuffers& b, bool folded) {
    auto rows = [&](const at::Tensor& t) { return t.narrow(0, 0, B_); };
    kernels::tune_linear(rows(b.qkv), rows(b.h), of_layers(layers, &FastLayer::qkv), who + " qkv");
    kernels::tune_linear(rows(b.o), rows(b.attn), of_layers(layers, &FastLayer::o_proj), who + " o_proj", folded);
    kernels::tune_linear(rows(b.gate_up), rows(b.h), of_layers(layers, &FastLayer::gate_up), who + " gate_up");
    kernels::tune_linear(rows(b.o), rows(b.act), of_layers(layers, &FastLayer::down), who + " down", folded);
  };
  const at::Tensor& lm_head = target_.weights().lm_head;
  // verify: target_forward of B rows with B logit rows
  tune_layers("verify", t_layers_, verify_buf_, folded_);
  kernels::tune_linear(verify_buf_.logits.narrow(0, 0, B_), verify_buf_.h.narrow(0, 0, B_), {lm_head}, "verify lm_head");
  // draft: draft_inject of the verify taps (fc, then the layers' K/V rows: one product over their copy, or each
  // layer's rows of its fused QKV), draft_block (the layers on B rows, the LM head on the last B - 1)
  const Qwen3Config& a = draft_->config().arch;
  kernels::tune_linear(draft_ctx_raw_, verify_buf_.taps, {draft_->weights().fc}, "draft fc");
  const int64_t q_rows = a.num_heads * a.head_dim, kv_rows = 2 * a.num_kv_heads * a.head_dim;
  std::vector<at::Tensor> kv_weights;
  if (draft_kv_weight_.defined()) kv_weights.push_back(draft_kv_weight_);
  else
    for (const FastLayer& w : d_layers_) kv_weights.push_back(w.qkv.narrow(0, q_rows, kv_rows));
  kernels::tune_linear(draft_kv_, draft_ctx_, kv_weights, "draft kv");
  tune_layers("draft", d_layers_, draft_buf_, false);
  if (B_ - 1 >= 2)  // one row is the GEMV's (or at::mm_out's): linear_out uses plans from two rows
    kernels::tune_linear(draft_buf_.logits.narrow(0, 0, B_ - 1), draft_buf_.h.narrow(0, 1, B_ - 1), {lm_head},
                         "draft lm_head");
}

void FastEngine::capture_graphs() {
  if (graphs_ready_) return;
  c10::cuda::CUDAStreamGuard guard(stream_);
  // Tune before the warm-up: tuning writes the scratch buffers, and the warm-up and captures then launch
  // the chosen plans.
  if (kernels::linear_uses_lt_plans()) {
    const auto t0 = std::chrono::steady_clock::now();
    tune_matmuls();
    matmul_tuning_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }
  // Warm up every body once on this stream (cuBLAS handles and workspaces, kernel attributes), at
  // positions 0.., before anything meaningful is in the caches.
  set_start(0, 0);
  decode_body();
  if (draft_ != nullptr) {
    set_start(0, 0);
    verify_body();
    set_start(0, 0);
    draft_body();
  }
  check_cuda(cudaStreamSynchronize(stream_.stream()), "warm-up");
  // Each of our kernels that follows a kernel without PDL between them (a cuBLASLt product, in verify and
  // draft) launches once every block of that kernel has begun, not once it has completed
  // (kernels/graph_edges.h; SPECPRESS_LC_EDGES, read with the process's PDL setting, before the multi-row
  // captures change it).
  const bool lc_edges = kernels::lc_edges_enabled();
  // A capture left open would break every later CUDA call of the process: close it on any error.
  auto capture = [lc_edges](std::unique_ptr<at::cuda::CUDAGraph>& graph, const at::cuda::CUDAGraph* pool_of,
                            int& relaxed, auto&& body) {
    graph = std::make_unique<at::cuda::CUDAGraph>(/*keep_graph=*/lc_edges);
    if (pool_of != nullptr)
      graph->capture_begin(const_cast<at::cuda::CUDAGraph*>(pool_of)->pool());
    else
      graph->capture_begin();
    std::vector<const void*> launched;
    if (lc_edges) kernels::launch_recorder() = &launched;
    try {
      body();
    } catch (...) {
      kernels::launch_recorder() = nullptr;
      try {
        graph->capture_end();
      } catch (...) {
      }
      graph.reset();
      throw;
    }
    kernels::launch_recorder() = nullptr;
    graph->capture_end();
    relaxed = 0;
    if (lc_edges) {
      try {
        check_cuda(kernels::relax_edges_into(graph->raw_cuda_graph(), launched, relaxed), "launch-completion edges");
        graph->instantiate();
      } catch (...) {
        graph.reset();  // kept but not instantiated: nothing to replay
        throw;
      }
    }
  };
  decode_mlp_ms_ = {0, 0};
  if (mlp_timed_) {
    // The decode graph with the two GEMVs [0] and with the fused MLP kernel [1], each warmed outside its capture
    // (the kernel's attributes), timed as replays; the faster is kept, the fused form only by kDecodeMlpMargin (so
    // that near-equal shapes keep one choice from run to run), and the other form's buffers are freed.
    std::array<std::unique_ptr<at::cuda::CUDAGraph>, 2> graphs;
    std::array<int, 2> relaxed{};
    for (int fused = 0; fused < 2; ++fused) {
      mlp_ = fused == 1;
      set_start(0, 0);
      decode_body();
      check_cuda(cudaStreamSynchronize(stream_.stream()), "warm-up");
      capture(graphs[fused], nullptr, relaxed[fused], [&] { decode_body(); });
    }
    decode_mlp_ms_ = time_alternating([&](int fused) { graphs[fused]->replay(); });
    const int pick = decode_mlp_ms_[1] < decode_mlp_ms_[0] * (1.0 - kDecodeMlpMargin) ? 1 : 0;
    mlp_ = pick == 1;
    decode_graph_ = std::move(graphs[pick]);
    lc_edges_[0] = relaxed[pick];
    graphs[1 - pick].reset();
    mlp_timed_ = false;  // chosen: a later capture (after a failure below) captures the kept form only
    if (!mlp_) {
      down_t_.clear();
      mlp_acc_ = at::Tensor();
      mlp_counter_ = at::Tensor();
    }
  } else {
    capture(decode_graph_, nullptr, lc_edges_[0], [&] { decode_body(); });
  }
  if (draft_ != nullptr) {
    // PDL in the multi-row steps only where set (kernels/launch.h), or where their products are the wgmma
    // kernel's (kernels::wg16_switch), which fills its weight ring before it waits; the process setting is
    // restored after.
    auto capture_multirow = [&](std::unique_ptr<at::cuda::CUDAGraph>& verify,
                                std::unique_ptr<at::cuda::CUDAGraph>& draft, int& verify_relaxed, int& draft_relaxed) {
      const bool pdl = kernels::pdl_enabled();
      kernels::set_pdl(pdl && (kernels::pdl_in_multirow_steps() || kernels::wg16_switch().on()));
      try {
        capture(verify, decode_graph_.get(), verify_relaxed, [&] { verify_body(); });
        capture(draft, decode_graph_.get(), draft_relaxed, [&] { draft_body(); });
      } catch (...) {
        kernels::set_pdl(pdl);
        throw;
      }
      kernels::set_pdl(pdl);
    };
    multirow_ms_ = {0, 0};
    multirow_wgmma_ =
        kernels::multirow_by_cublas() && kernels::wg16_switch().on() && kernels::wg16_swiglu_switch().on();
    if (multirow_chooses()) {
      // Both configurations of the multi-row products, cuBLASLt (+ the SwiGLU kernel) and the wgmma kernel with its
      // SwiGLU form, captured and timed as verify + draft replays; the faster one's graphs are kept (docs/PERF.md,
      // twenty-sixth and twenty-seventh passes: which one wins depends on the shapes and the GPU). The two switches
      // are set only for the captures and put back after, so each engine chooses for itself.
      EnvSwitch& wg16 = kernels::wg16_switch();
      EnvSwitch& swiglu = kernels::wg16_swiglu_switch();
      const int wg16_saved = wg16.saved(), swiglu_saved = swiglu.saved();
      auto put_back = [&] {
        wg16.restore(wg16_saved);
        swiglu.restore(swiglu_saved);
      };
      std::array<std::unique_ptr<at::cuda::CUDAGraph>, 2> verify, draft;
      std::array<std::array<int, 2>, 2> relaxed{};
      try {
        for (int wg = 0; wg < 2; ++wg) {
          wg16.set(wg == 1);
          swiglu.set(wg == 1);
          // warm this configuration's kernels outside the capture (cuBLAS workspaces, the wgmma kernel's attributes
          // and K-split scratch), as the warm-up above did for the process's settings
          set_start(0, 0);
          verify_body();
          set_start(0, 0);
          draft_body();
          check_cuda(cudaStreamSynchronize(stream_.stream()), "warm-up");
          capture_multirow(verify[wg], draft[wg], relaxed[wg][0], relaxed[wg][1]);
        }
        multirow_ms_ = time_alternating([&](int c) {
          verify[c]->replay();
          draft[c]->replay();
        });
      } catch (...) {
        put_back();
        throw;
      }
      put_back();
      const int pick = multirow_ms_[1] < multirow_ms_[0] * (1.0 - kMultirowWgmmaMargin) ? 1 : 0;
      verify_graph_ = std::move(verify[pick]);
      draft_graph_ = std::move(draft[pick]);
      lc_edges_[1] = relaxed[pick][0];
      lc_edges_[2] = relaxed[pick][1];
      multirow_wgmma_ = pick == 1;
    } else {
      capture_multirow(verify_graph_, draft_graph_, lc_edges_[1], lc_edges_[2]);
    }
    block_ids_.fill_(draft_->config().mask_token_id);
  }
  set_start(0, 0);
  token_in_.zero_();
  check_cuda(cudaStreamSynchronize(stream_.stream()), "graph capture");
  graphs_ready_ = true;
}

std::array<double, 2> FastEngine::time_alternating(const std::function<void(int)>& replay) {
  // positions 0..: the products and the launches decide; the attention is short and the same kernel in both
  constexpr int kBatches = 5, kReplays = 10;
  std::array<double, 2> best{1e30, 1e30};
  kernels::TimingEvents ev;
  for (int batch = 0; batch < kBatches; ++batch)
    for (int c = 0; c < 2; ++c) {
      set_start(0, 0);
      check_cuda(cudaEventRecord(ev.start, stream_.stream()), "capture-time timing");
      for (int r = 0; r < kReplays; ++r) replay(c);
      check_cuda(cudaEventRecord(ev.stop, stream_.stream()), "capture-time timing");
      best[c] = std::min(best[c], static_cast<double>(ev.elapsed_ms()) / kReplays);
    }
  return best;
}

at::Tensor FastEngine::prefill(const std::vector<int64_t>& prompt) {
  capture_graphs();
  c10::cuda::CUDAStreamGuard guard(stream_);
  const int64_t N = static_cast<int64_t>(prompt.size());
  if (N < 1 || N + std::max<int64_t>(B_, 1) > capacity_)
    fail("fast path: prompt of {} tokens does not fit the cache capacity {}", N, capacity_);
  at::Tensor ids = at::tensor(prompt, at::kLong).to(device_);
  set_start(0, 0);
  FastBuffers pb = make_target_buffers(N, 1, draft_ != nullptr, 1);
  target_forward(ids, pb, 1, draft_ != nullptr);
  if (draft_ != nullptr) prefill_taps_ = pb.taps;
  at::Tensor logits = pb.logits.narrow(0, 0, 1).to(at::kFloat);
  set_start(N, 0);
  sync();  // results handed to other streams
  return logits;
}

at::Tensor FastEngine::forward_rows(const at::Tensor& ids, int64_t start) {
  c10::cuda::CUDAStreamGuard guard(stream_);
  const int64_t T = ids.numel();
  if (T < 1 || start < 0 || start + T > capacity_)
    fail("fast path: a forward of {} tokens at position {} does not fit the cache capacity {}", T, start, capacity_);
  set_start(start, 0);
  FastBuffers b = make_target_buffers(T, T, /*taps=*/false, 1);
  target_forward(ids, b, T, /*taps=*/false);
  at::Tensor logits = b.logits.to(at::kFloat);
  set_start(start + T, 0);
  sync();  // results handed to other streams
  return logits;
}

void FastEngine::set_token(int64_t token) {
  c10::cuda::CUDAStreamGuard guard(stream_);
  token_in_.fill_(token);
}

void FastEngine::decode_step() {
  capture_graphs();
  c10::cuda::CUDAStreamGuard guard(stream_);
  decode_graph_->replay();
}

int64_t FastEngine::read_token() {
  queue_token_copy(0);
  return wait_token(0);
}

namespace {
int checked_slot(int slot, const char* what) {
  if (slot != 0 && slot != 1) fail("fast path: {}: slot {} is not 0 or 1", what, slot);
  return slot;
}
}  // namespace

void FastEngine::queue_token_copy(int slot) {
  checked_slot(slot, "queue_token_copy");
  int64_t* host = scalar_host_.data_ptr<int64_t>() + slot;
  check_cuda(cudaMemcpyAsync(host, token_in_.data_ptr<int64_t>(), sizeof(int64_t), cudaMemcpyDeviceToHost,
                             stream_.stream()),
             "token copy");
  check_cuda(cudaEventRecord(token_copied_[slot], stream_.stream()), "token copy event");
}

int64_t FastEngine::wait_token(int slot) {
  check_cuda(cudaEventSynchronize(token_copied_[checked_slot(slot, "wait_token")]), "token sync");
  return scalar_host_.data_ptr<int64_t>()[slot];
}

at::Tensor FastEngine::decode_logits() {
  c10::cuda::CUDAStreamGuard guard(stream_);
  at::Tensor out = decode_buf_.logits.narrow(0, 0, 1).to(at::kFloat);
  sync();
  return out;
}

at::Tensor FastEngine::persistent_trace() const {
  if (!persistent_trace_.defined()) return {};
  c10::cuda::CUDAStreamGuard guard(stream_);
  at::Tensor out = persistent_trace_.to(at::kCPU);  // on the engine stream, after its last step
  return out;
}

void FastEngine::first_draft(int64_t bonus) {
  if (draft_ == nullptr) fail("fast path: first_draft without a draft model");
  if (!prefill_taps_.defined()) fail("fast path: first_draft before prefill");
  capture_graphs();
  c10::cuda::CUDAStreamGuard guard(stream_);
  const Qwen3Config& a = draft_->config().arch;
  const int64_t N = prefill_taps_.size(0);
  auto bf16 = at::TensorOptions().dtype(at::kBFloat16).device(device_);
  ctx_start_.fill_(0);
  draft_inject(prefill_taps_, at::empty({N, a.hidden_size}, bf16), at::empty({N, a.hidden_size}, bf16),
               at::empty({N, 2 * a.num_kv_heads * a.head_dim}, bf16), ctx_start_);  // a layer at a time
  prefill_taps_ = at::Tensor();
  std::vector<int64_t> block(B_, draft_->config().mask_token_id);
  block[0] = bonus;
  block_ids_.copy_(at::tensor(block, at::kLong));
  draft_block();
  sync();
}

void FastEngine::draft_step() {
  capture_graphs();
  c10::cuda::CUDAStreamGuard guard(stream_);
  draft_graph_->replay();
}

void FastEngine::verify_step() {
  capture_graphs();
  c10::cuda::CUDAStreamGuard guard(stream_);
  verify_graph_->replay();
}

void FastEngine::accept(const std::vector<int64_t>* posterior) {
  c10::cuda::CUDAStreamGuard guard(stream_);
  if (posterior != nullptr) posterior_.copy_(at::tensor(*posterior, at::kLong));
  launch_accept(nullptr);
}

void FastEngine::launch_accept(int64_t* host_record) {
  kernels::dflash_accept(block_ids_, posterior_, draft_->config().mask_token_id, start_, ctx_start_, record_,
                         host_record);
}

void FastEngine::accept_into(int slot) {
  checked_slot(slot, "accept_into");
  if (draft_ == nullptr) fail("fast path: accept_into without a draft model");
  if (record_host_device_ == nullptr) {
    accept();
    queue_record_copy(slot);
    return;
  }
  c10::cuda::CUDAStreamGuard guard(stream_);
  launch_accept(record_host_device_ + slot * record_host_.size(1));
  check_cuda(cudaEventRecord(record_copied_[slot], stream_.stream()), "record event");
}

const int64_t* FastEngine::read_record() {
  queue_record_copy(0);
  return wait_record(0);
}

void FastEngine::queue_record_copy(int slot) {
  checked_slot(slot, "queue_record_copy");
  if (draft_ == nullptr) fail("fast path: queue_record_copy without a draft model");
  int64_t* host = record_host_.data_ptr<int64_t>() + slot * record_host_.size(1);
  check_cuda(cudaMemcpyAsync(host, record_.data_ptr<int64_t>(), sizeof(int64_t) * record_.numel(),
                             cudaMemcpyDeviceToHost, stream_.stream()),
             "record copy");
  check_cuda(cudaEventRecord(record_copied_[slot], stream_.stream()), "record copy event");
}

const int64_t* FastEngine::wait_record(int slot) {
  check_cuda(cudaEventSynchronize(record_copied_[checked_slot(slot, "wait_record")]), "record sync");
  return record_host_.data_ptr<int64_t>() + slot * record_host_.size(1);
}

at::Tensor FastEngine::verify_logits() {
  c10::cuda::CUDAStreamGuard guard(stream_);
  at::Tensor out = verify_buf_.logits.narrow(0, 0, B_).to(at::kFloat);
  sync();
  return out;
}

at::Tensor FastEngine::draft_proposals() {
  sync();
  return block_ids_;
}

double FastEngine::kernel_class_ms(const std::string& kind, int64_t M, int reps) {
  c10::cuda::CUDAStreamGuard guard(stream_);
  FastBuffers& b = M == 1 ? decode_buf_ : verify_buf_;
  if (M > b.rows) fail("kernel_class_ms: M {} exceeds the buffers", M);
  const Qwen3Config& c = target_.config();
  auto rows = [&](const at::Tensor& t) { return t.narrow(0, 0, M); };
  const int64_t lm_rows = std::min<int64_t>(M, b.logits.size(0));
  at::Tensor ids = M == 1 ? token_in_ : block_ids_.narrow(0, 0, M);
  auto body = [&] {
    if (kind == "head") {
      kernels::embedding_out(rows(b.x), target_.weights().embed_tokens, ids);
      kernels::argmax_out(b.tokens.narrow(0, 0, lm_rows), b.logits.narrow(0, 0, lm_rows));
      return;
    }
    for (size_t l = 0; l < t_layers_.size(); ++l) {
      const FastLayer& w = t_layers_[l];
      at::Tensor kc = k_cache_.select(0, static_cast<int64_t>(l)), vc = v_cache_.select(0, static_cast<int64_t>(l));
      if (kind == "matmul") {
        kernels::linear_out(rows(b.qkv), rows(b.h), w.qkv);
        kernels::linear_out(rows(b.o), rows(b.attn), w.o_proj);
        kernels::linear_out(rows(b.gate_up), rows(b.h), w.gate_up);
        kernels::linear_out(rows(b.o), rows(b.act), w.down);
      } else if (kind == "attention") {  // as the engine runs it: with q/k-norm + RoPE and the cache write
        kernels::attention_qkv_out(rows(b.attn), rows(b.qkv), c.num_heads, c.num_kv_heads, w.q_norm, w.k_norm,
                                   target_.rope(), start_, kc, vc, true, c.rms_norm_eps, b.attn_scratch);
      } else if (kind == "elementwise" && folded_) {  // the row factors (beside the products in the step) and SwiGLU
        kernels::row_rms_out(b.rs[0].narrow(0, 0, M), rows(b.x), c.rms_norm_eps);
        kernels::row_rms_out(b.rs[1].narrow(0, 0, M), rows(b.x), c.rms_norm_eps);
        kernels::silu_mul_out(rows(b.act), rows(b.gate_up), b.rs[1].narrow(0, 0, M));
      } else if (kind == "elementwise") {
        kernels::rmsnorm_out(rows(b.h), rows(b.o), w.post_norm, c.rms_norm_eps, rows(b.x), rows(b.x));
        kernels::silu_mul_out(rows(b.act), rows(b.gate_up));
        kernels::rmsnorm_out(rows(b.h), rows(b.o), w.input_norm, c.rms_norm_eps, rows(b.x), rows(b.x));
      } else {
        fail("kernel_class_ms: unknown kind '{}'", kind);
      }
    }
    if (kind == "matmul")
      kernels::linear_out(b.logits.narrow(0, 0, lm_rows), b.h.narrow(0, 0, lm_rows), target_.weights().lm_head);
  };
  body();
  sync();
  at::cuda::CUDAGraph graph;
  graph.capture_begin();
  body();
  graph.capture_end();
  graph.replay();
  sync();
  kernels::TimingEvents ev;
  check_cuda(cudaEventRecord(ev.start, stream_.stream()), "event");
  for (int i = 0; i < reps; ++i) graph.replay();
  check_cuda(cudaEventRecord(ev.stop, stream_.stream()), "event");
  return ev.elapsed_ms() / reps;
}

void FastEngine::sync() { check_cuda(cudaStreamSynchronize(stream_.stream()), "stream sync"); }

double FastEngine::decode_bytes(int64_t context) const {
  const Qwen3Config& c = target_.config();
  double bytes = tensor_bytes(target_.weights().final_norm) + tensor_bytes(target_.weights().lm_head);
  for (const FastLayer& l : t_layers_) bytes += layer_bytes(l);
  bytes += 2.0 * c.num_layers * c.num_kv_heads * context * c.head_dim * 2;  // K and V, bf16
  return bytes;
}

double FastEngine::inject_bytes(bool kv_rows) const {
  if (draft_ == nullptr) return 0;
  const DFlashWeights& dw = draft_->weights();
  double bytes = tensor_bytes(dw.fc) + tensor_bytes(dw.hidden_norm);
  if (kv_rows)
    for (const DecoderLayerWeights& w : dw.layers) bytes += tensor_bytes(w.k_proj) + tensor_bytes(w.v_proj);
  return bytes;
}

double FastEngine::draft_bytes(int64_t context) const {
  if (draft_ == nullptr) return 0;
  const Qwen3Config& a = draft_->config().arch;
  const DFlashWeights& dw = draft_->weights();
  double bytes = tensor_bytes(dw.fc) + tensor_bytes(dw.hidden_norm) + tensor_bytes(dw.final_norm) +
                 tensor_bytes(target_.weights().lm_head);
  for (const FastLayer& l : d_layers_) bytes += layer_bytes(l);
  bytes += 2.0 * a.num_layers * a.num_kv_heads * context * a.head_dim * 2;
  return bytes;
}

}  // namespace specpress::model
