// gemm_small.cu — see gemm_small.h. A block owns 16 rows of W (outputs n0 .. n0 + 15) and splits K over its
// P warps (P = 12 when the N / 16 blocks fit in two 12-warp blocks per SM, else 8; never a function of M):
// warp w takes the steps w, w + P, ... of 128 k each. Lane (g = lane / 4, t = lane % 4) streams rows
// n0 + g and n0 + g + 8; in a step it loads the 16-byte chunks 4u + t (u = 0..3) of both rows, so each warp
// load instruction reads 64 contiguous bytes of 16 rows and a step 256 contiguous bytes of each row (8 loads
// in flight per lane). The k order inside a chunk pair is permuted identically for W and X (a sum does not
// care), so the two chunks of a lane are, word for word, the A fragment of two m16n8k16 steps without
// shuffles: A = {W[g] word j, W[g+8] word j, W[g] word j+1, W[g+8] word j+1}, B = {X[col] word j, word j+1}
// for j = 0, 2, where lane (g, t) supplies B column g (X row g, and g + 8 for the second 8-column tile, NT = 2
// when M > 8) from the same chunk t. X is read through L1 (__ldg): every block reads the same X, so blocks
// of an SM share it. The P warp partials meet in shared memory and are summed in warp order.
#include <algorithm>

#include "kernels/common.cuh"
#include "kernels/mma.cuh"
#include "kernels/gemm_small.h"

namespace specpress::kernels {
namespace {
using namespace detail;
// The K split of a block: kWideWarps warps when N is small (more loads in flight for the few blocks), else
// kWarps. Chosen from N and the SM count only, so no output's reduction order depends on M.
constexpr int kWarps = 8, kWideWarps = 12;
constexpr int kU = 4;                // chunks per row per lane per step (2 rows: 8 W loads in flight)
constexpr int kStepChunks = 4 * kU;  // 8-element chunks of a row a warp covers per step (128 k)
// Registers for two resident 12-warp blocks per SM (<= 85 a thread), which is also three 8-warp blocks.
constexpr int kMinBlocks = 2;

struct SmallArgs {
  const bf16* X = nullptr;
  int64_t ldx = 0;
  const bf16* W = nullptr;
  bf16* Y = nullptr;
  int64_t ldy = 0;
  int M = 0, N = 0, K = 0;
};


// NT: 8-column tiles of X^T (1: M <= 8, 2: M <= 16). Tile 0's instructions are the same for both, so the
// kernel choice does not change rows 0..7 either.
template <int NT>
__global__ void __launch_bounds__(kWideWarps * 32, kMinBlocks) gemm_small_kernel(SmallArgs a) {
  __shared__ float red[kWideWarps][4 * NT][32];  // [warp][fragment register][lane]: conflict-free both ways
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int N = a.N, K = a.K, M = a.M;
  const int n0 = blockIdx.x * 16;
  const int nvec = K / 8, steps = (nvec + kStepChunks - 1) / kStepChunks;
  // Rows past N re-read the last row (their outputs are not written).
  const bf16* w_lo = a.W + static_cast<int64_t>(min(n0 + g, N - 1)) * K;
  const bf16* w_hi = a.W + static_cast<int64_t>(min(n0 + g + 8, N - 1)) * K;
  // B columns: X row g (tile 0) and g + 8 (tile 1); a column past M is zero.
  const bool has0 = g < M, has1 = NT == 2 && g + 8 < M;
  const bf16* x0 = a.X + static_cast<int64_t>(has0 ? g : 0) * a.ldx;
  const bf16* x1 = a.X + static_cast<int64_t>(has1 ? g + 8 : 0) * a.ldx;
  // Weights never depend on earlier kernels: under PDL (launch.h) pull this warp's first step into L2 while
  // the kernel that produces X is still running.
  if (warp < steps) {
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int c = warp * kStepChunks + 4 * u + t;
      if (c < nvec) {
        prefetch_l2(w_lo + static_cast<int64_t>(c) * 8);
        prefetch_l2(w_hi + static_cast<int64_t>(c) * 8);
      }
    }
  }
  pdl_begin();
  float acc[NT][4];
#pragma unroll
  for (int i = 0; i < NT; ++i)
#pragma unroll
    for (int q = 0; q < 4; ++q) acc[i][q] = 0.f;
  const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
  for (int s = warp; s < steps; s += warps) {
    uint4 wl[kU], wh[kU], xa[kU], xb[kU];
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int c = s * kStepChunks + 4 * u + t;
      const bool ok = c < nvec;  // a chunk past K is zero in W and X alike
      wl[u] = ok ? ld_stream(w_lo + static_cast<int64_t>(c) * 8) : zero;
      wh[u] = ok ? ld_stream(w_hi + static_cast<int64_t>(c) * 8) : zero;
    }
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int c = s * kStepChunks + 4 * u + t;
      const bool ok = c < nvec;
      xa[u] = ok && has0 ? __ldg(reinterpret_cast<const uint4*>(x0 + static_cast<int64_t>(c) * 8)) : zero;
      if constexpr (NT == 2)
        xb[u] = ok && has1 ? __ldg(reinterpret_cast<const uint4*>(x1 + static_cast<int64_t>(c) * 8)) : zero;
    }
#pragma unroll
    for (int u = 0; u < kU; ++u)
#pragma unroll
      for (int j = 0; j < 4; j += 2) {
        const uint32_t a0 = word(wl[u], j), a1 = word(wh[u], j), a2 = word(wl[u], j + 1), a3 = word(wh[u], j + 1);
        mma_bf16(acc[0], a0, a1, a2, a3, word(xa[u], j), word(xa[u], j + 1));
        if constexpr (NT == 2) mma_bf16(acc[1], a0, a1, a2, a3, word(xb[u], j), word(xb[u], j + 1));
      }
  }
