// qwen3_fast.h — the CUDA fast path (bf16, CUDA builds only): Qwen3 target and DFlash draft forwards
// built from the kernels of src/kernels, with matmuls (kernels::linear_out: the GEMV kernel for one row,
// cuBLAS for more, by default, with cuBLASLt algorithms tuned per shape before graph capture for the
// verify and draft products, kernels/lt_linear.h; SPECPRESS_GEMM picks another mode, SPECPRESS_LT_TUNE=0
// turns the tuning off) on weights fused at load time (QKV,
// gate/up), static buffers, device-side positions, and CUDA graphs for the three steady-state steps:
// target decode (1 token), target verify (block B) and the draft step (context K/V injection of the B
// rows the last verify tapped + the block forward + argmax proposals; by default the injection runs inside
// the verify graph instead, beside its last layers: inject_in_verify()). The engine owns its own KV
// caches; the reference models (model/qwen3.h, model/dflash_draft.h) supply weights and configs.
//
// Device state: `start` (int32, committed target positions = position of the next input token) and
// `ctx_start` (int32, the last verified block's position, where a draft step that injects writes: with
// inject_in_verify() off; with it on the verify step injects at `start`, which is the same position). The verify step's
// acceptance runs on the device too (kernels::dflash_accept), so a speculative cycle needs one host
// synchronisation: the read of its [block, posterior, a] record (written into mapped host memory by the
// accept kernel in the pipelined loops: accept_into).
#pragma once
#include <array>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAStream.h>

#include "kernels/aten_ops.h"
#include "model/dflash_draft.h"
#include "model/qwen3.h"

