// aten_ops.h — thin ATen wrappers over the torch-free kernels of src/kernels (CUDA builds only): check
// dtype (bf16), device, shape and contiguity, then launch on the current CUDA stream. The `_out` forms
// write into caller-owned buffers and allocate nothing, so they can run inside a captured CUDA graph.
#pragma once
#include <ATen/ATen.h>
#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "core/env_switch.h"
#include "ops/rope.h"

namespace specpress::kernels {

// Fails (specpress::Error) naming `what` (a kernel, a CUDA call, a step) and the CUDA error, unless e is
// cudaSuccess. The one checker of the fast path's CUDA calls (kernels, engine, cuBLASLt plans).
void check_cuda(cudaError_t e, const char* what);

// y = rmsnorm(x [+ residual]) * weight. With `residual`, x + residual (bf16) is also written to
// `sum_out` (may alias `residual`) and, if given, to `sum_out2` (a [rows, H] view with any row stride).
void rmsnorm_out(const at::Tensor& y, const at::Tensor& x, const at::Tensor& weight, double eps,
                 const at::Tensor& residual = {}, const at::Tensor& sum_out = {}, const at::Tensor& sum_out2 = {});

// rs float [rows] = rsqrt(mean(x[r]^2) + eps), x [rows, H] bf16 (kernels::row_rms); with `tap` (a [rows, H] view
// with any row stride) defined, x is also copied there.
void row_rms_out(const at::Tensor& rs, const at::Tensor& x, double eps, const at::Tensor& tap = {});

// qkv: [T, (nq + 2 nkv) * hd] (row-contiguous; a column slice of a wider buffer is fine). Writes the
// normed, rotated queries to q_out [T, nq, hd] (if nq > 0) and K/V at positions *pos_base + t into
// k_cache / v_cache ([nkv, capacity, hd], one layer). With row_scale (fp32 [T]) the input rows are
// bf16(qkv[t] * row_scale[t]) (a folded RMSNorm's factor, row_rms_out).
void qk_norm_rope_out(const at::Tensor& qkv, int64_t nq, int64_t nkv, const at::Tensor& q_norm,
                      const at::Tensor& k_norm, const ops::RopeTable& rope, const at::Tensor& pos_base,
                      const at::Tensor& q_out, const at::Tensor& k_cache, const at::Tensor& v_cache, double eps,
                      const at::Tensor& row_scale = {});

// The context K/V of L layers in one launch (the draft's injection): kv [T, L * 2 * nkv * hd] holds layer i's k
// heads, then its v heads, at columns i * 2 * nkv * hd; k_norms [L, hd]; caches [L, nkv, capacity, hd]. The same
// per-element arithmetic as L qk_norm_rope_out calls with nq = 0 on kv's column slices.
void context_kv_layers_out(const at::Tensor& kv, int64_t nkv, const at::Tensor& k_norms, const ops::RopeTable& rope,
                           const at::Tensor& pos_base, const at::Tensor& k_caches, const at::Tensor& v_caches,
                           double eps);

// Attention scratch for a fixed (T, splits): float workspace and zeroed counters.
struct AttentionScratch {
  at::Tensor workspace;  // uint8
  at::Tensor counters;   // int32, zero between launches
  int splits = 1;
  int min_split_keys = 0;  // AttentionArgs::min_split_keys (0 = the kernel's default)
  int block_warps = 0;     // AttentionArgs::block_warps (0 = the kernel's default)
};
AttentionScratch make_attention_scratch(int64_t T, int64_t nq, int64_t nkv, int64_t head_dim, int splits,
                                        at::Device device);
// The block_warps that make_attention_scratch gives new scratch (0 = the kernel's default): process-wide, for
// benchmarks that compare the small-T kernel's 4- and 8-warp blocks in one run (fast_perf).
void set_attention_block_warps(int warps);

// out [T, nq*hd] = attention of q [T, nq, hd] over the first S = *kv_len_base + kv_len_add positions of
// k_cache / v_cache [nkv, capacity, hd]; causal bottom-right or none.
void attention_out(const at::Tensor& out, const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                   const at::Tensor& kv_len_base, int64_t kv_len_add, bool causal, AttentionScratch& scratch);

// qk_norm_rope_out(qkv, nq, nkv, q_norm, k_norm, rope, pos_base, q, k_cache, v_cache, eps) followed by
// attention_out(out, q, k_cache, v_cache, pos_base, T, causal, scratch), in one launch and without q, for
// T <= 16 rows (kernels/attention.h, AttentionArgs::qkv): bitwise the same output and cache contents, also with
// row_scale (as qk_norm_rope_out's).
void attention_qkv_out(const at::Tensor& out, const at::Tensor& qkv, int64_t nq, int64_t nkv, const at::Tensor& q_norm,
                       const at::Tensor& k_norm, const ops::RopeTable& rope, const at::Tensor& pos_base,
                       const at::Tensor& k_cache, const at::Tensor& v_cache, bool causal, double eps,
                       AttentionScratch& scratch, const at::Tensor& row_scale = {});

// out [T, I] = silu(gate_up[:, :I]) * gate_up[:, I:]; with row_scale (fp32 [T]) on bf16(gate_up[t] * row_scale[t]).
void silu_mul_out(const at::Tensor& out, const at::Tensor& gate_up, const at::Tensor& row_scale = {});

// out [T, H] = table[ids]
void embedding_out(const at::Tensor& out, const at::Tensor& table, const at::Tensor& ids);

// out int64 [rows] = argmax over the last dim of logits [rows, V] (bf16, unit column stride; decode_step.h:
// argmax_rows has the rule), by a cluster of blocks a row; SPECPRESS_ARGMAX_SPLIT=0 (or
// argmax_split_switch().set(false), for launches after the call: a captured graph keeps its kernel): one block a
// row, the same indices.
void argmax_out(const at::Tensor& out, const at::Tensor& logits);
EnvSwitch& argmax_split_switch();

// See kernels/decode_step.h. block_ids, posterior, record: int64; start, ctx_start: int32 [1]. host_record: null,
// or the device pointer of 2B + 1 int64 of mapped pinned host memory.
void dflash_accept(const at::Tensor& block_ids, const at::Tensor& posterior, int64_t mask_id, const at::Tensor& start,
                   const at::Tensor& ctx_start, const at::Tensor& record, int64_t* host_record = nullptr);
void advance_counter(const at::Tensor& counter, int inc);

// out [1, N] = x [1, K] @ weight [N, K]^T by the M = 1 GEMV kernel (kernels/gemv.h); x and weight
// 16-byte aligned with unit column stride (weight contiguous), K % 8 == 0. Also accepts 1-D x / out.
// With norm_weight [K] defined, x is the raw residual row and the product is rmsnorm(x) @ weight^T, the
// norm as the GEMV's prologue (kernels::GemvNorm; K <= 16384). With folded_norm (no norm_weight: it is folded
// into weight), x is the raw residual row and the product is scaled by rsqrt(mean(x^2) + eps).
void gemv_out(const at::Tensor& out, const at::Tensor& x, const at::Tensor& weight, const at::Tensor& norm_weight = {},
              double eps = 1e-6, bool folded_norm = false);

// act [1, I] = silu(x @ gate_up[:I]^T) * (x @ gate_up[I:]^T) by the fused GEMV + SwiGLU kernel
// (kernels::gemv_swiglu): bitwise gemv_out into a [1, 2I] buffer followed by silu_mul_out. Same layout
// requirements as gemv_out (and the same optional RMSNorm prologue); gate_up is [2I, K].
void gemv_silu_mul_out(const at::Tensor& act, const at::Tensor& x, const at::Tensor& gate_up,
                       const at::Tensor& norm_weight = {}, double eps = 1e-6, bool folded_norm = false);

// residual [1, N] += x [1, K] @ weight^T (bf16: the product rounded, then the sum), and tap [1, N] = the
// new residual when tap is defined, by kernels::gemv_residual: bitwise gemv_out followed by ATen's bf16 add.
void gemv_residual_out(const at::Tensor& residual, const at::Tensor& x, const at::Tensor& weight,
                       const at::Tensor& tap = {});

// The decode layer's o projection with its residual add and the gate/up projection with the folded post-attention
// norm and the SwiGLU in one launch (kernels/gemv_o_gate_up.h): bitwise gemv_residual_out(x, attn, o_proj) then
// gemv_silu_mul_out(act, x, gate_up, {}, eps, true). barrier: int32 [kGemvOGateUpBarrierWords] (1, the arrival
// count) on the GPU, zero before its first use, used by one launch at a time. gemv_o_gate_up_takes: whether the kernel
// takes these shapes on this device (else the two GEMVs are the way); gemv_o_gate_up_out fails, naming what, on a
// layout it does not take.
bool gemv_o_gate_up_takes(const at::Tensor& x, const at::Tensor& o_proj, const at::Tensor& gate_up);
void gemv_o_gate_up_out(const at::Tensor& x, const at::Tensor& attn, const at::Tensor& o_proj, const at::Tensor& act,
                        const at::Tensor& gate_up, double eps, const at::Tensor& barrier);

// The decode layer's MLP in one launch with its down product split over the intermediate dimension
// (kernels/gemv_mlp.h): x [1, H] += down_t^T · SwiGLU(gate_up · x) with the folded post-attention norm, rounded as
// gemv_silu_mul_out(act, x, gate_up, {}, eps, true) then gemv_residual_out(x, act, down, tap), but the down sums are
// added in arrival order: to bf16 precision, not bitwise, and not the same bits on every run. down_t: [I, H], W_down
// transposed, contiguous. acc: fp32 [H] and counter: int32 [1] on the GPU, zero before the first use (the kernel leaves
// both zero), used by one launch at a time. tap: as gemv_residual_out's.
// Fails, naming what, on a layout it does not take, or shapes the kernel does not take on this device
// (kernels::gemv_mlp_takes).
// ordered: the sum in a fixed order (kernels/gemv_mlp.h), the same bits every run; acc then fp32 of
// kernels::gemv_mlp_acc_floats(H, I, true) or more (any values at rest) and counter int32 [1] as above, zero before the
// first use and left zero.
void gemv_mlp_out(const at::Tensor& x, const at::Tensor& gate_up, const at::Tensor& down_t, double eps,
                  const at::Tensor& acc, const at::Tensor& counter, const at::Tensor& tap = {}, bool ordered = false);

// Whether a forward of `rows` rows runs the fused one-row decode layer (the GEMVs with their RMSNorm
// prologues and residual epilogues): one row, in gemv or stream mode.
bool fused_one_row(int64_t rows);

// The MLP's gate/up projection and SwiGLU, act [M, I] = silu_mul(x @ gate_up^T), with `gu` [M, 2I] as the
// intermediate: in gemv or stream mode a one-row x in the GEMV's layout takes gemv_silu_mul_out (gu
// untouched, one launch); otherwise linear_out into gu, then silu_mul_out.
// With 2..16 rows and SPECPRESS_WG16_SWIGLU on (wg16_swiglu_switch), where the wgmma kernel takes the layout, the
// product and the SwiGLU are one launch (wg16_silu_mul_out; gu untouched). row_scale (float [M], optional): a
// folded RMSNorm's row factors, applied as silu_mul_out applies them (not with the one-row GEMV, which takes none).
void linear_silu_mul_out(const at::Tensor& act, const at::Tensor& gu, const at::Tensor& x, const at::Tensor& gate_up,
                         const at::Tensor& row_scale = {});

// out [M, N] = x [M, K] @ weight [N, K]^T for 1 <= M <= 16 by the streaming small-M tensor-core kernel
// (kernels/gemm_small.h); x with unit column stride, row stride % 8 == 0, 16-byte aligned; weight
// contiguous and 16-byte aligned; out with unit column stride; K % 8 == 0. Row r of the result is bitwise
// the result for that row alone (M = 1), whatever the other rows are.
void gemm_small_out(const at::Tensor& out, const at::Tensor& x, const at::Tensor& weight);

// out = x @ weight^T, no allocation, by mode:
//   kGemv (default): the GEMV kernel (kernels/gemv.h) for one row, cuBLAS for more: the problem's tuned
//            cuBLASLt plan if it has one (kernels/lt_linear.h; the engine tunes its verify and draft
//            products), at::mm_out otherwise;
//   kCublas: cuBLAS for every M (cuBLAS reads the Qwen3 weights at 73-85% of the copy bandwidth at M=1
//            on the H200, docs/PERF.md), with the tuned cuBLASLt plans for M >= 2 as in kGemv;
//   kSkinny: the batch-invariant tensor-core kernel (kernels/skinny_gemm.h) for at most 16 rows;
//   kStream: the GEMV for one row (with its fused prologue and epilogues, as kGemv), the streaming small-M kernel
//            (kernels/gemm_small.h) for 2..16 rows (verify, draft), cuBLAS for more;
//   kStreamAll: the streaming small-M kernel for 1..16 rows, decode included and without the GEMV's
//            fused prologue and epilogues, so that a row's matmul results do not depend on how many rows ran with it
//            (bitwise, the precondition for bf16 DFlash == plain decoding).
// A shape or layout the custom kernel does not take falls back to cuBLAS.
void linear_out(const at::Tensor& out, const at::Tensor& x, const at::Tensor& weight);
// residual [M, N] += x [M, K] @ weight [N, K]^T. One row in gemv or stream mode: gemv_residual_out. Two or more
// rows with a tuned cuBLASLt plan: the plan with beta = 1, in place (one rounding of the fp32 sum plus the
// residual). Otherwise linear_out into `tmp` ([M, N] bf16 scratch) and a bf16 add (two roundings, as ATen's
// `residual + x @ weight^T`).
void linear_residual_out(const at::Tensor& residual, const at::Tensor& x, const at::Tensor& weight, const at::Tensor& tmp);
// SPECPRESS_WG16 (default 0): linear_out and linear_residual_out run their 2..16-row products (verify, draft) by the
// wgmma kernel (kernels/gemm_wg16.h) instead of cuBLAS(Lt), in the gemv and cublas modes (multirow_by_cublas; the
// others keep their own kernels), where it takes the layout (wg16_fits) and the weight has at most kWg16MaxRows rows
// (the fast engine's LM heads take wg16_head_argmax_out, or cuBLAS); its launches take PDL when it is on (launch.h), and
// the fast engine then captures its multi-row steps with PDL. Read once; set() overrides it for later launches. Off by
// default: on the H200 it made the verify step 1.3-2.0% slower than the tuned cuBLASLt plans (docs/PERF.md,
// twenty-fifth pass); the fast engine turns it and wg16_swiglu_switch on for its captures where they time faster
// (model::multirow_auto), unless either was chosen (EnvSwitch::chosen).
EnvSwitch& wg16_switch();
constexpr int64_t kWg16MaxRows = 32768;
bool wg16_fits(const at::Tensor& out, const at::Tensor& x, const at::Tensor& weight);
// out [M, N] = x [M, K] @ weight [N, K]^T, or residual-accumulating (out += ..., one rounding of the fp32 sum plus
// out's old value), 1 <= M <= 16, by gemm_wg16 with wg16_plan's plan; fails naming what does not fit.
void wg16_linear_out(const at::Tensor& out, const at::Tensor& x, const at::Tensor& weight, bool accumulate);
// act [M, I] = silu_mul(x [M, K] @ gate_up [2I, K]^T) with silu_mul_out's optional row factors, 1 <= M <= 16, in one
// launch of the wgmma kernel's SwiGLU form (gemm_wg16.h): bitwise wg16_linear_out into a gate_up buffer followed by
// silu_mul_out. Fails naming what does not fit (wg16_fits's layout, I % 8 == 0, act [M, I] with unit column stride).
void wg16_silu_mul_out(const at::Tensor& act, const at::Tensor& x, const at::Tensor& gate_up,
                       const at::Tensor& row_scale = {});
// The same with an RMSNorm folded into gate_up: x is the raw residual and the kernel computes each row's factor
// rsqrt(mean(x^2) + eps) itself, bitwise as row_rms_out does, so nothing has to run before it but x's producer.
void wg16_silu_mul_norm_out(const at::Tensor& act, const at::Tensor& x, const at::Tensor& gate_up, double eps);
// out [M, N] = bf16(bf16(x [M, K] @ weight [N, K]^T) * r) a row, r = rsqrt(mean(x^2) + eps) of x's row computed in the
// kernel (an RMSNorm folded into weight, x the raw residual): bitwise wg16_linear_out followed by the row factors of
// row_rms_out applied as the fused attention applies a given row_scale, in one launch (no K split). Fails naming what
// does not fit (wg16_fits's layout) or a negative eps.
void wg16_linear_norm_out(const at::Tensor& out, const at::Tensor& x, const at::Tensor& weight, double eps);
// The multi-row LM head and its greedy argmax in one launch of the wgmma kernel (Wg16Args::argmax): logits [M, V] =
// x [M, K] @ weight [V, K]^T by its plain form without a K split (each block's rows are whole), and tokens int64 [M] =
// argmax_out(logits)'s indices on the logits as written (the same rule: lowest index among equal maxima, NaN never a
// maximum, 0 for a row of NaN only), so that no argmax kernel runs after the head. Any vocabulary size (up to 2^30
// rows). Fails naming what does not fit.
void wg16_head_argmax_out(const at::Tensor& logits, const at::Tensor& tokens, const at::Tensor& x,
                          const at::Tensor& weight);
// SPECPRESS_WG16_HEAD_ARGMAX (default 1): where the wgmma kernel runs the multi-row products (wg16_switch on, 2..16
// rows, multirow_by_cublas), the fast engine's verify and draft LM heads run by wg16_head_argmax_out instead of a
// cuBLAS(Lt) product and argmax_out (wg16_head_argmax_takes says whether it takes one). Read once; set() overrides it
// for later captures.
EnvSwitch& wg16_head_argmax_switch();
bool wg16_head_argmax_takes(const at::Tensor& logits, const at::Tensor& tokens, const at::Tensor& x,
                            const at::Tensor& weight);
// Whether the fast engine's folded layers may run their qkv product by it: 2..16 rows, multirow_by_cublas, the
// wgmma kernel chosen (wg16_switch on), the layout fits.
bool wg16_linear_norm_takes(const at::Tensor& out, const at::Tensor& x, const at::Tensor& weight);
// SPECPRESS_WG16_TRIGGER_EARLY (default 1): the wgmma products let the next kernel launch as they start
// (Wg16Args::trigger_early), not once their loads are issued; 0 restores the latter. Qwen3-4B verify -1.7%, cycle -1.6%
// in a same-binary A/B (docs/PERF.md, thirtieth pass).
bool wg16_trigger_early();
// SPECPRESS_WG16_CLUSTER_SUM (default 1): the wgmma products' K splits summed in a cluster where the launch fits in one
// wave (Wg16Args::cluster_sum); 0 keeps the workspace sum everywhere. Qwen3-8B verify -39 us (1.024x -> 1.014x decode),
// cycle -0.9% in a same-binary A/B; the 4B down products fall back, the o products take it at 2 splits
// (model::o_splits; docs/PERF.md, fifty-fourth and fifty-fifth passes). Read once.
bool wg16_cluster_sum();
// SPECPRESS_WG16_X_BOX (default 1): the wgmma products copy a stage's X as one box (Wg16Args::x_stage_box); 0 copies it
// a chunk at a time. Qwen3-4B verify 11-24 us shorter in four same-binary rounds, 8B 6 us in one (27 with W also a box
// a stage; docs/PERF.md, fifty-seventh pass). Read once.
bool wg16_x_stage_box();
// SPECPRESS_WG16_SILU_HOLD (0..12, default 0): the folded gate/up product (wg16_silu_mul_norm_out, the fast engine's
// target MLPs in verify) fills all but this many of its ring's W stages before its PDL wait (Wg16Args::prefill), the
// rest once the o product before it has completed; 0 fills the whole ring first. Holding one of Qwen3-4B's 4 stages
// back made verify 0.2-0.7% faster when the o products had smaller rings (docs/PERF.md, thirty-seventh pass); beside
// the 160 KB, 2-split o products (fifty-fifth pass) holding none is the faster: 4B verify 4-15 us shorter in five
// same-binary rounds, 8B within 5 us in one (fifty-sixth pass). Read once;
// set_wg16_silu_hold overrides it for the process (clamped to 0..12; not synchronised: set it from one thread, before
// capturing; graphs keep the value they were captured with).
int wg16_silu_hold();
void set_wg16_silu_hold(int stages);
// The ring budget (wg16_plan's ring_kb) of the wgmma products run while it lives on this thread, in KB; 0 keeps the
// plan's kWg16RingKb (200); and their K splits' cap (wg16_plan's max_splits; 0: the plan's rule). The fast engine
// sets them around its multi-row o products (model::o_ring_kb, 160 by default, and model::o_splits, 2: a tile's
// splits then fit the cluster sum; docs/PERF.md, twenty-ninth and fifty-fifth passes).
class Wg16RingScope {
 public:
  explicit Wg16RingScope(int ring_kb, int max_splits = 0);
  ~Wg16RingScope();
  Wg16RingScope(const Wg16RingScope&) = delete;
  Wg16RingScope& operator=(const Wg16RingScope&) = delete;

