// gemv.h — y[N] = W[N, K] · x[K], the one-row matmul of the plain decode step (M = 1: QKV, o, gate/up,
// down, LM head), bf16 in and out, fp32 accumulation, torch-free. At M = 1 a matmul only has to read W
// once, so this is a stream of W tuned for HBM bandwidth rather than a tensor-core GEMM: each warp owns
// consecutive rows, reads them with 16-byte loads (one warp instruction = 512 contiguous bytes of a row)
// that bypass L1, and keeps 8 of them per lane in flight; the grid is one wave of resident warps with
// the rows split evenly between them, so no SM waits on a straggling tail of blocks. Reference twin:
// at::linear (kernels::gemv_out in aten_ops.h). Used by linear_out for M = 1 in the default matmul mode.
//
// A decode layer is four of these plus the attention: the RMSNorm before a projection runs as the GEMV's
// prologue (`norm`), and the residual add after one as its epilogue (gemv_residual), so no launch is left
// for either and no block waits for another.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace specpress::kernels {

// How the GEMVs stream W (SPECPRESS_GEMV_TMA, read once; set_gemv_tma overrides it for the process; graphs keep
// what they were captured with). kAuto ("1", the default): a TMA GEMV for the products with at least 512 rows of W
// an SM (SPECPRESS_GEMV_TMA_MIN_ROWS overrides) and K divisible into segments of 512 to 1280 columns, which at the
// Qwen3 shapes is the LM head alone, and the register GEMV above for the rest; kOff ("0"): the register GEMV
// everywhere; kAlways ("always"): the TMA GEMV wherever K has a segment width (tests). Devices below compute
// capability 9.0 always take the register GEMV. The TMA GEMV: blocks of C consumer warps
// (SPECPRESS_GEMV_TMA_WARPS: 2, 4 by default, or 8) and a producer warp that copies tiles of C rows x one segment of
// W (up to 1280 columns) into a ring of shared-memory stages by cp.async.bulk (SPECPRESS_GEMV_TMA_STAGES, 2..16, sets
// the count, lowered where the block's shared memory would not fit); the same prologues and epilogues, each output
// bitwise the register GEMV's (each row's chunks are summed in the same order, and so is x's sum of squares). The
// variables are checked at the first GEMV, a bad value failing naming it. Alone the TMA GEMV reads the LM heads 5-7%
// faster than the register GEMV, and the 8B layer projections up to 6% faster, but in the decode step those were
// slower (blocks this large start only once the GEMV before them has nearly drained, so they lose the PDL overlap):
// docs/PERF.md, sixteenth pass; bench/gemv_tma_probe.cu is the standalone probe.
enum class GemvTma { kOff, kAuto, kAlways };
GemvTma gemv_tma();
void set_gemv_tma(GemvTma mode);
// Whether a GEMV reading `rows` rows of W (2I for the SwiGLU one) of K columns takes the TMA GEMV now. False also
// where a CUDA query fails (the launch would then report it).
bool gemv_tma_takes(int rows, int K);

// Loads in flight a lane (SPECPRESS_GEMV_WIDE, read once; set_gemv_wide_level overrides it for the process; graphs
// keep what they were captured with), for a plain or residual register GEMV without the norm prologue. Level 0: 8 W
// loads a lane everywhere. 1: 10 (a kernel of up to 85 registers a thread, 6 blocks an SM) where that needs strictly
// fewer serial steps (round trips) a warp; at the Qwen3 shapes Qwen3-4B's down projection (5 -> 4 steps) and its qkv
// projection (3 -> 2), none at 8B (docs/PERF.md, thirty-third pass). 2, the default: also 16 (one row a unit, up to
// 102 registers, 5 blocks an SM) where a warp's whole work is then one step and was more, so that its weights are all
// loaded before the PDL wait while the previous kernel runs; at the Qwen3 shapes Qwen3-4B's o projection (2 steps ->
// 1, beside the attention), none at 8B (thirty-fourth pass). Each row's chunks are summed in the same order at every
// level, so the outputs are bitwise the same.
int gemv_wide_level();
void set_gemv_wide_level(int level);  // clamped to 0 .. 2
// The W loads a lane the register GEMV keeps in flight for N outputs of K columns (residual: the residual epilogue,
// else the plain one; no norm prologue) under the current level: 8, 10 or 16; 0 where a CUDA query fails.
int gemv_lane_loads(int N, int K, bool residual);

// Optional RMSNorm prologue: with weight set, the GEMV's input is weight * bf16(x * rsqrt(mean(x^2) + eps))
// rounded to bf16, i.e. the RMSNorm kernel's output for the one row x (rmsnorm.h; x's sum of squares is
// added in another order, so a normed element can differ from that kernel's in its last bit). Every block
// computes it into shared memory; K <= kGemvNormMaxK.
// Folded (weight unset, folded true): the norm weight is already folded into W's columns (W diag(weight), the
// fast engine's folded norms, model/qwen3_fast.h), so the GEMV reads x itself and scales each output sum by
// rsqrt(mean(x^2) + eps) before it rounds; each warp computes that factor from x on its own, with no block
// barrier and no shared memory.
struct GemvNorm {
  const __nv_bfloat16* weight = nullptr;  // [K]
  float eps = 1e-6f;
  bool folded = false;
};
constexpr int kGemvNormMaxK = 16384;

// x [K] and W [N, K] (row-contiguous) 16-byte aligned, K % 8 == 0; writes y[0 .. N-1] only.
cudaError_t gemv(const __nv_bfloat16* x, const __nv_bfloat16* W, __nv_bfloat16* y, int N, int K, cudaStream_t stream,
                 const GemvNorm& norm = {});

// The fused gate/up projection with its SwiGLU: act[n] = silu(g[n]) * u[n] for n < I, where g = W[:I] · x and
// u = W[I:2I] · x (W = [gate; up], [2I, K]). Rounds like gemv into a [2I] buffer followed by silu_mul
// (swiglu.h), so the result is bitwise that pair's, without the intermediate and one launch. Same
// requirements as gemv.
cudaError_t gemv_swiglu(const __nv_bfloat16* x, const __nv_bfloat16* W, __nv_bfloat16* act, int I, int K,
                        cudaStream_t stream, const GemvNorm& norm = {});

// The residual add after a projection: residual[n] = bf16(residual[n] + bf16(W[n] · x)), and the same value
// into tap[n] when tap is set (a tapped layer's hidden state). Bitwise gemv followed by ATen's bf16 add.
// Same requirements as gemv; residual must not overlap x.
cudaError_t gemv_residual(const __nv_bfloat16* x, const __nv_bfloat16* W, __nv_bfloat16* residual,
                          __nv_bfloat16* tap, int N, int K, cudaStream_t stream);

// Diagnostic (step_trace.h): the next gemv, gemv_swiglu or gemv_residual call on this thread writes its blocks' stamps
// into `stamps` (kStepTraceFields a block, rows for kGemvTraceBlocksPerSm blocks an SM) when the register GEMV runs it
// within those rows; the TMA GEMV ignores them. One call only: that call takes the pointer first, whatever it returns.
constexpr int kGemvTraceBlocksPerSm = 8;
void gemv_trace_next(unsigned long long* stamps);

}  // namespace specpress::kernels