namespace specpress::model {

// Folded norms (default on; SPECPRESS_FOLD_NORMS=0 turns them off, another value than 0 or 1 fails naming the
// variable; set_fold_norms overrides it for the process, for engines built after the call). An engine with
// folded norms builds the target's fused QKV and gate/up weights as W diag(norm weight) (fp32 product rounded once
// to bf16), so that neither RMSNorm before them is a kernel of its own: at one row the GEMVs scale their sums by
// x's 1 / rms; at more rows the norm's row factors (kernels::row_rms) run on a side stream beside the product, the
// attention and the SwiGLU apply them, and the residual adds are the o and down products' epilogues. The draft's
// layers are never folded (its context injection projects features without their input norms). Numerically
// a rounding of W diag(w) instead of one of x's normed rows; tests/gpu hold it to the reference path's bounds.
bool fold_norms();
void set_fold_norms(bool on);

// The draft's context injection as one product (default on; SPECPRESS_DRAFT_KV_BATCH=0 turns it off, with the
// same rules as SPECPRESS_FOLD_NORMS). Every draft layer projects the same context rows to its K/V rows, so an
// engine with it keeps a copy of all the draft layers' K/V weight rows side by side ([L * 2 * kv_heads * head_dim,
// H]: 52 MB for the Qwen3-4B draft, 84 MB for the 8B one) and runs one product instead of one a layer, then one
// k-norm + RoPE + cache write launch for all layers (kernels::context_kv_layers_out).
bool draft_kv_batch();
void set_draft_kv_batch(bool on);

// The draft's context injection inside the verify step (default on; SPECPRESS_INJECT_IN_VERIFY=0 keeps it in the
// draft step, with the same rules as SPECPRESS_FOLD_NORMS). The injection reads only the verify's taps, so an engine
// with it runs it in the verify graph, on a stream of its own from the moment the last tapped layer is done, beside
// the forward's last layers and LM head, instead of at the head of the next draft step. The writes are the same.
bool inject_in_verify();
void set_inject_in_verify(bool on);

// The verify and draft products chosen at capture by timing (default on; SPECPRESS_WG16_AUTO=0 turns it off, same
// rules). Where neither SPECPRESS_WG16 nor SPECPRESS_WG16_SWIGLU was chosen (in the environment or by set()), the
// matmul mode is gemv or cublas (kernels::multirow_by_cublas: the others keep their own multi-row kernels) and the
// GPU runs the wgmma kernel (kernels::gemm_wg16_available), capture_graphs captures the multi-row graphs twice, with
// the cuBLASLt plans (+ the SwiGLU kernel) and with the wgmma kernel and its SwiGLU form, times verify + draft
// replays of each and keeps the wgmma kernel's graphs where they are at least kMultirowWgmmaMargin faster (so that
// near-equal shapes keep one choice from run to run); the two switches are put back after. On the H200 the wgmma
// configuration was 1.6-2.1% faster a Qwen3-4B cycle and between 0.3% faster and 1.0% slower an 8B one (docs/PERF.md,
// twenty-sixth and twenty-seventh passes). Set either switch to pin the products (and their rounding) instead.
bool multirow_auto();
void set_multirow_auto(bool on);
// Whether capture_graphs will time the two configurations: multirow_auto() and the conditions above.
bool multirow_chooses();
inline constexpr double kMultirowWgmmaMargin = 0.005;

// The pipelined loops' records written into the host slot by the accept kernel itself (default on;
// SPECPRESS_RECORD_MAPPED=0 copies them on the stream after it, as before; same rules). The slots are pinned host
// memory mapped into the device's address space, so the cycle's end needs no copy-engine operation between
// the accept and the next cycle's draft.
bool record_mapped();
void set_record_mapped(bool on);

// W_o fetched into the L2 while the attention runs, in the multi-row steps (verify, draft; default on;
// SPECPRESS_L2_PREFETCH=0 turns it off, same rules). Their o product is a cuBLASLt kernel, which starts only once
// the attention has completed; a side branch (kernels::l2_prefetch_rows) brings its weight into the L2 while the
// attention leaves the DRAM idle. Not in the one-row decode step, where the o GEMV already loads half its weight
// before its PDL wait and the prefetch measured no gain (docs/PERF.md, fifteenth pass).
bool l2_prefetch_o();
void set_l2_prefetch_o(bool on);
// With it, in the multi-row steps' layers (verify and draft), the head of each weight row, the first `percent`% of its
// bytes, which every CTA of the product reads first: of gate/up beside the o product (SPECPRESS_L2_PREFETCH_GATE_UP,
// default 3) and of down beside the SwiGLU (SPECPRESS_L2_PREFETCH_DOWN, default 10); 0 turns one off; read once,
// 0 .. 100, a bad value fails naming the variable; 0 while l2_prefetch_o() is off (docs/PERF.md, twenty-third pass).
int l2_prefetch_gate_up_percent();
int l2_prefetch_down_percent();

// The shared memory, in KB, that the multi-row steps' o products may take for their rings on the wgmma kernel, and
// the most K splits they take (kernels::Wg16RingScope around them; SPECPRESS_WG16_O_RING_KB, 40 .. 200, default 160,
// and SPECPRESS_WG16_O_SPLITS, 0 .. 16, default 2, 0 for wg16_plan's rule; read once; 200 is the other products'
// budget). The products fill their rings under PDL (the wgmma products' steps are captured with it), W_o from the
// L2, while the attention runs. At 120 KB (3 stages of 4 chunks, 121 KB) an o block fits on an SM beside an
// attention block (75 KB): with the plan's 3 splits at Qwen3-4B, verify 2.993 -> 2.955 ms against 200 KB on the H200
// (docs/PERF.md, twenty-ninth pass). At 2 splits a 4B tile's splits fit the cluster sum (40 clusters of 2; the H200
// holds 39 of the 3-split plan's clusters of 3) and 80 blocks stream the L2's W_o: with 160 KB (4 stages, 169 KB
// with the cluster's slots, too large to share an SM with an attention block; traced in the fifty-sixth pass, all 80
// blocks start before the attention releases them, a median 3.7 us, none beside another block) verify 12-14 us
// shorter than 3 splits at 120 KB (the table's verify 17-19) in the committed tree's A/B, 20-22 in the experiments';
// 2 splits at 120 KB and 3 at 160 KB were not faster (fifty-fifth pass). Qwen3-8B's o products take 2 splits either
// way (its verify 12 us shorter at 160 KB in one round). No change where cuBLASLt runs the products.
int o_ring_kb();
int o_splits();
// Diagnostic (fast_perf --wg16-trace): the multi-row layers' o products, and their gate/up products where the wgmma
// kernel's SwiGLU form runs them, run under kernels::Wg16TraceScope, so that, after kernels::wg16_trace_start, each
// stamps its blocks' timeline (Wg16Args::trace). Off by default; read where the products are issued (set it before an
// engine captures its graphs).
bool wg16_layer_trace();
void set_wg16_layer_trace(bool on);
// Diagnostic (fast_perf --decode-trace): the one-row decode layers' GEMVs and attention are captured under
// kernels::StepTraceScope, so that, after kernels::step_trace_start, the decode graph captured next stamps its blocks
// (kernels/step_trace.h); eager runs of the layers take no rows. Off by default.
bool decode_step_trace();
void set_decode_step_trace(bool on);

// With folded norms, the multi-row steps' qkv products on the wgmma kernel compute their input norm's row factors
// themselves and write the normed rows' projection (kernels::wg16_linear_norm_out), so the side stream's row_rms and
// its join leave those layers (not the ones after a tapped layer, whose row_rms also copies the tap). Bitwise the
// same results. SPECPRESS_WG16_QKV_NORM, 0 or 1 (default 1; same rules as SPECPRESS_FOLD_NORMS), read when an
// engine is built.
bool qkv_norm_in_product();
void set_qkv_norm_in_product(bool on);

// The one-row decode step's target layers as one persistent kernel (kernels/decode_layers.h: a TMA weight stream
// that runs on through the op boundaries and the attention) instead of five launches a layer (default off: measured
// slower, docs/PERF.md, nineteenth pass; SPECPRESS_DECODE_PERSISTENT=1 turns it on, same rules as
// SPECPRESS_FOLD_NORMS). It needs folded norms and shapes the kernel takes (kernels::decode_layers_supported);
// elsewhere the launches run. Read when an engine is built.
bool decode_persistent();
void set_decode_persistent(bool on);
// The one-row decode step's o and gate/up products as one launch (kernels::gemv_o_gate_up_out: o's residual add, a
// grid barrier, then the gate/up product with the folded norm and the SwiGLU; gate/up's first bytes staged into shared
// memory while the attention runs) instead of two GEMV launches. Default off: measured 0.5-7% slower at Qwen3-4B by its
// settings, 1.0% at its defaults (kernels/gemv_o_gate_up.h; docs/PERF.md, fortieth and forty-first passes);
// SPECPRESS_GEMV_O_GATE_UP=1 turns it on, same rules as SPECPRESS_FOLD_NORMS. It needs folded norms and shapes the
// kernel takes on the device (kernels::gemv_o_gate_up_takes); elsewhere the two GEMVs run. Bitwise the same results.
// Read when an engine is built.
bool gemv_o_gate_up_fused();
void set_gemv_o_gate_up_fused(bool on);
// The one-row decode step's gate/up and down products as one launch (kernels::gemv_mlp_out: each block owns a slice of
// the intermediate dimension end to end, gate/up rows, SwiGLU, then its rows of W_down transposed, and writes its
// partial sums, which are added in a fixed order: gemv_mlp_ordered) instead of two GEMV launches. It needs folded norms
// and shapes the kernel takes (kernels::gemv_mlp_takes) in a matmul mode whose decode step runs the one-row GEMV layers
// (kernels::fused_one_row: gemv, the default, or stream), and keeps a transposed copy of each layer's W_down (the
// target's down weights twice in memory: 1.8 GB at Qwen3-4B). SPECPRESS_GEMV_MLP=1: every engine runs it where it can
// (gemv_mlp_fused()); =0: none does; unset (the default, gemv_mlp_timed()): an engine without a draft (plain decoding;
// a DFlash engine's loop never runs its decode step) that can run it captures its decode graph with both forms, times
// alternating replays and keeps the fused form where it is at least kDecodeMlpMargin faster, else frees the copy. On
// the H200 it was 3.0% faster a Qwen3-4B decode step and 0.9% slower an 8B one (docs/PERF.md, forty-sixth pass). The
// two forms round differently (each within 2 bf16 units of its operands); set the switch to pin one. Where
// SPECPRESS_GEMV_O_GATE_UP or the persistent decode kernel is on, that runs instead. Read when an engine is built.
bool gemv_mlp_fused();
void set_gemv_mlp_fused(bool on);
bool gemv_mlp_timed();
EnvSwitch& gemv_mlp_switch();  // the switch itself (tests put it back with saved() / restore())
inline constexpr double kDecodeMlpMargin = 0.01;
// The fused MLP's sum in a fixed order (default on: kernels/gemv_mlp.h, a row of sums a block, the last blocks to
// arrive each add a slice of the outputs), so the decode step's x is the same bits on every run.
// SPECPRESS_GEMV_MLP_ORDERED=0 adds the sums into an fp32 accumulator in arrival order instead (not the same bits
// from run to run; 1.4% faster at Qwen3-4B before the forty-sixth pass shortened the ordered sum's tail), same rules as
// SPECPRESS_FOLD_NORMS. Read when an engine is built.
bool gemv_mlp_ordered();
void set_gemv_mlp_ordered(bool on);
// A diagnostic of that kernel (fast_perf --persistent-trace): engines built while it is on have the kernel stamp its
// timeline (kernels::DecodeLayersArgs::trace) into a buffer at each decode step, read by persistent_trace(). Off by
// default; set only through this call.
bool decode_persistent_trace();
void set_decode_persistent_trace(bool on);

// Whether the fast path can run `target` (+ `draft`): CUDA, bf16, supported widths. `why` gets the reason.
bool fast_path_supported(const Qwen3Model& target, const DFlashDraft* draft, std::string* why);

// A layer's weights as the fast path reads them: QKV and gate/up fused at load time. In a target layer of an
// engine with folded norms (fold_norms()), qkv and gate_up hold W diag(input_norm) and W diag(post_norm) and take
// the raw residual rows; input_norm and post_norm are then not read.
struct FastLayer {
  at::Tensor input_norm, qkv, q_norm, k_norm, o_proj, post_norm, gate_up, down;
};

// A target's layers in that layout, as one engine made them, for the next engine on the same model (a runner's plain
// and DFlash engines, an engine rebuilt for more positions): the at::Tensor handles share their storage, so the
// engines of one model hold one copy of the fused weights (a Qwen3-8B's: 9 GB) and fuse them once.
struct FastTargetLayers {
  const Qwen3Model* model = nullptr;
  bool folded = false;
  std::vector<FastLayer> layers;
};

// Scratch activations for forwards of up to `rows` tokens of one model.
struct FastBuffers {
  int64_t rows = 0;
  at::Tensor x, h, qkv, q, attn, o, gate_up, act;  // [rows, ...] bf16
  at::Tensor logits;                               // [rows, V] bf16
  at::Tensor tokens;                               // int64 [rows]: argmax of the logits rows
  at::Tensor taps;                                 // [rows, n_taps * H] bf16 (target only)
  at::Tensor rs;                                   // float [2, rows]: folded norms' row factors (attention, MLP)
  kernels::AttentionScratch attn_scratch;
};

class FastEngine {
 public:
  // `capacity`: positions the KV caches hold (prompt + new tokens + block). `block_size` 0 = the
  // draft's trained size; ignored without a draft. `shared`: another engine's target_layers(), taken where they were
  // made from this target with this engine's folding (else the engine fuses its own).
  FastEngine(const Qwen3Model& target, const DFlashDraft* draft, int64_t capacity, int64_t block_size = 0,
             const FastTargetLayers* shared = nullptr);
  ~FastEngine();
  FastEngine(const FastEngine&) = delete;
  FastEngine& operator=(const FastEngine&) = delete;