 private:
  int saved_, saved_splits_;
};
// The wgmma products' diagnostic timeline (Wg16Args::trace; fast_perf --wg16-trace). wg16_trace_start allocates a
// buffer of `capacity` stamps (outside a graph capture; once: later calls keep it, and fail asking for more) and empties
// the launch list; then every wgmma product run while a Wg16TraceScope(true) lives on this thread, eager or captured,
// takes the next blocks x kWg16TraceFields stamps of it and is listed (a graph's replays write its launches' rows
// again). Products past the capacity run without stamps (counted in wg16_trace_dropped).
struct Wg16TraceLaunch {
  int64_t offset = 0;  // first stamp in the buffer
  int blocks = 0, T = 0, N = 0, K = 0, splits = 1, stages = 0, kb = 0, tiles_per_block = 1;
  bool silu_mul = false;  // the SwiGLU form (a gate/up product)
};
void wg16_trace_start(int64_t capacity);
class Wg16TraceScope {
 public:
  explicit Wg16TraceScope(bool on);
  ~Wg16TraceScope();
  Wg16TraceScope(const Wg16TraceScope&) = delete;
  Wg16TraceScope& operator=(const Wg16TraceScope&) = delete;

 private:
  bool saved_;
};
const std::vector<Wg16TraceLaunch>& wg16_trace_launches();
int64_t wg16_trace_dropped();
// The buffer's stamps copied to the host (int64, [capacity]; waits for the current stream), and zeroes them (on the
// current stream), so that the next read shows only what ran after this one.
at::Tensor wg16_trace_take();
// The decode step's diagnostic timeline (step_trace.h; fast_perf --decode-trace): step_trace_start allocates a buffer
// of `capacity` stamps (outside a graph capture; once: later calls keep it, and fail asking for more) and empties the
// launch list; then every register GEMV (gemv_out, gemv_silu_mul_out, gemv_residual_out), fused small-T attention
// (attention_qkv_out), fused o + gate/up GEMV and ordered fused MLP (gemv_mlp_out) run while a StepTraceScope(true)
// lives on this thread, eager or captured, takes the next rows of it (the launch's most blocks) and is listed, in
// launch order. Launches past the capacity run without stamps (counted in step_trace_dropped), and so do the GEMVs the
// TMA GEMV runs (gemv.h: gemv_tma_takes; not listed).
enum class StepTraceKind { kGemv = 0, kGemvSwiglu = 1, kGemvResidual = 2, kAttention = 3, kOGateUp = 4, kMlp = 5 };
struct StepTraceLaunch {
  int64_t offset = 0;  // first stamp
  int blocks = 0;      // rows reserved (the grid is at most this)
  StepTraceKind kind = StepTraceKind::kGemv;
  bool captured = false;  // listed during a graph capture
};
void step_trace_start(int64_t capacity);
class StepTraceScope {
 public:
  explicit StepTraceScope(bool on);
  ~StepTraceScope();
  StepTraceScope(const StepTraceScope&) = delete;
  StepTraceScope& operator=(const StepTraceScope&) = delete;

