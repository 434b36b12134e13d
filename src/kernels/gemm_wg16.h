// gemm_wg16.h — Y[T, N] = X[T, K] · W[N, K]^T (+ R) for 1 <= T <= 16 rows on Hopper's asynchronous warpgroup MMA
// (wgmma), torch-free: the verify and draft products (T = 16 tokens), bound by reading W once.
//
// Why another 16-row kernel: every earlier one (gemm_small.h, the probes in bench/) issued mma.sync from warps
// that also waited on their own loads, so the math's latency sat in the stream; and cuBLAS(Lt), which reads these
// weights at 50-90% of the copy bandwidth, cannot take part in programmatic dependent launch (docs/PERF.md,
// thirteenth pass), so each product starts its stream only after the previous kernel has ended. Here a producer
// warp streams W (and X) with the TMA engine into a ring of shared-memory stages in the 128-byte swizzled layout
// wgmma reads directly, and one consumer warpgroup issues m64n16k16 wgmma on them: W tiles are the A operand (64
// outputs), X^T the B operand (16 tokens). Under PDL the producer fills the ring with W before it waits on the
// previous kernel (W is constant; all of it, or Wg16Args::prefill stages: SPECPRESS_WG16_SILU_HOLD holds some of the
// folded gate/up products' back, none by default), so a product's first bytes are on chip when its input is ready;
// after the wait it copies X a stage at a time (Wg16Args::x_stage_box, the fast engine's default). With
// Wg16Args::trigger_early (the fast engine's default) it also lets the next kernel launch as it starts, so that
// kernel's blocks do the same on the SMs it leaves idle.
// Measured on the H200 (docs/PERF.md, twenty-fifth pass; bench/wg16_probe.cu): alone, 7% faster than cuBLAS on the
// 4B gate/up shape and 3% on the 8B o, 1-6% slower on the other six Qwen3 shapes; behind a latency-bound kernel
// under PDL it adds 0.5 to 4.8 us less than cuBLAS on all eight. In the steps, against the tuned cuBLASLt plans: 4B
// verify 1.3-2.0% slower, draft 2-4% faster, cycle 0-0.3% faster; 8B verify 1.9% and cycle 1.3% slower. So it is an
// opt-in (kernels::wg16_switch, SPECPRESS_WG16=1), not the default. With its SwiGLU form for the gate/up products
// (below; SPECPRESS_WG16_SWIGLU=1) and one-wave gate/up plans, the 4B cycle was 1.6-2.1% faster than the defaults on
// two hosts and the 8B cycle 0.2-1.0% slower (twenty-sixth pass). So the fast engine chooses at capture by timing
// both configurations (model::multirow_auto, SPECPRESS_WG16_AUTO, on by default; twenty-seventh pass): on the H200 it
// keeps this kernel for Qwen3-4B, and for 8B too since the products trigger their dependents as they start (replay
// 1.3% faster than cuBLASLt's; thirtieth and thirty-first passes).
//
// Work split: W in tiles of 64 rows; K in chunks of 64 columns (one TMA box, 128 bytes a row); a stage is `kb` chunks.
// Block b takes tile b % tiles and K split b / tiles (the chunk steps of a split are consecutive, the splits balanced).
// With splits > 1, each block writes its 64 x 16 fp32 partial to `workspace`, and the last block of a tile to finish (a
// counter a tile, reset by that block) adds the partials in split order, so the result does not depend on which block
// finished last. With Wg16Args::cluster_sum, a tile's splits run instead as one thread-block cluster (blocks tile *
// splits .. + splits - 1): splits 1.. store their partials into split 0's shared memory (distributed shared memory) and
// arrive on its barrier, and split 0 adds them in the same order (the same bits), without the workspace round trip,
// fence and counter. With more tiles than SMs (the gate/up shapes) and no K split, block b takes tiles_per_block
// consecutive tiles in turn through one ring, so that the blocks fit in one wave. Rows of X past T are zero (the TMA
// fills out-of-bounds rows with zeros) and outputs past T or N are not written.
// Reference twin: at::linear (+ the residual); kernels::wg16_linear_out (aten_ops.h) is the ATen entry point, and
// tests/gpu (Kernels.Wg16MatchesReference) compares the two.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace specpress::kernels {

constexpr int kWg16Rows = 64;   // outputs a tile (the wgmma's M)
constexpr int kWg16Chunk = 64;  // K columns a TMA box
constexpr int kWg16MaxT = 16;
constexpr int kWg16RingKb = 200;  // wg16_plan's shared-memory budget for the rings an SM holds, KB (unless asked less)

// The diagnostic timeline (Wg16Args::trace): a row of kWg16TraceFields a block, %globaltimer ns unless named. Start:
// the block's first instruction; Waited: its producer's PDL wait released (the previous kernel has ended); FirstStage:
// the consumers found the first stage landed (W and X); Consumed: the last stage's wgmma done; Arrived (K splits
// only): the partial written and counted; End: the block's last store issued (the last block of a tile: after the
// sum); Sm: %smid; Last: 1 for the block that summed its tile's splits. Fields a block did not reach stay as they were.
constexpr int kWg16TraceStart = 0, kWg16TraceWaited = 1, kWg16TraceFirstStage = 2, kWg16TraceConsumed = 3,
              kWg16TraceArrived = 4, kWg16TraceEnd = 5, kWg16TraceSm = 6, kWg16TraceLast = 7, kWg16TraceFields = 8;

