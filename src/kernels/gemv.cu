// gemv.cu — see gemv.h. Warp w owns rows [w * per_warp * ROWS, ...) in units of ROWS rows (1, 2 or 4; more for
// large N, to reuse each x load across rows, or for fewer serial steps a warp: launch_any_rows). Per step a lane
// loads U = 8 / ROWS 16-byte chunks of each of its ROWS rows (8 W loads in flight per lane) and the matching chunks
// of x (through L1, which holds x for every warp of the SM), then accumulates the 8-element dot products in fp32; a
// warp sum per row at the end. The grid is at most the number of warps the GPU holds at once. Epilogues: plain (y =
// the sums), SwiGLU (gemv_swiglu: a unit pairs gate row n with up row I + n) and residual (gemv_residual: y[n] +=
// the sum, in place, by the one lane that owns n). Prologue (NORM): the block normalises x into shared memory first
// (its weights already on their way into L2), and the loop reads x from there. A folded norm (GemvNorm::folded) is
// not a prologue: each warp sums x's squares itself after the wait and scales its output sums.
#include <algorithm>

#include "kernels/common.cuh"
#include "kernels/gemv.h"

namespace specpress::kernels {
namespace {
using namespace detail;
constexpr int kLoads = 8, kResidentWarps = 32;  // per SM: <= 64 registers a thread
enum Epilogue { kPlain = 0, kSwiglu = 1, kResidual = 2 };
constexpr int kWarps = 4;  // a block

struct GemvArgs {
  const bf16* x = nullptr;
  const bf16* W = nullptr;
  bf16* y = nullptr;
  int N = 0, K = 0;           // outputs (kSwiglu: I, W has 2I rows), K % 8 == 0
  int units_per_warp = 1;
  GemvNorm norm;               // NORM: the prologue's weight and eps
  bf16* tap = nullptr;         // kResidual: optional copy of the new residual
};

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

// ROWS rows of W per unit. Plain / residual: output n is row n. kSwiglu (the fused gate/up projection,
// W = [gate; up] with N = I outputs): a unit is OUT = ROWS / 2 outputs n0.., and its rows are gate rows
// n0.. then up rows I + n0... A row's sum does not depend on ROWS, the epilogue or the rows beside it (each
// lane walks its chunks in the same order, and the xor-butterfly sum is the same in every lane), so every
// variant rounds a product exactly as the plain ROWS = 1 kernel does.
template <int ROWS, int EPI, bool NORM>
__global__ void __launch_bounds__(kWarps * 32, kResidentWarps / kWarps) gemv_kernel(GemvArgs a) {
  constexpr int U = kLoads / ROWS, OUT = EPI == kSwiglu ? ROWS / 2 : ROWS;
  static_assert(EPI != kSwiglu || ROWS % 2 == 0, "a SwiGLU unit pairs gate and up rows");
  const int lane = threadIdx.x & 31;
  const int warp = blockIdx.x * kWarps + (threadIdx.x >> 5);
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
  // One step's W chunks of the unit with outputs n0.. (chunks c0, c0 + 32, ..; past K: zero).
  auto load_step = [&](int n0, int c0, uint4 (&wv)[U][ROWS]) {
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      const bf16* row = row_of(n0, r);
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int c = c0 + 32 * u;
        wv[u][r] = c < nvec ? ld_stream(row + static_cast<int64_t>(c) * 8) : zero;
      }
    }
  };
  // Weights never depend on earlier kernels: under PDL (launch.h) this warp's first step of W is loaded
  // while the kernel that produces x is still running (into registers; with the norm prologue, which
  // needs those registers, only into L2).
  uint4 wv[U][ROWS];  // the step's W chunks
  if (u_beg < u_end) {
    if constexpr (NORM) {
#pragma unroll
      for (int r = 0; r < ROWS; ++r)
#pragma unroll
        for (int u = 0; u < U; ++u)
          if (lane + 32 * u < nvec) prefetch_l2(row_of(u_beg * OUT, r) + static_cast<int64_t>(lane + 32 * u) * 8);
    } else {
      load_step(u_beg * OUT, lane, wv);
    }
  }
  pdl_wait();
  // The prologue: x normalised into shared memory (as rmsnorm_row rounds: w * bf16(x * rs), stored as bf16).
  extern __shared__ uint4 xs[];  // NORM: K / 8 chunks
  if constexpr (NORM) {
    // One round trip: each thread loads its chunks of x and of the norm weight together (up to kHeld of
    // each in registers, K <= kHeld * 8 * threads; a longer row reloads the rest), then the block's sum of
    // squares, then the normed chunks into shared memory.
    constexpr int kHeld = 4, kThreads = kWarps * 32;
    __shared__ float scratch[32];
    uint4 xr[kHeld], wr[kHeld];
#pragma unroll
    for (int i = 0; i < kHeld; ++i) {
      const int c = threadIdx.x + i * kThreads;
      if (c < nvec) {
        xr[i] = *reinterpret_cast<const uint4*>(a.x + static_cast<int64_t>(c) * 8);
        wr[i] = __ldg(reinterpret_cast<const uint4*>(a.norm.weight) + c);
      }
    }
    float ss = 0.f;
#pragma unroll
    for (int i = 0; i < kHeld; ++i) {
      if (threadIdx.x + i * kThreads < nvec) {
        const uint32_t xd[4] = {xr[i].x, xr[i].y, xr[i].z, xr[i].w};
#pragma unroll
        for (int j = 0; j < 4; ++j) ss += lo_f(xd[j]) * lo_f(xd[j]) + hi_f(xd[j]) * hi_f(xd[j]);
      }
    }
    for (int c = threadIdx.x + kHeld * kThreads; c < nvec; c += kThreads) {
      float v[8];
      load8(a.x + static_cast<int64_t>(c) * 8, v);
#pragma unroll
      for (int e = 0; e < 8; ++e) ss += v[e] * v[e];
    }
    const float rs = rsqrtf(block_sum(ss, scratch) / static_cast<float>(K) + a.norm.eps);
    auto normed = [&](const uint4& xv8, const uint4& wv8) {  // w * bf16(x * rs), as the RMSNorm kernel rounds
      const uint32_t xd[4] = {xv8.x, xv8.y, xv8.z, xv8.w}, wd[4] = {wv8.x, wv8.y, wv8.z, wv8.w};
      float o[8];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        o[2 * j] = lo_f(wd[j]) * round_b(lo_f(xd[j]) * rs);
        o[2 * j + 1] = hi_f(wd[j]) * round_b(hi_f(xd[j]) * rs);
      }
      uint4 u;
      store8(reinterpret_cast<bf16*>(&u), o);
      return u;
    };
#pragma unroll
    for (int i = 0; i < kHeld; ++i) {
      const int c = threadIdx.x + i * kThreads;
      if (c < nvec) xs[c] = normed(xr[i], wr[i]);
    }
    for (int c = threadIdx.x + kHeld * kThreads; c < nvec; c += kThreads)
      xs[c] = normed(*reinterpret_cast<const uint4*>(a.x + static_cast<int64_t>(c) * 8),
                     __ldg(reinterpret_cast<const uint4*>(a.norm.weight) + c));
    __syncthreads();
  }
  // Folded norm: x's factor rsqrt(mean(x^2) + eps), summed by this warp alone (x comes through L1).
  float row_factor = 1.f;
  if (!NORM && a.norm.folded && u_beg < u_end) {
    float ss = 0.f;
    for (int c = lane; c < nvec; c += 32) {
      const uint4 x8 = __ldg(xv + c);
      const uint32_t xd[4] = {x8.x, x8.y, x8.z, x8.w};
#pragma unroll
      for (int j = 0; j < 4; ++j) ss += lo_f(xd[j]) * lo_f(xd[j]) + hi_f(xd[j]) * hi_f(xd[j]);
    }
    row_factor = rsqrtf(warp_sum(ss) / static_cast<float>(K) + a.norm.eps);
  }
  for (int unit = u_beg; unit < u_end; ++unit) {
    const int n0 = unit * OUT;
    float acc[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) acc[r] = 0.f;
    for (int c0 = lane; c0 < nvec; c0 += 32 * U) {
      uint4 xc[U];
      if (NORM || unit != u_beg || c0 != lane) load_step(n0, c0, wv);  // else loaded before pdl_wait
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int c = c0 + 32 * u;
        const bool ok = c < nvec;
        if constexpr (NORM)
          xc[u] = ok ? xs[c] : zero;
        else
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
    for (int r = 0; r < ROWS; ++r) sum[r] = warp_sum(acc[r]) * row_factor;
#pragma unroll
    for (int o = 0; o < OUT; ++o) {
      if (lane != o || n0 + o >= N) continue;
      if constexpr (EPI == kSwiglu) {
        // as gemv + silu_mul: both products rounded to bf16, silu rounded, the product rounded on store
        const float g = round_b(sum[o]), u = round_b(sum[o + OUT]);
        a.y[n0 + o] = to_b(round_b(g / (1.f + expf(-g))) * u);
      } else if constexpr (EPI == kResidual) {
        // as gemv + ATen's bf16 add: the product rounded, then the sum
        const bf16 v = to_b(to_f(a.y[n0 + o]) + round_b(sum[o]));
        a.y[n0 + o] = v;
        if (a.tap != nullptr) a.tap[n0 + o] = v;
      } else {
        a.y[n0 + o] = to_b(sum[o]);
      }
    }
  }
  // Every weight of this warp has been read: the next kernel may take the SM slots this block frees.
  pdl_trigger();
}