  int64_t block_size() const { return B_; }
  int64_t capacity() const { return capacity_; }
  at::Device device() const { return device_; }
  FastTargetLayers target_layers() const { return {&target_, folded_, t_layers_}; }
  const c10::cuda::CUDAStream& stream() const { return stream_; }

  // ---- plain decoding
  // Eager prefill of `prompt` at positions 0..N-1 (taps kept for the draft when there is one).
  // Returns the last row's logits (fp32 [1, V], a fresh tensor). Sets start = N.
  at::Tensor prefill(const std::vector<int64_t>& prompt);
  void set_token(int64_t token);  // the next decode step's input
  // Decode graph: the token at `start` -> logits -> argmax becomes the next input; start += 1.
  void decode_step();
  int64_t read_token();           // the decode step's argmax (one host sync): queue_token_copy(0) + wait_token(0)
  at::Tensor decode_logits();     // fp32 [1, V] copy of the last decode step's logits

  // Scoring (echo with logprobs: decode::prompt_logprobs_fast): an eager target forward of ids [T] (int64 on the
  // device) at positions start .. start + T - 1 over the cache's positions 0 .. start - 1 as the calls before wrote
  // them. Returns every row's logits (fp32 [T, V], a fresh tensor); sets start = start + T, which must fit the
  // capacity. The ids must be in the vocabulary (unchecked).
  at::Tensor forward_rows(const at::Tensor& ids, int64_t start);

