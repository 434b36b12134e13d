// skinny_gemm.cu — see skinny_gemm.h. Lane (g = lane / 4, c = lane % 4) loads 8 consecutive k of W row
// n0 + g; the k order inside each 32-wide chunk is permuted identically for X and W (a sum does not care),
// so one 16-byte load of W feeds two m16n8k16 steps as their B fragments without shuffles.
#include "kernels/common.cuh"
#include "kernels/mma.cuh"
#include "kernels/skinny_gemm.h"

namespace specpress::kernels {
namespace {
using namespace detail;
constexpr int kWarps = 8, kUnroll = 4;


__global__ void __launch_bounds__(kWarps * 32) skinny_gemm_kernel(const bf16* X, int64_t ldx, const bf16* W, bf16* Y,
                                                                  int64_t ldy, int M, int N, int K) {
  pdl_begin();
  __shared__ float red[kWarps][32][4];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, c = lane & 3;
  const int n0 = blockIdx.x * 8;
  const int n = min(n0 + g, N - 1);
  const bf16* w_row = W + static_cast<int64_t>(n) * K + c * 8;
  const bool lo = g < M, hi = g + 8 < M;
  const bf16* x_lo = X + static_cast<int64_t>(lo ? g : 0) * ldx + c * 8;
  const bf16* x_hi = X + static_cast<int64_t>(hi ? g + 8 : 0) * ldx + c * 8;
  const int chunks = K / 32, per = (chunks + kWarps - 1) / kWarps;
  const int cb = warp * per, ce = min(chunks, cb + per);
  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  const uint4 zero = make_uint4(0, 0, 0, 0);
  for (int ch = cb; ch < ce; ch += kUnroll) {
    uint4 wv[kUnroll], xl[kUnroll], xh[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int k = (ch + u) * 32;
      const bool ok = ch + u < ce;
      wv[u] = ok ? __ldg(reinterpret_cast<const uint4*>(w_row + k)) : zero;
      xl[u] = ok && lo ? *reinterpret_cast<const uint4*>(x_lo + k) : zero;
      xh[u] = ok && hi ? *reinterpret_cast<const uint4*>(x_hi + k) : zero;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
#pragma unroll
      for (int s = 0; s < 2; ++s)
        mma_bf16(acc, word(xl[u], 2 * s), word(xh[u], 2 * s), word(xl[u], 2 * s + 1), word(xh[u], 2 * s + 1),
                 word(wv[u], 2 * s), word(wv[u], 2 * s + 1));
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) red[warp][lane][i] = acc[i];
  __syncthreads();
  if (warp == 0) {
    float s[4] = {0.f, 0.f, 0.f, 0.f};
    for (int w = 0; w < kWarps; ++w)
#pragma unroll
      for (int i = 0; i < 4; ++i) s[i] += red[w][lane][i];
    const int col = n0 + 2 * c;
    // c0, c1: row g, columns col, col + 1; c2, c3: row g + 8
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = g + 8 * h;
      if (row >= M) continue;
      bf16* y = Y + static_cast<int64_t>(row) * ldy;
      if (col < N) y[col] = to_b(s[2 * h]);
      if (col + 1 < N) y[col + 1] = to_b(s[2 * h + 1]);
    }
  }
}

}  // namespace

cudaError_t skinny_gemm(const __nv_bfloat16* X, int64_t ldx, const __nv_bfloat16* W, __nv_bfloat16* Y, int64_t ldy,
                        int M, int N, int K, cudaStream_t stream) {
  if (M <= 0 || N <= 0) return cudaSuccess;
  if (M > 16 || K <= 0 || K % 32 != 0 || ldx % 8 != 0 || (reinterpret_cast<uintptr_t>(X) % 16) != 0 ||
      (reinterpret_cast<uintptr_t>(W) % 16) != 0)
    return cudaErrorInvalidValue;
  return launch_kernel(skinny_gemm_kernel, (N + 7) / 8, kWarps * 32, 0, stream, X, ldx, W, Y, ldy, M, N, K);
}

}  // namespace specpress::kernels
