// rmsnorm_row.cuh — the RMSNorm of one row by one block of kRmsThreads threads (rmsnorm.h has the
// arguments), shared by the RMSNorm kernel (rmsnorm.cu) and the GEMV's norm epilogue (gemv.cu), so both
// round identically. Each thread keeps its (up to 4) 8-element vectors of the row in registers between the
// sum-of-squares pass and the output pass. kFreshX: read a.x through L2 only (__ldcg), for an x written
// by other blocks of the same kernel.
#pragma once
#include "kernels/common.cuh"
#include "kernels/rmsnorm.h"

namespace specpress::kernels::detail {

constexpr int kRmsThreads = 256, kRmsMaxVec = 4;  // H <= 256 * 4 * 8

template <bool kFreshX>
__device__ __forceinline__ void rmsnorm_row(const RmsNormArgs& a, int row, float* scratch /* 32 floats */) {
  const int64_t off = static_cast<int64_t>(row) * a.H;
  float v[kRmsMaxVec][8];
  float ss = 0.f;
#pragma unroll
  for (int i = 0; i < kRmsMaxVec; ++i) {
    const int c = (threadIdx.x + i * kRmsThreads) * 8;
    if (c < a.H) {
      if constexpr (kFreshX) {
        const uint4 u = __ldcg(reinterpret_cast<const uint4*>(a.x + off + c));
        const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const float2 t = __bfloat1622float2(h[j]);
          v[i][2 * j] = t.x;
          v[i][2 * j + 1] = t.y;
        }
      } else {
        load8(a.x + off + c, v[i]);
      }
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
  for (int i = 0; i < kRmsMaxVec; ++i) {
    const int c = (threadIdx.x + i * kRmsThreads) * 8;
    if (c < a.H) {
      float w[8], o[8];
      load8(a.weight + c, w);
#pragma unroll
      for (int e = 0; e < 8; ++e) o[e] = w[e] * round_b(v[i][e] * rs);
      store8(a.y + off + c, o);
    }
  }
}

}  // namespace specpress::kernels::detail
