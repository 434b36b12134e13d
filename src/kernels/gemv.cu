// gemv.cu — see gemv.h. Warp w owns rows [w * per_warp * ROWS, ...) in units of ROWS rows (1, 2 or 4;
// more for large N, to reuse each x load across rows). Per step a lane loads U = 8 / ROWS 16-byte chunks of
// each of its ROWS rows (8 W loads in flight per lane) and the matching chunks of x (through L1, which
// holds x for every warp of the SM), then accumulates the 8-element dot products in fp32; a warp sum per
// row at the end. The grid is at most the number of warps the GPU holds at once. Epilogues: plain (y = the
// sums), SwiGLU (gemv_swiglu: a unit pairs gate row n with up row I + n) and RMSNorm (gemv_rmsnorm: the
// last block to finish, found with a threadfence counter, normalises the whole of y with rmsnorm_row).
#include <algorithm>

#include "kernels/common.cuh"
#include "kernels/gemv.h"
#include "kernels/rmsnorm_row.cuh"

namespace specpress::kernels {
namespace {
using namespace detail;
constexpr int kLoads = 8, kResidentWarps = 32;  // per SM: <= 64 registers a thread
enum Epilogue { kPlain = 0, kSwiglu = 1, kNorm = 2 };
// 4 warps a block; 8 with the norm epilogue, whose last block runs rmsnorm_row (kRmsThreads threads).
__host__ __device__ constexpr int warps_of(int epi) { return epi == kNorm ? kRmsThreads / 32 : 4; }

struct GemvArgs {
  const bf16* x = nullptr;
  const bf16* W = nullptr;
  bf16* y = nullptr;
  int N = 0, K = 0;           // outputs (kSwiglu: I, W has 2I rows), K % 8 == 0
  int units_per_warp = 1;
  RmsNormArgs norm;            // kNorm: x = y, rows 1, H = N
  unsigned int* counter = nullptr;  // kNorm: zeroed; left zeroed
};

// A streamed weight chunk: read once, so no L1 allocation; the L2 prefetches the following 256 bytes.
__device__ __forceinline__ uint4 ld_stream(const bf16* p) {
  uint4 v;
  // volatile: never speculated out of the bounds check around it (a chunk past K may be past W's end)
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];\n"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

__device__ __forceinline__ void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p)); }