  // ---- DFlash decoding (needs a draft)
  // First draft call after prefill: injects all N prompt rows, sets block = [bonus, MASK...], drafts.
  void first_draft(int64_t bonus);
  // draft graph: inject the last verify's B tapped rows (unless the verify did: inject_in_verify()), draft the block
  void draft_step();
  void verify_step();             // verify graph: target forward of the block, argmax posterior, taps
  bool injects_in_verify() const { return inject_in_verify_; }
  bool decodes_persistent() const { return persistent_; }  // the decode step runs kernels::decode_layers
  // The last persistent decode step's timeline (uint64 as int64 on the host, [SMs][5 L + 1][kDecodeTraceFields]);
  // undefined unless the engine was built with decode_persistent_trace() and decodes_persistent(). One host sync.
  at::Tensor persistent_trace() const;
  // Acceptance on the device, from the verify argmax or (sampling) from `posterior` given by the host.
  void accept(const std::vector<int64_t>* posterior = nullptr);
  // Host copy of the last accept's record: block (B), posterior (B), a. One host sync.
  const int64_t* read_record();   // queue_record_copy(0) + wait_record(0)
  // Pipelined loops (decode/fast_generation.h): the copy of the last step's result into host slot `slot`
  // (0 or 1), queued on the engine stream behind the work launched so far, and the wait for that copy alone,
  // so that the host can queue the next step before it reads this one. A slot's result stays valid until
  // the next queue_*_copy or accept_into into the same slot.
  void queue_token_copy(int slot);   // the last decode step's argmax
  int64_t wait_token(int slot);
  void queue_record_copy(int slot);  // the last accept's record
  const int64_t* wait_record(int slot);
  // accept() (greedy) with its record bound for host slot `slot`, for wait_record(slot): the accept kernel writes
  // the slot (record_mapped()), or queue_record_copy(slot) follows it.
  void accept_into(int slot);
  bool records_mapped() const { return record_host_device_ != nullptr; }  // accept_into writes the slots itself
  at::Tensor verify_logits();     // fp32 [B, V] copy of the last verify's logits
  at::Tensor draft_proposals();   // int64 [B] device view of the block ids (bonus + proposals)