 private:
  bool saved_;
};
const std::vector<StepTraceLaunch>& step_trace_launches();
int64_t step_trace_dropped();
// The stamps copied to the host (int64, [capacity]; waits for the current stream), then zeroed on the current stream.
at::Tensor step_trace_take();
// Whether the two above take these tensors (their layout rules; the switch aside).
bool wg16_silu_mul_fits(const at::Tensor& act, const at::Tensor& x, const at::Tensor& gate_up);
// SPECPRESS_WG16_SWIGLU (default 0): linear_silu_mul_out runs its 2..16-row form by wg16_silu_mul_out (the gate/up
// product and the SwiGLU in one launch) instead of the product into gu and silu_mul_out, in the gemv and cublas
// modes (multirow_by_cublas), as SPECPRESS_WG16 does. Read once; set() overrides.
EnvSwitch& wg16_swiglu_switch();
// Whether linear_silu_mul_out runs this product and SwiGLU as one launch (2..16 rows, multirow_by_cublas, the
// switch on, the layout fits).
bool wg16_swiglu_takes(const at::Tensor& act, const at::Tensor& x, const at::Tensor& gate_up);
enum class GemmMode { kSkinny, kCublas, kGemv, kStream, kStreamAll };
// Whether the matmul mode gives M >= 2 products to cuBLAS(Lt) (gemv or cublas mode), or to the wgmma kernel where
// its switches say so; the skinny and streaming modes keep their own kernels for them (skinny's rows are
// batch-invariant, which neither cuBLAS nor the wgmma kernel is).
bool multirow_by_cublas();
// Whether linear_out runs M >= 2 products by their tuned cuBLASLt plans (kernels/lt_linear.h): in gemv or
// cublas mode, unless SPECPRESS_LT_TUNE=0 (set_lt_tuning). The engine tunes only then.
bool linear_uses_lt_plans();
// Process-wide; initialised from SPECPRESS_GEMM=gemv|cublas|skinny|stream|stream_all (default gemv).
// Graphs keep the mode they were captured with.
GemmMode gemm_mode();
void set_gemm_mode(GemmMode mode);
const char* gemm_mode_name(GemmMode mode);
// The mode named `name` (as SPECPRESS_GEMM spells it); an unknown name fails naming `what` (a flag, say).
GemmMode parse_gemm_mode(const std::string& name, const char* what);

}  // namespace specpress::kernels