struct Plan {
  int resident_warps = 0;  // warps of this kernel the GPU holds at once
};

// Shared memory of the NORM prologue for K; the plan assumes kPlanK (a Qwen3-8B hidden row).
size_t smem_of(bool norm, int K) { return norm ? static_cast<size_t>(K) * sizeof(bf16) : 0; }
constexpr int kPlanK = 4096;

template <int ROWS, int EPI, bool NORM> cudaError_t plan_of(Plan& p) {
  static Plan cached;
  static bool ready = false;
  if (!ready) {
    int sms = 0, blocks = 0;
    cudaError_t e = sm_count(sms);
    if (e == cudaSuccess)
      e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, gemv_kernel<ROWS, EPI, NORM>, kWarps * 32,
                                                        smem_of(NORM, kPlanK));
    if (e != cudaSuccess) return e;
    cached.resident_warps = std::max(1, sms * std::max(1, blocks) * kWarps);
    ready = true;
  }
  p = cached;
  return cudaSuccess;
}

// One wave: the units split evenly over at most the resident warps.
template <int ROWS, int EPI, bool NORM> cudaError_t launch(GemvArgs a, cudaStream_t stream) {
  Plan p;
  cudaError_t e = plan_of<ROWS, EPI, NORM>(p);
  if (e != cudaSuccess) return e;
  constexpr int OUT = EPI == kSwiglu ? ROWS / 2 : ROWS;
  const int units = (a.N + OUT - 1) / OUT;
  a.units_per_warp = (units + p.resident_warps - 1) / p.resident_warps;
  const int warps = (units + a.units_per_warp - 1) / a.units_per_warp;
  return launch_kernel(gemv_kernel<ROWS, EPI, NORM>, (warps + kWarps - 1) / kWarps, kWarps * 32, smem_of(NORM, a.K),
                       stream, a);
}