#pragma unroll
  for (int i = 0; i < NT; ++i)
#pragma unroll
    for (int q = 0; q < 4; ++q) red[warp][4 * i + q][lane] = acc[i][q];
  __syncthreads();
  // Thread (warp r, lane) sums fragment register r of `lane` over the warps, in warp order. Register
  // 4i + q of lane (g, t): W row n0 + g + 8 (q / 2), X row 8i + 2t + q % 2.
  const int r = warp;
  if (r < 4 * NT) {
    float sum = red[0][r][lane];
    for (int w = 1; w < warps; ++w) sum += red[w][r][lane];
    const int m = 8 * (r >> 2) + 2 * t + (r & 1), n = n0 + g + 8 * ((r >> 1) & 1);
    if (m < M && n < N) a.Y[static_cast<int64_t>(m) * a.ldy + n] = to_b(sum);
  }
}

// Warps a block for N outputs: 12 when the N / 16 blocks all fit at two per SM, else 8. Depends on N and
// the device only (never on M), so every M rounds an output the same way.
cudaError_t warps_for(int N, int& warps) {
  int sms = 0;
  cudaError_t e = sm_count(sms);
  if (e != cudaSuccess) return e;
  warps = (N + 15) / 16 <= 2 * sms ? kWideWarps : kWarps;
  return cudaSuccess;
}

}  // namespace

cudaError_t gemm_small(const __nv_bfloat16* X, int64_t ldx, const __nv_bfloat16* W, __nv_bfloat16* Y, int64_t ldy,
                       int M, int N, int K, cudaStream_t stream) {
  if (M <= 0 || N <= 0) return cudaSuccess;
  if (M > 16 || K <= 0 || K % 8 != 0 || X == nullptr || W == nullptr || Y == nullptr ||
      (M > 1 && (ldx % 8 != 0 || ldx < K)) || (M > 1 && ldy < N) || reinterpret_cast<uintptr_t>(X) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(W) % 16 != 0)
    return cudaErrorInvalidValue;
  SmallArgs a;
  a.X = X;
  a.ldx = ldx;
  a.W = W;
  a.Y = Y;
  a.ldy = ldy;
  a.M = M;
  a.N = N;
  a.K = K;
  int warps = kWarps;
  cudaError_t e = warps_for(N, warps);
  if (e != cudaSuccess) return e;
  const int blocks = (N + 15) / 16;
  if (M > 8) return launch_kernel(gemm_small_kernel<2>, blocks, warps * 32, 0, stream, a);
  return launch_kernel(gemm_small_kernel<1>, blocks, warps * 32, 0, stream, a);
}

}  // namespace specpress::kernels
