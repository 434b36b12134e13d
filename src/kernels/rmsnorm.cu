// rmsnorm.cu — see rmsnorm.h. rmsnorm: one block per row; row_rms: one warp per row.
#include "kernels/common.cuh"
#include "kernels/rmsnorm.h"

namespace specpress::kernels {
namespace {
using namespace detail;
constexpr int kThreads = 256, kMaxVec = 4;  // H <= 256 * 4 * 8

// One row by one block of kThreads threads. Each thread keeps its (up to 4) 8-element vectors of the row in
// registers between the sum-of-squares pass and the output pass. The weight is constant: its vectors are loaded
// before the PDL wait, so that the output pass does not wait on them after the sum. And the next kernel may launch
// before that wait: in the draft's chain (wgmma product, norm, wgmma product) the next product then fills its ring
// beside the product before the norm, as the products' own early trigger lets it where no norm lies between them
// (gemm_wg16.h); it still waits for this kernel's completion, which follows the previous kernel's. Each took the 4B
// draft step 4 us faster (docs/PERF.md, forty-seventh pass).
__global__ void __launch_bounds__(kThreads) rmsnorm_kernel(RmsNormArgs a) {
  __shared__ float scratch[32];
  float w[kMaxVec][8];
#pragma unroll
  for (int i = 0; i < kMaxVec; ++i) {
    const int c = (threadIdx.x + i * kThreads) * 8;
    if (c < a.H) load8(a.weight + c, w[i]);
  }
  pdl_trigger();
  pdl_wait();
  const int row = blockIdx.x;
  const int64_t off = static_cast<int64_t>(row) * a.H;
  float v[kMaxVec][8];
  float ss = 0.f;
#pragma unroll
  for (int i = 0; i < kMaxVec; ++i) {
    const int c = (threadIdx.x + i * kThreads) * 8;
    if (c < a.H) {
      load8(a.x + off + c, v[i]);
      if (a.residual != nullptr) {
        float r[8];
        load8(a.residual + off + c, r);
#pragma unroll
        for (int e = 0; e < 8; ++e) v[i][e] = round_b(v[i][e] + r[e]);
        if (a.sum_out != nullptr) store8(a.sum_out + off + c, v[i]);
        if (a.sum_out2 != nullptr) store8(a.sum_out2 + static_cast<int64_t>(row) * a.ld_sum_out2 + c, v[i]);
      }
#pragma unroll
      for (int e = 0; e < 8; ++e) ss += v[i][e] * v[i][e];
    }
  }
  const float total = block_sum(ss, scratch);
  const float rs = rsqrtf(total / static_cast<float>(a.H) + a.eps);
#pragma unroll
  for (int i = 0; i < kMaxVec; ++i) {
    const int c = (threadIdx.x + i * kThreads) * 8;
    if (c < a.H) {
      float o[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) o[e] = w[i][e] * round_b(v[i][e] * rs);
      store8(a.y + off + c, o);
    }
  }
}

constexpr int kRowRmsWarps = 4;

// One row by one warp: the sum of squares in the order of rmsnorm_kernel's threads is not needed (the factor is
// an fp32 scalar either way), so each lane sums its 16-byte chunks and the warp reduces.
__global__ void __launch_bounds__(kRowRmsWarps * 32) row_rms_kernel(RowRmsArgs a) {
  pdl_begin();
  const int row = blockIdx.x * kRowRmsWarps + (threadIdx.x >> 5), lane = threadIdx.x & 31;
  if (row >= a.rows) return;
  const bf16* x = a.x + static_cast<int64_t>(row) * a.H;
  float ss = 0.f;
  for (int c = lane * 8; c < a.H; c += 32 * 8) {
    const uint4 u = *reinterpret_cast<const uint4*>(x + c);
    if (a.tap != nullptr) *reinterpret_cast<uint4*>(a.tap + static_cast<int64_t>(row) * a.ld_tap + c) = u;
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 t = __bfloat1622float2(h[i]);
      ss += t.x * t.x + t.y * t.y;
    }
  }
  ss = warp_sum(ss);
  if (lane == 0) a.rs[row] = rsqrtf(ss / static_cast<float>(a.H) + a.eps);
}

}  // namespace

cudaError_t row_rms(const RowRmsArgs& a, cudaStream_t stream) {
  if (a.rows <= 0) return cudaSuccess;
  if (a.H <= 0 || a.H % 8 != 0 || a.x == nullptr || a.rs == nullptr || reinterpret_cast<uintptr_t>(a.x) % 16 != 0 ||
      (a.tap != nullptr && (a.ld_tap < a.H || a.ld_tap % 8 != 0 || reinterpret_cast<uintptr_t>(a.tap) % 16 != 0)))
    return cudaErrorInvalidValue;
  const LcSkipScope lc(kLcRowRms);
  return launch_kernel(row_rms_kernel, (a.rows + kRowRmsWarps - 1) / kRowRmsWarps, kRowRmsWarps * 32, 0, stream, a);
}

bool kernels_run_on_current_device() {
  cudaFuncAttributes attributes{};
  const bool ok = cudaFuncGetAttributes(&attributes, rmsnorm_kernel) == cudaSuccess;
  if (!ok) (void)cudaGetLastError();  // a missing image's error is not left for the next launch check
  return ok;
}

cudaError_t rmsnorm(const RmsNormArgs& a, cudaStream_t stream) {
  if (a.rows <= 0) return cudaSuccess;
  if (a.H <= 0 || a.H % 8 != 0 || a.H > kThreads * kMaxVec * 8 || a.x == nullptr || a.weight == nullptr ||
      a.y == nullptr || (a.sum_out2 != nullptr && a.residual == nullptr))
    return cudaErrorInvalidValue;
  const LcSkipScope lc(kLcRmsnorm);
  return launch_kernel(rmsnorm_kernel, a.rows, kThreads, 0, stream, a);
}

}  // namespace specpress::kernels
