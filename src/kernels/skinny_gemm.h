// skinny_gemm.h — Y[M, N] = X[M, K] · W[N, K]^T for M <= 16 rows (bf16 in and out, fp32 accumulation,
// torch-free): the decode (M = 1), verify and draft (M = B) matmuls, which are bound by reading W once.
// Tensor-core mma.sync m16n8k16 with W streamed in 16-byte loads; each block owns 8 output columns and
// splits K over its 8 warps. The reduction order of an output element does not depend on M or on the
// other rows, so decode and verify round identically (batch-invariant). Reference twin: at::linear.
// Opt-in (SPECPRESS_GEMM=skinny): slower than cuBLAS at the Qwen3 shapes so far (docs/PERF.md).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace specpress::kernels {

// X rows with stride ldx, Y rows with stride ldy (elements); K % 32 == 0, 16-byte aligned rows.
cudaError_t skinny_gemm(const __nv_bfloat16* X, int64_t ldx, const __nv_bfloat16* W, __nv_bfloat16* Y, int64_t ldy,
                        int M, int N, int K, cudaStream_t stream);

}  // namespace specpress::kernels