  // Bytes that one decode (or verify) step / one draft step must read (weights + KV at
  // `context`), for rooflines.
  double decode_bytes(int64_t context) const;
  double draft_bytes(int64_t context) const;
  // Bytes the draft's context injection must read: fc and its norm, with kv_rows also every draft layer's K/V
  // weight rows (which the draft's block forward reads too, inside its fused QKV). draft_bytes counts fc and
  // the norm; an engine that injects in the verify step (injects_in_verify()) moves them, and reads the K/V rows
  // once more there.
  double inject_bytes(bool kv_rows) const;

  // Direct forwards for tests and benchmarks (eager, on the engine stream):
  // target forward of ids [T] at device position *start; logits of the last `logit_rows` rows, and with `tokens`
  // (int64 [logit_rows]) their argmax (head_logits).
  // taps_ready (with taps): called on the engine stream's capture or launch order right after the write of the last
  // tapped layer's rows is queued, with an event recorded behind that write.
  using TapsReady = std::function<void(cudaEvent_t)>;
  void target_forward(const at::Tensor& ids, FastBuffers& b, int64_t logit_rows, bool taps,
                      const TapsReady* taps_ready = nullptr, const at::Tensor& tokens = {});
  FastBuffers make_target_buffers(int64_t rows, int64_t logit_rows, bool taps, int splits) const;
  FastBuffers& verify_buffers() { return verify_buf_; }
  FastBuffers& decode_buffers() { return decode_buf_; }
  FastBuffers& draft_buffers() { return draft_buf_; }
  at::Tensor& start_tensor() { return start_; }
  at::Tensor& ctx_start_tensor() { return ctx_start_; }
  void set_start(int64_t start, int64_t ctx_start);
  at::Tensor target_k_cache() const { return k_cache_; }
  at::Tensor target_v_cache() const { return v_cache_; }
  at::Tensor draft_k_cache() const { return dk_cache_; }
  at::Tensor draft_v_cache() const { return dv_cache_; }
  // Capture the three graphs (done lazily by the first step; exposed for timing set-up). First tunes the
  // cuBLASLt plans of the verify and draft matmuls (tune_matmuls), when linear_out uses them.
  void capture_graphs();
  // Wall time the last capture_graphs spent tuning matmuls, ms (0 when it tuned nothing new: plans are
  // process-wide, so later engines of the process reuse them).
  double matmul_tuning_ms() const { return matmul_tuning_ms_; }
  // Edges the last capture_graphs turned into launch-completion edges (kernels/graph_edges.h), in the decode,
  // verify and draft graphs.
  std::array<int, 3> launch_completion_edges() const { return lc_edges_; }
  // Where the last capture_graphs chose (multirow_chooses()): ms per verify + draft replay it measured with the
  // cuBLASLt products [0] and the wgmma kernel's [1]; {0, 0} where it did not. multirow_wgmma(): whether the
  // captured verify and draft graphs run the wgmma kernel and its SwiGLU form (chosen, or both switches on).
  std::array<double, 2> multirow_ms() const { return multirow_ms_; }
  bool multirow_wgmma() const { return multirow_wgmma_; }
  // Where the last capture_graphs chose the decode step's MLP form (gemv_mlp_timed()): ms per decode replay it
  // measured with the two GEMVs [0] and the fused kernel [1]; {0, 0} where it did not. decode_mlp_fused(): whether the
  // decode graph runs the fused kernel (chosen, or SPECPRESS_GEMV_MLP=1).
  std::array<double, 2> decode_mlp_ms() const { return decode_mlp_ms_; }
  bool decode_mlp_fused() const { return mlp_; }
  // The most target layers of one forward so far whose qkv product computed its norm's factors itself
  // (qkv_norm_in_product()); 0 where none did.
  int qkv_norm_layers() const { return qkv_norm_layers_; }
  // Diagnostic: ms per replay of a graph holding only one class of the target step's kernels at M rows (1 or B):
  // "matmul" (the 4 per layer + LM head), "attention" (with its q/k-norm + RoPE and cache write fused in, as the engine
  // runs it), "elementwise" (2 RMSNorms and SwiGLU per layer; with folded norms the 2 row-factor kernels, which the
  // step runs beside the products or, on the wgmma kernel, inside them, and the scaled SwiGLU; at M = 1 the engine runs
  // them inside the GEMVs), "head" (embedding + argmax). Writes scratch buffers and the caches.
  double kernel_class_ms(const std::string& kind, int64_t M, int reps);
  // Waits for the engine stream. Methods returning tensors (prefill, *_logits, draft_proposals) do it;
  // callers reading the buffers directly after a step must call it (the stream is non-blocking).
  void sync();