// bf16 pair in a 32-bit word -> two floats (bf16 is the top half of an fp32).
__device__ __forceinline__ float lo_f(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float hi_f(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }

__device__ __forceinline__ float dot8(const uint4& w, const float* x, float acc) {
  acc = fmaf(lo_f(w.x), x[0], acc);
  acc = fmaf(hi_f(w.x), x[1], acc);
  acc = fmaf(lo_f(w.y), x[2], acc);
  acc = fmaf(hi_f(w.y), x[3], acc);
  acc = fmaf(lo_f(w.z), x[4], acc);
  acc = fmaf(hi_f(w.z), x[5], acc);
  acc = fmaf(lo_f(w.w), x[6], acc);
  acc = fmaf(hi_f(w.w), x[7], acc);
  return acc;
}

// ROWS rows of W per unit. Plain / norm: output n is row n. kSwiglu (the fused gate/up projection,
// W = [gate; up] with N = I outputs): a unit is OUT = ROWS / 2 outputs n0.., and its rows are gate rows
// n0.. then up rows I + n0... A row's sum does not depend on ROWS, the epilogue or the rows beside it (each
// lane walks its chunks in the same order, and the xor-butterfly sum is the same in every lane), so every
// variant rounds a product exactly as the plain ROWS = 1 kernel does.
template <int ROWS, int EPI>
__global__ void __launch_bounds__(warps_of(EPI) * 32, kResidentWarps / warps_of(EPI)) gemv_kernel(GemvArgs a) {
  constexpr int U = kLoads / ROWS, OUT = EPI == kSwiglu ? ROWS / 2 : ROWS, WARPS = warps_of(EPI);
  static_assert(EPI != kSwiglu || ROWS % 2 == 0, "a SwiGLU unit pairs gate and up rows");
  const int lane = threadIdx.x & 31;
  const int warp = blockIdx.x * WARPS + (threadIdx.x >> 5);
  const int N = a.N, K = a.K;
  const int units = (N + OUT - 1) / OUT, nvec = K / 8;
  const uint4* xv = reinterpret_cast<const uint4*>(a.x);
  const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
  // Row r of the unit with outputs n0..: past the last output it re-reads the last row (not written).
  auto row_of = [&](int n0, int r) {
    const int n = min(n0 + (EPI == kSwiglu ? r % OUT : r), N - 1);
    return a.W + (static_cast<int64_t>(n) + (EPI == kSwiglu && r >= OUT ? N : 0)) * K;
  };
  const int u_beg = warp * a.units_per_warp, u_end = min(units, u_beg + a.units_per_warp);
  // Weights never depend on earlier kernels: under PDL (launch.h) start pulling this warp's first batch
  // into L2 while the kernel that produces x is still running.
  if (u_beg < u_end) {
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      const bf16* row = row_of(u_beg * OUT, r);
#pragma unroll
      for (int u = 0; u < U; ++u)
        if (lane + 32 * u < nvec) prefetch_l2(row + static_cast<int64_t>(lane + 32 * u) * 8);
    }
  }
  pdl_begin();
  for (int unit = u_beg; unit < u_end; ++unit) {
    const int n0 = unit * OUT;
    const bf16* w[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) w[r] = row_of(n0, r);
    float acc[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) acc[r] = 0.f;
    for (int c0 = lane; c0 < nvec; c0 += 32 * U) {
      uint4 wv[U][ROWS], xc[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int c = c0 + 32 * u;
        const bool ok = c < nvec;
#pragma unroll
        for (int r = 0; r < ROWS; ++r) wv[u][r] = ok ? ld_stream(w[r] + static_cast<int64_t>(c) * 8) : zero;
        xc[u] = ok ? __ldg(xv + c) : zero;
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        float xf[8];
        xf[0] = lo_f(xc[u].x);
        xf[1] = hi_f(xc[u].x);
        xf[2] = lo_f(xc[u].y);
        xf[3] = hi_f(xc[u].y);
        xf[4] = lo_f(xc[u].z);
        xf[5] = hi_f(xc[u].z);
        xf[6] = lo_f(xc[u].w);
        xf[7] = hi_f(xc[u].w);
#pragma unroll
        for (int r = 0; r < ROWS; ++r) acc[r] = dot8(wv[u][r], xf, acc[r]);
      }
    }
    float sum[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) sum[r] = warp_sum(acc[r]);
#pragma unroll
    for (int o = 0; o < OUT; ++o) {
      if (lane != o || n0 + o >= N) continue;
      if constexpr (EPI == kSwiglu) {
        // as gemv + silu_mul: both products rounded to bf16, silu rounded, the product rounded on store
        const float g = round_b(sum[o]), u = round_b(sum[o + OUT]);
        a.y[n0 + o] = to_b(round_b(g / (1.f + expf(-g))) * u);
      } else {
        a.y[n0 + o] = to_b(sum[o]);
      }
    }
  }
  if constexpr (EPI == kNorm) {
    // The last block to finish normalises y (all of it written and fenced by then), as the RMSNorm kernel
    // would, then re-zeroes the counter.
    __shared__ float scratch[32];
    __shared__ int is_last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) is_last = atomicAdd(a.counter, 1u) == gridDim.x - 1;
    __syncthreads();
    if (!is_last) return;
    __threadfence();
    rmsnorm_row<true>(a.norm, 0, scratch);
    if (threadIdx.x == 0) *a.counter = 0u;
  }
}

struct Plan {
  int resident_warps = 0;  // warps of this kernel the GPU holds at once
};

template <int ROWS, int EPI> cudaError_t plan_of(Plan& p) {
  static Plan cached;
  static bool ready = false;
  if (!ready) {
    int dev = 0, sms = 0, blocks = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    if (e == cudaSuccess)
      e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, gemv_kernel<ROWS, EPI>, warps_of(EPI) * 32, 0);
    if (e != cudaSuccess) return e;
    cached.resident_warps = std::max(1, sms * std::max(1, blocks) * warps_of(EPI));
    ready = true;
  }
  p = cached;
  return cudaSuccess;
}

