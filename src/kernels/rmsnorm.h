// rmsnorm.h — fused residual add + RMSNorm (bf16, torch-free). Reference twin: ops::rms_norm, with the
// residual add as ATen's bf16 `x + residual`. Also row_rms, the row factor of an RMSNorm whose weight is folded
// into the next matmul (twin: rsqrt(mean(x^2) + eps) in float64, tests/gpu).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace specpress::kernels {

struct RmsNormArgs {
  const __nv_bfloat16* x = nullptr;         // [rows, H], row stride H
  const __nv_bfloat16* residual = nullptr;  // optional [rows, H]: the input is x + residual (rounded to bf16)
  __nv_bfloat16* sum_out = nullptr;         // optional [rows, H]: receives x + residual (may alias residual or x)
  __nv_bfloat16* sum_out2 = nullptr;        // optional second copy of the sum, row stride ld_sum_out2 (taps)
  int64_t ld_sum_out2 = 0;
  const __nv_bfloat16* weight = nullptr;    // [H], constant: read before the PDL wait (launch.h)
  __nv_bfloat16* y = nullptr;               // [rows, H]: weight * bf16(sum * rsqrt(mean(sum^2) + eps))
  int rows = 0, H = 0;                      // H % 8 == 0, H <= 8192
  float eps = 1e-6f;
};

cudaError_t rmsnorm(const RmsNormArgs& a, cudaStream_t stream);

// The per-row factor of an RMSNorm whose weight is folded into the next matmul (FastEngine with folded norms):
// rs[r] = rsqrt(mean(x[r]^2) + eps) in fp32, the factor rmsnorm applies, so that rmsnorm(x) · W^T =
// rs[r] · (x · (W diag(weight))^T). Optionally copies x to `tap` (the DFlash taps). One warp a row; the engine
// runs it on a side stream, beside the matmul that reads the same x.
struct RowRmsArgs {
  const __nv_bfloat16* x = nullptr;  // [rows, H], row stride H
  float* rs = nullptr;               // [rows]
  __nv_bfloat16* tap = nullptr;      // optional [rows, H] copy of x, row stride ld_tap (% 8 == 0)
  int64_t ld_tap = 0;
  int rows = 0, H = 0;               // H % 8 == 0; x and tap 16-byte aligned
  float eps = 1e-6f;
};

cudaError_t row_rms(const RowRmsArgs& a, cudaStream_t stream);

// Whether this build has code for the current device's GPU, judged by the RMSNorm kernel's attributes there: the
// kernels are compiled for CMAKE_CUDA_ARCHITECTURES only (default 90a, Hopper), so on another GPU the fast path does
// not apply (model::fast_path_supported, under a device guard for the model's GPU) and the reference path runs.
bool kernels_run_on_current_device();

}  // namespace specpress::kernels