struct Wg16Plan {
  int splits = 1;  // K splits (1: no partials)
  int stages = 4;  // ring stages
  int kb = 2;      // chunks a stage (1, 2 or 4)
  int tiles_per_block = 1;  // > 1: block b takes tiles b * tiles_per_block ... in turn, one ring (needs splits 1)
};

struct Wg16Args {
  const __nv_bfloat16* W = nullptr;  // [N, K], row stride ldw
  int64_t ldw = 0;
  const __nv_bfloat16* X = nullptr;  // [T, K], row stride ldx
  int64_t ldx = 0;
  __nv_bfloat16* Y = nullptr;  // [T, N], row stride ldy
  int64_t ldy = 0;
  const __nv_bfloat16* R = nullptr;  // optional residual [T, N] (row stride ldr), may be Y itself: Y = R + X W^T
  int64_t ldr = 0;
  int T = 0, N = 0, K = 0;
  float* workspace = nullptr;    // splits > 1: wg16_workspace_floats(N, splits) floats
  unsigned* counters = nullptr;  // splits > 1: wg16_tiles(N) counters, zero before the first launch (left zero)
  Wg16Plan plan;
  bool trigger = true;  // under PDL: let the next kernel be scheduled once this block's loads are issued
  // ... or, with trigger_early, as soon as this block's producer starts, before its loads: the next kernel's blocks
  // then take the SMs this product leaves idle (4B: 96 qkv, 102 gate/up and 120 o and down blocks on 132 SMs) and
  // fill their rings there, while it still streams (the fast engine's products take it by default:
  // kernels::wg16_trigger_early, SPECPRESS_WG16_TRIGGER_EARLY; docs/PERF.md, thirtieth pass)
  bool trigger_early = false;
  bool overlap = false;   // keep one stage's wgmma in flight while the next is issued (else wait for each)
  // splits 2..8: a tile's K splits as one cluster, summed in split 0's shared memory (above), where the device holds
  // all the launch's clusters at once (one wave; asked once per kernel and size) and the slots fit; otherwise the
  // workspace sum. The fast engine's products take it by default (kernels::wg16_cluster_sum, aten_ops.h): Qwen3-8B's o
  // and down products (64 clusters of 2) and the 4B o products at their 2 splits (40 clusters of 2, model::o_splits);
  // the 4B down products (40 of 3, 39 held) keep the workspace (docs/PERF.md, fifty-fourth and fifty-fifth passes).
  // Needs workspace and counters all the same.
  bool cluster_sum = false;
  // X's copies after the PDL wait: one a stage (a 3D box of the stage's kb chunks; K a multiple of 64, else one a
  // chunk as without it) instead of one a chunk, the same bytes in the same places. One thread issues every copy; a
  // quarter as many X copies (4-chunk stages) took Qwen3-4B's verify 11-24 us shorter in four same-binary rounds,
  // though the trace's first stage lands no sooner (kernels::wg16_x_stage_box, aten_ops.h; docs/PERF.md, fifty-seventh
  // pass).
  bool x_stage_box = false;
  // under PDL: ring stages filled with W before waiting on the previous kernel (all by default; the fast engine's folded
  // gate/up products hold kernels::wg16_silu_hold back, aten_ops.h: none unless asked), the rest after it
  int prefill = 1 << 30;
  // The SwiGLU form (the MLP's gate/up product and its activation in one launch): W is gate_up [N = 2I, K], gate
  // rows then up rows; Y [T, I] = silu(g) * u with g, u the bf16 products, each first scaled by the token's
  // row_scale (a folded RMSNorm's factors, float [T]; nullptr: none) and rounded to bf16, as kernels::silu_mul does
  // on a gate_up buffer, so the result is bitwise that of this product followed by silu_mul. A tile is 32 features:
  // a 4D tensor map puts each 8 features' gate rows and then their up rows into one 64-row box, so a thread's two
  // accumulator rows (g and g + 8) are one feature's gate and up. Needs N % 16 == 0 and no residual.
  bool silu_mul = false;
  const float* row_scale = nullptr;
  // The factors of a norm folded into W computed here from X (the raw residual, K = H): rsqrt(mean(x^2) + eps) a
  // token, summed in kernels::row_rms's order (the same bits), so that the product needs no row_rms launch before it.
  // The SwiGLU form applies them as row_scale; the plain form writes Y = bf16(bf16(X W^T) * factor), the rows the
  // fused attention reads from a product given its row_scale (the qkv product: its input norm). Needs splits == 1
  // (each block sees all of K), no row_scale and no residual.
  bool row_norm = false;
  float eps = 0.f;
  // The greedy token of each row (the LM heads' argmax, plain form): argmax[t] for t < T is the index of row t's
  // largest bf16 value of Y (as written), by argmax_rows's rule (decode_step.h: the lowest index among equal maxima, NaN
  // never a maximum, 0 for a row of NaN only), so that no argmax launch runs after the product. Each block keeps its
  // first maximum a token over its tiles, writes it to argmax_values / argmax_indices [block * kWg16MaxT + t], and the
  // last block to count itself on argmax_counter (zero before the first launch, left zero) merges the blocks'. Needs
  // splits == 1, no residual, no row_norm and not the SwiGLU form; the three buffers hold wg16_blocks(N, plan) x
  // kWg16MaxT entries (one counter). nullptr: off.
  int64_t* argmax = nullptr;
  float* argmax_values = nullptr;
  int* argmax_indices = nullptr;
  unsigned* argmax_counter = nullptr;
  // Diagnostic: kWg16TraceFields stamps a block at trace + block * kWg16TraceFields, written by separate kernel
  // instances (plus a block synchronisation at the end), so that nullptr runs the untraced code unchanged (its PTX is
  // the kernel's without the field). kernels::Wg16TraceScope (aten_ops.h) hands them out.
  unsigned long long* trace = nullptr;
};