// One wave: the units split evenly over at most the resident warps.
template <int ROWS, int EPI> cudaError_t launch(GemvArgs a, cudaStream_t stream) {
  Plan p;
  cudaError_t e = plan_of<ROWS, EPI>(p);
  if (e != cudaSuccess) return e;
  constexpr int OUT = EPI == kSwiglu ? ROWS / 2 : ROWS, WARPS = warps_of(EPI);
  const int units = (a.N + OUT - 1) / OUT;
  a.units_per_warp = (units + p.resident_warps - 1) / p.resident_warps;
  const int warps = (units + a.units_per_warp - 1) / a.units_per_warp;
  return launch_kernel(gemv_kernel<ROWS, EPI>, (warps + WARPS - 1) / WARPS, WARPS * 32, 0, stream, a);
}

// Rows per unit: 4 (or 2) when N has that many rows for every resident warp, else 1, so that the small
// projections still spread over the whole GPU.
template <int EPI> cudaError_t launch_any_rows(const GemvArgs& a, cudaStream_t stream) {
  Plan p;
  cudaError_t e = plan_of<1, EPI>(p);
  if (e != cudaSuccess) return e;
  if (a.N >= 4 * p.resident_warps) return launch<4, EPI>(a, stream);
  if (a.N >= 2 * p.resident_warps) return launch<2, EPI>(a, stream);
  return launch<1, EPI>(a, stream);
}

GemvArgs args_of(const bf16* x, const bf16* W, bf16* y, int N, int K) {
  GemvArgs a;
  a.x = x;
  a.W = W;
  a.y = y;
  a.N = N;
  a.K = K;
  return a;
}

bool valid(const bf16* x, const bf16* W, const bf16* y, int K) {
  return K > 0 && K % 8 == 0 && x != nullptr && W != nullptr && y != nullptr &&
         reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(W) % 16 == 0;
}

}  // namespace

cudaError_t gemv(const __nv_bfloat16* x, const __nv_bfloat16* W, __nv_bfloat16* y, int N, int K, cudaStream_t stream) {
  if (N <= 0) return cudaSuccess;
  if (!valid(x, W, y, K)) return cudaErrorInvalidValue;
  return launch_any_rows<kPlain>(args_of(x, W, y, N, K), stream);
}

cudaError_t gemv_swiglu(const __nv_bfloat16* x, const __nv_bfloat16* W, __nv_bfloat16* act, int I, int K,
                        cudaStream_t stream) {
  if (I <= 0) return cudaSuccess;
  if (!valid(x, W, act, K)) return cudaErrorInvalidValue;
  const GemvArgs a = args_of(x, W, act, I, K);
  Plan p;
  cudaError_t e = plan_of<2, kSwiglu>(p);
  if (e != cudaSuccess) return e;
  if (I >= 2 * p.resident_warps) return launch<4, kSwiglu>(a, stream);  // 2 outputs (4 rows) per unit
  return launch<2, kSwiglu>(a, stream);
}

cudaError_t gemv_rmsnorm(const __nv_bfloat16* x, const __nv_bfloat16* W, __nv_bfloat16* y, int N, int K,
                         const RmsNormArgs& norm, unsigned int* counter, cudaStream_t stream) {
  if (N <= 0) return cudaSuccess;
  if (!valid(x, W, y, K) || counter == nullptr || norm.x != y || norm.rows != 1 || norm.H != N || N % 8 != 0 ||
      N > kRmsThreads * kRmsMaxVec * 8 || reinterpret_cast<uintptr_t>(y) % 16 != 0 || norm.weight == nullptr ||
      norm.y == nullptr || (norm.sum_out2 != nullptr && norm.residual == nullptr))
    return cudaErrorInvalidValue;
  GemvArgs a = args_of(x, W, y, N, K);
  a.norm = norm;
  a.counter = counter;
  return launch_any_rows<kNorm>(a, stream);
}

}  // namespace specpress::kernels
