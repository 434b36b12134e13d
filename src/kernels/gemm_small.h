// gemm_small.h — Y[M, N] = X[M, K] · W[N, K]^T for 1 <= M <= 16 rows (bf16 in and out, fp32 accumulation,
// torch-free): the verify (M = 16 tokens) and draft matmuls, which, like the M = 1 GEMV (gemv.h), are bound
// by reading W once. W is streamed as in the GEMV (16-byte non-allocating loads, 8 in flight per lane), and
// each loaded W fragment is applied to all M rows of X by tensor-core mma.sync m16n8k16: W is the 16-row A
// operand, X^T the 8-column B operand (one of them for M <= 8, two for M <= 16). A block is 16 rows of W and
// 8 warps that split K (12 when N is small: the N / 16 blocks fit at 2 per SM, N <= 4224 on 132 SMs), and the
// registers allow 3 blocks of 8 warps per SM (N up to 6336 in one wave on 132 SMs; more N, more waves).
//
// Measured speed (docs/PERF.md, H200): 44-79% of the copy bandwidth at M = 16 on the Qwen3 projections,
// below cuBLAS (48-97%) and the M = 1 GEMV (67-99%); it stays an opt-in mode. The design aimed at the
// GEMV's stream (64 contiguous bytes of 16 rows per warp load, 8 loads in flight per lane, up to 24 warps an
// SM). The cost the GEMV does not have is X: each block reads all of X (M x K bf16, up to 384 KB) through
// L1, as many load instructions as W's (docs/PERF.md, fifth pass, measures what that costs).
//
// Why tensor cores, not fp32 FMAs: at M = 16 each bf16 weight (2 bytes) needs 16 FMAs, i.e. 8 FMAs a byte.
// The H200 issues one warp instruction a clock per SM sub-partition, 132 x 4 x 32 lanes x ~1.9 GHz = ~32e12
// FFMA/s if nothing else issued, against ~4.2e12 B/s x 8 = ~34e12 FMA/s needed at the copy bandwidth: the
// FMA pipe alone would cap the kernel at about the copy bandwidth with zero overhead, and the bf16->fp32
// conversions and X operand loads (another ~12% of issue slots) push it to ~75% at best, no better than
// cuBLAS at M = 16 (71%). Packed bf16x2 HFMA2 would halve that but accumulates in bf16. One m16n8k16 does
// 2048 FMAs per warp instruction, so the tensor pipe is ~5% busy and the kernel stays memory bound.
//
// Batch invariance: every output Y[m, n] is computed by the same instructions in the same order whatever M
// is and whatever the other rows of X hold: K is split over the warps of a block, 8 or 12 chosen from N and
// the SM count only (never from M); each warp chains its mma steps over K in a fixed order; a column of an
// mma result depends only on its own column of B (X row m) and of the accumulator; rows past M are zero
// columns; and the warp partials are summed in warp order. So row r of an M-row product is bitwise the
// 1-row product gemm_small(M = 1) of that row. It is NOT bitwise the GEMV's (gemv.h) result: the GEMV sums
// sequential fp32 FMAs per lane (K strided over 32 lanes) and then a warp butterfly, while the tensor core
// adds each 16-term product block with its own internal alignment and rounding, which CUDA-core code cannot
// reproduce (and the FMA route that could match the GEMV is the slow one above). Bitwise DFlash == plain
// decoding therefore needs decode to run its M = 1 matmuls through this kernel too (GemmMode::kStreamAll in
// aten_ops.h), giving up the GEMV's fused RMSNorm prologue and SwiGLU / residual epilogues.
// Reference twin: at::linear (kernels::gemm_small_out in aten_ops.h).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace specpress::kernels {

// X rows with stride ldx, Y rows with stride ldy (elements). 1 <= M <= 16 (M <= 0 or N <= 0: nothing to do),
// K % 8 == 0, ldx % 8 == 0, X and W 16-byte aligned, W row-contiguous [N, K]. Writes Y[m, n] for m < M, n < N
// only (odd N is fine). cudaErrorInvalidValue on anything else.
cudaError_t gemm_small(const __nv_bfloat16* X, int64_t ldx, const __nv_bfloat16* W, __nv_bfloat16* Y, int64_t ldy,
                       int M, int N, int K, cudaStream_t stream);

}  // namespace specpress::kernels