inline int wg16_tiles(int N) { return (N + kWg16Rows - 1) / kWg16Rows; }
// The blocks a launch of this plan runs for an N-row W: tiles_per_block tiles each, or a block a (tile, K split).
inline int wg16_blocks(int N, const Wg16Plan& plan) {
  return (wg16_tiles(N) + plan.tiles_per_block - 1) / plan.tiles_per_block * plan.splits;
}
inline size_t wg16_workspace_floats(int N, int splits) {
  return splits > 1 ? static_cast<size_t>(wg16_tiles(N)) * splits * kWg16Rows * kWg16MaxT : 0;
}
// Shared memory a block of this plan takes (bytes); with Wg16Args::cluster_sum, wg16_cluster_sum_bytes(splits) more.
size_t wg16_smem_bytes(const Wg16Plan& plan);
size_t wg16_cluster_sum_bytes(int splits);
// Whether this thread's last gemm_wg16 call that passed its argument and shared-memory checks chose the cluster sum
// (the tests' way to see which sum ran).
bool wg16_last_launch_clustered();
// The plan for an N x K weight on `sms` SMs (docs/PERF.md, twenty-fifth pass): 4 chunks a stage where they divide
// K's chunks; K split where the tiles fill less than half the SMs (at least 5 steps a split, at most one block an
// SM in all: the Qwen3-4B o and down products take 3 splits, 120 blocks; 3 splits for o measured 60 us faster than
// 1 in one call's verify step and were not faster in the next); more tiles than SMs: ceil(tiles / SMs) tiles a block
// (4B gate/up: 3, 102 blocks; 8B: 3, 128); ring stages so that the blocks an SM holds take at most about 200 KB
// together, at least 3 (chunks a stage halved until they fit).
// split_k false: no K split (the SwiGLU form's in-kernel row factors need all of K); tiles_per_block > 0: that many
// tiles a block instead of the rule's (without a K split), the ring sized for it. ring_kb: the shared memory the
// blocks an SM holds may take for their rings, in KB (kWg16RingKb unless a caller asks for less, so that a block
// fits beside another kernel's: model/qwen3_fast.h's o product beside the attention). max_splits > 0: at most that
// many K splits (model/qwen3_fast.h's o products take 2, so that a tile's splits fit the cluster sum).
Wg16Plan wg16_plan(int N, int K, int sms, bool split_k = true, int tiles_per_block = 0, int ring_kb = kWg16RingKb,
                   int max_splits = 0);

// cudaErrorInvalidValue when: T not in 1..16, N or K < 1, K % 8 != 0, ldy less than Y's columns, W's or X's row stride
// not a multiple of 8 elements or their data not 16-byte aligned (the TMA's rules; Y and R are accessed an element at a
// time), the SwiGLU form with N % 16 != 0 or a residual, row_norm with a row_scale, a residual, splits > 1 or a
// negative eps, the argmax with splits > 1, a residual, row_norm, the SwiGLU form or a missing buffer, kb not 1, 2
// or 4 or not dividing K's 64-column chunks, stages not 2..12, a negative prefill, splits < 1 or more than the chunk
// steps, splits > 1 without workspace and counters, or the plan's shared memory over the device's limit.
// cudaErrorNotSupported on a device other than sm_90 (gemm_wg16_available) or without the driver's tensor-map entry
// point. Launched with PDL when it is on (kernels::pdl_enabled, launch.h), as the other kernels of src/kernels.
cudaError_t gemm_wg16(const Wg16Args& args, cudaStream_t stream);

// Whether gemm_wg16 can run on the current device: compute capability 9.x (its wgmma code is built for sm_90a only,
// which no other architecture loads) and a driver with the tensor-map entry point.
bool gemm_wg16_available();

}  // namespace specpress::kernels
