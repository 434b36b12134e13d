// swiglu.cu — see swiglu.h. 8 elements per thread through 16-byte accesses (inter % 8 == 0).
#include "kernels/common.cuh"
#include "kernels/swiglu.h"

namespace specpress::kernels {
namespace {
using namespace detail;

__global__ void silu_mul_kernel(const bf16* gate_up, bf16* out, int rows, int inter, const float* row_scale) {
  pdl_begin();
  const int vec_per_row = inter / 8;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= static_cast<int64_t>(rows) * vec_per_row) return;
  const int64_t row = idx / vec_per_row;
  const int c = static_cast<int>(idx % vec_per_row) * 8;
  float g[8], u[8], o[8];
  load8(gate_up + row * 2 * inter + c, g);
  load8(gate_up + row * 2 * inter + inter + c, u);
  if (row_scale != nullptr) {
    const float f = row_scale[row];
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      g[e] = round_b(g[e] * f);
      u[e] = round_b(u[e] * f);
    }
  }
#pragma unroll
  for (int e = 0; e < 8; ++e) o[e] = round_b(g[e] / (1.f + expf(-g[e]))) * u[e];
  store8(out + row * inter + c, o);
}

}  // namespace

cudaError_t silu_mul(const __nv_bfloat16* gate_up, __nv_bfloat16* out, int rows, int inter, cudaStream_t stream,
                     const float* row_scale) {
  if (rows <= 0) return cudaSuccess;
  if (inter <= 0 || inter % 8 != 0 || gate_up == nullptr || out == nullptr) return cudaErrorInvalidValue;
  const int64_t n = static_cast<int64_t>(rows) * (inter / 8);
  const int threads = 256;
  const LcSkipScope lc(kLcSiluMul);
  return launch_kernel(silu_mul_kernel, static_cast<unsigned>((n + threads - 1) / threads), threads, 0, stream, gate_up,
                       out, rows, inter, row_scale);
}

}  // namespace specpress::kernels