// A plain or residual GEMV's serial steps a warp with `rows` rows (outputs) a unit: units a warp x steps a unit,
// where a step is one round trip of kLoads loads a lane (the last one of a row often partly empty).
int serial_steps(int rows, int N, int K, int resident_warps) {
  const int units = (N + rows - 1) / rows, nvec = K / 8, chunks_per_step = 32 * (kLoads / rows);
  return (units + resident_warps - 1) / resident_warps * ((nvec + chunks_per_step - 1) / chunks_per_step);
}

// Rows per unit: 4 (or 2) when N has that many rows for every resident warp, else 1, so that the small
// projections still spread over the whole GPU; but a plain or residual GEMV takes 1, 2 or 4 rows, whichever
// needs strictly fewer serial steps a warp. E.g. Qwen3-4B's qkv projection (N = 6144, K = 2560, 4224
// resident warps): 1 row a unit is 2 units of 2 steps a warp (the second a quarter full), 4 steps; 2 rows is
// 1 unit of 3 steps; measured 10.8 -> 9.4 us alone (docs/PERF.md, tenth pass). SwiGLU units are 2 or 4 rows
// (1 or 2 outputs) by the N rule only: 2-row units, fewer steps at Qwen3-4B/8B, did not speed up 4B decode
// and sped up 8B decode by 0.3%.
template <int EPI, bool NORM> cudaError_t launch_any_rows(const GemvArgs& a, cudaStream_t stream) {
  Plan p;
  cudaError_t e = plan_of<EPI == kSwiglu ? 2 : 1, EPI, NORM>(p);
  if (e != cudaSuccess) return e;
  const int W = p.resident_warps;
  if constexpr (EPI == kSwiglu) {
    if (a.N >= 2 * W) return launch<4, EPI, NORM>(a, stream);  // 2 outputs (4 rows) per unit
    return launch<2, EPI, NORM>(a, stream);
  } else {
    int rows = a.N >= 4 * W ? 4 : a.N >= 2 * W ? 2 : 1;
    for (int r : {1, 2, 4})
      if (serial_steps(r, a.N, a.K, W) < serial_steps(rows, a.N, a.K, W)) rows = r;
    if (rows == 4) return launch<4, EPI, NORM>(a, stream);
    if (rows == 2) return launch<2, EPI, NORM>(a, stream);
    return launch<1, EPI, NORM>(a, stream);
  }
}

