// gemv.h — y[N] = W[N, K] · x[K], the one-row matmul of the plain decode step (M = 1: QKV, o, gate/up,
// down, LM head), bf16 in and out, fp32 accumulation, torch-free. At M = 1 a matmul only has to read W
// once, so this is a stream of W tuned for HBM bandwidth rather than a tensor-core GEMM: each warp owns
// consecutive rows, reads them with 16-byte loads (one warp instruction = 512 contiguous bytes of a row)
// that bypass L1, and keeps 8 of them per lane in flight; the grid is one wave of resident warps with
// the rows split evenly between them, so no SM waits on a straggling tail of blocks. Reference twin:
// at::linear (kernels::gemv_out in aten_ops.h). Used by linear_out for M = 1 in the default matmul mode.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels/rmsnorm.h"

namespace specpress::kernels {

// x [K] and W [N, K] (row-contiguous) 16-byte aligned, K % 8 == 0; writes y[0 .. N-1] only.
cudaError_t gemv(const __nv_bfloat16* x, const __nv_bfloat16* W, __nv_bfloat16* y, int N, int K, cudaStream_t stream);

// The fused gate/up projection with its SwiGLU: act[n] = silu(g[n]) * u[n] for n < I, where g = W[:I] · x and
// u = W[I:2I] · x (W = [gate; up], [2I, K]). Rounds like gemv into a [2I] buffer followed by silu_mul
// (swiglu.h), so the result is bitwise that pair's, without the intermediate and one launch. Same
// requirements as gemv.
cudaError_t gemv_swiglu(const __nv_bfloat16* x, const __nv_bfloat16* W, __nv_bfloat16* act, int I, int K,
                        cudaStream_t stream);

// y = W · x followed by the RMSNorm `norm` of y (norm.x == y, one row, H = N; with its residual add and sum
// outputs, rmsnorm.h): the layer's o and down projections with the residual RMSNorm after them, in one
// launch. The last block of the GEMV to finish (threadfence counter: `counter`, a zeroed uint it leaves
// zeroed) runs the RMSNorm kernel's own row code (rmsnorm_row.cuh), so it rounds as gemv followed by
// rmsnorm: the projection and the residual sum bitwise, the normed row from the same instructions.
// N % 8 == 0, N <= 8192, y 16-byte aligned; otherwise as gemv.
cudaError_t gemv_rmsnorm(const __nv_bfloat16* x, const __nv_bfloat16* W, __nv_bfloat16* y, int N, int K,
                         const RmsNormArgs& norm, unsigned int* counter, cudaStream_t stream);

}  // namespace specpress::kernels