 private:
  const Qwen3Model& target_;
  const DFlashDraft* draft_;
  int64_t capacity_, B_ = 0;
  at::Device device_;
  c10::cuda::CUDAStream stream_;
  // Folded norms: the row factors run on side_stream_ beside the matmul that reads the same rows (fork / join
  // by the two events).
  c10::cuda::CUDAStream side_stream_;
  cudaEvent_t fork_event_ = nullptr, join_event_ = nullptr;
  // inject_in_verify(): the draft's context injection runs on inject_stream_ inside the verify step, from taps_event_
  // (or the side stream's join_event_) to inject_event_.
  bool inject_in_verify_ = false;
  c10::cuda::CUDAStream inject_stream_;
  cudaEvent_t taps_event_ = nullptr, inject_event_ = nullptr;
  // l2_prefetch_o(): the prefetches run on prefetch_stream_
  bool prefetch_o_ = false;
  bool qkv_norm_ = false;  // qkv_norm_in_product()
  int qkv_norm_layers_ = 0;
  int prefetch_gate_up_percent_ = 0, prefetch_down_percent_ = 0;
  c10::cuda::CUDAStream prefetch_stream_;
  cudaEvent_t prefetch_fork_event_ = nullptr, prefetch_join_event_ = nullptr;
  bool folded_ = false;
  // decode_persistent(): the kernel's layer table (kernels::DecodeLayer [L], bytes), attention workspace and counters
  bool persistent_ = false;
  at::Tensor persistent_layers_, persistent_workspace_, persistent_counters_;
  at::Tensor persistent_trace_;  // decode_persistent_trace(): the kernel's timeline, int64 on the device
  // gemv_o_gate_up_fused() where the kernel takes the target's shapes: its grid barrier's arrival count (int32 [1])
  bool o_gate_up_ = false;
  at::Tensor o_gate_up_barrier_;
  // gemv_mlp_fused() (or timed and kept) where the kernel takes the target's shapes: W_down^T of each target layer,
  // the kernel's accumulator (fp32: [H], zero between launches; ordered: a row of H a block) and its arrival counter
  // (int32 [1], zero between launches). mlp_timed_: capture_graphs times both forms and frees these if the two GEMVs
  // win (then false: the choice is made once).
  bool mlp_ = false, mlp_timed_ = false;
  std::vector<at::Tensor> down_t_;
  at::Tensor mlp_acc_, mlp_counter_;
  bool mlp_ordered_ = false;  // gemv_mlp_ordered() when the engine was built
  std::array<double, 2> decode_mlp_ms_{};  // decode_mlp_ms()
  std::vector<FastLayer> t_layers_, d_layers_;
  at::Tensor k_cache_, v_cache_, dk_cache_, dv_cache_;  // [L, nkv, capacity, hd]
  ops::RopeTable draft_rope_;
  at::Tensor start_, ctx_start_;                        // int32 [1]
  at::Tensor token_in_;                                 // int64 [1]
  at::Tensor block_ids_, posterior_, record_;           // int64 [B], [B], [2B+1]
  at::Tensor record_host_, scalar_host_;                // pinned, two slots each: [2, 2B+1], [2]
  int64_t* record_host_device_ = nullptr;               // record_host_ in the device's address space (record_mapped())
  std::array<cudaEvent_t, 2> token_copied_{}, record_copied_{};  // a slot's copy (or mapped accept) done
  FastBuffers decode_buf_, verify_buf_, draft_buf_;
  at::Tensor draft_ctx_raw_, draft_ctx_, draft_kv_;     // draft injection scratch [B, ...]
  at::Tensor draft_kv_weight_;  // draft_kv_batch(): the draft layers' K/V weight rows, one after another
  at::Tensor draft_k_norms_;    // draft_kv_batch(): their k-norm weights [L, head_dim]
  std::unique_ptr<at::cuda::CUDAGraph> decode_graph_, verify_graph_, draft_graph_;
  bool graphs_ready_ = false;
  double matmul_tuning_ms_ = 0;
  std::array<int, 3> lc_edges_{};  // launch_completion_edges()
  std::array<double, 2> multirow_ms_{};  // multirow_ms()
  bool multirow_wgmma_ = false;
  // ms per replay of two configurations' graphs (replay(c) replays configuration c once), the best of 5 alternating
  // batches of 10, each batch from positions 0..
  std::array<double, 2> time_alternating(const std::function<void(int)>& replay);
  std::vector<int64_t> tap_layers_;