template <int EPI> cudaError_t launch_with_norm(const GemvArgs& a, cudaStream_t stream) {
  if (a.norm.weight == nullptr) return launch_any_rows<EPI, false>(a, stream);
  return launch_any_rows<EPI, true>(a, stream);
}

GemvArgs args_of(const bf16* x, const bf16* W, bf16* y, int N, int K, const GemvNorm& norm) {
  GemvArgs a;
  a.x = x;
  a.W = W;
  a.y = y;
  a.N = N;
  a.K = K;
  a.norm = norm;
  return a;
}

bool valid(const bf16* x, const bf16* W, const bf16* y, int K, const GemvNorm& norm) {
  return K > 0 && K % 8 == 0 && x != nullptr && W != nullptr && y != nullptr &&
         reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(W) % 16 == 0 &&
         (norm.weight == nullptr || (!norm.folded && K <= kGemvNormMaxK && reinterpret_cast<uintptr_t>(norm.weight) % 16 == 0));
}

}  // namespace

cudaError_t gemv(const __nv_bfloat16* x, const __nv_bfloat16* W, __nv_bfloat16* y, int N, int K, cudaStream_t stream,
                 const GemvNorm& norm) {
  if (N <= 0) return cudaSuccess;
  if (!valid(x, W, y, K, norm)) return cudaErrorInvalidValue;
  return launch_with_norm<kPlain>(args_of(x, W, y, N, K, norm), stream);
}

cudaError_t gemv_swiglu(const __nv_bfloat16* x, const __nv_bfloat16* W, __nv_bfloat16* act, int I, int K,
                        cudaStream_t stream, const GemvNorm& norm) {
  if (I <= 0) return cudaSuccess;
  if (!valid(x, W, act, K, norm)) return cudaErrorInvalidValue;
  return launch_with_norm<kSwiglu>(args_of(x, W, act, I, K, norm), stream);
}

cudaError_t gemv_residual(const __nv_bfloat16* x, const __nv_bfloat16* W, __nv_bfloat16* residual,
                          __nv_bfloat16* tap, int N, int K, cudaStream_t stream) {
  if (N <= 0) return cudaSuccess;
  if (!valid(x, W, residual, K, GemvNorm{})) return cudaErrorInvalidValue;
  GemvArgs a = args_of(x, W, residual, N, K, GemvNorm{});
  a.tap = tap;
  return launch_any_rows<kResidual, false>(a, stream);
}

}  // namespace specpress::kernels