  at::Tensor prefill_taps_;                            // prompt rows' taps until the first draft
  FastBuffers make_buffers(int64_t rows, int64_t logit_rows, const Qwen3Config& c, int64_t taps_width, int splits) const;
  void run_layers(const std::vector<FastLayer>& layers, const Qwen3Config& c, const ops::RopeTable& rope,
                  const at::Tensor& k_cache, const at::Tensor& v_cache, FastBuffers& b, int64_t T,
                  const at::Tensor& pos, bool causal, const at::Tensor& final_norm, const std::vector<int64_t>& taps,
                  const TapsReady* taps_ready = nullptr);
  // logits [rows, V] = LM head of the last `rows` of a T-row forward by run_layers: from the final-normed
  // h, or, for a fused one-row forward, from x with the final norm as the GEMV's prologue. With `tokens` (int64
  // [rows]), also their argmax: in the multi-row head's own launch where the wgmma kernel takes it
  // (kernels::wg16_head_argmax_takes), else by argmax_out after it.
  void head_logits(const at::Tensor& logits, FastBuffers& b, int64_t T, const at::Tensor& final_norm, double eps,
                   const at::Tensor& tokens = {});
  // The draft's context injection of features' rows at positions *pos..: fc into raw, its norm into ctx, then every draft
  // layer's K/V rows into kv and its caches. kv [T, L * kv_rows]: one product and one launch (draft_kv_weight_);
  // kv [T, kv_rows]: a layer at a time.
  void draft_inject(const at::Tensor& features, const at::Tensor& raw, const at::Tensor& ctx, const at::Tensor& kv,
                    const at::Tensor& pos);
  // kernels::tune_linear for every matmul of more than one row in the verify and draft bodies.
  void tune_matmuls();
  // The accept kernel on the current stream, from posterior_; host_record: also into that mapped host slot.
  void launch_accept(int64_t* host_record);
  void draft_block();
  void decode_body();
  void verify_body();
  void draft_body();
};

}  // namespace specpress::model
