// gemv.cu — see gemv.h. Warp w owns rows [w * per_warp * ROWS, ...) in units of ROWS rows (1, 2 or 4; more for
// large N, to reuse each x load across rows, or for fewer serial steps a warp: launch_any_rows). Per step a lane
// loads U = LOADS / ROWS 16-byte chunks of each of its ROWS rows (LOADS = 8 W loads in flight per lane, or 10 or 16
// where that saves serial steps: gemv_wide_level) and the matching chunks of x (through L1, which holds x for every
// warp of the SM), then accumulates the 8-element dot products in fp32; a warp sum per row at the end. The grid is at
// most the number of warps the GPU holds at once. Epilogues: plain (y =
// the sums), SwiGLU (gemv_swiglu: a unit pairs gate row n with up row I + n) and residual (gemv_residual: y[n] +=
// the sum, in place, by the one lane that owns n). Prologue (NORM): the block normalises x into shared memory first
// (its weights already on their way into L2), and the loop reads x from there. A folded norm (GemvNorm::folded) is
// not a prologue: each warp sums x's squares itself after the wait and scales its output sums. Below it, the TMA
// GEMV (gemv.h, SPECPRESS_GEMV_TMA): the same products, bitwise, with W copied into shared memory by the TMA engine.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "kernels/common.cuh"
#include "kernels/gemv.h"
#include "kernels/gemv_math.cuh"
#include "kernels/tma.cuh"

namespace specpress::kernels {
namespace {
using namespace detail;
constexpr int kLoads = 8, kResidentWarps = 32;  // per SM: <= 64 registers a thread
enum Epilogue { kPlain = 0, kSwiglu = 1, kResidual = 2 };
constexpr int kWarps = 4;  // a block
constexpr int kNormHeld = 4;  // NORM prologue: x chunks a thread holds in registers (the first kNormHeld * 128)

struct GemvArgs {
  const bf16* x = nullptr;
  const bf16* W = nullptr;
  bf16* y = nullptr;
  int N = 0, K = 0;           // outputs (kSwiglu: I, W has 2I rows), K % 8 == 0
  int units_per_warp = 1;
  GemvNorm norm;               // NORM: the prologue's weight and eps
  bf16* tap = nullptr;         // kResidual: optional copy of the new residual
  unsigned long long* trace = nullptr;  // the register GEMV's diagnostic stamps (step_trace.h; gemv_trace_next)
};

// w * bf16(x * rs), as the RMSNorm kernel rounds, for one chunk of x and of the norm weight.
__device__ __forceinline__ uint4 normed8(const uint4& xv8, const uint4& wv8, float rs) {
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
}

// Output n from its row's sum (kSwiglu: the gate row's, and `up`, the up row's), rounded as the unfused ops round.
template <int EPI> __device__ __forceinline__ void store_output(const GemvArgs& a, int n, float sum, float up) {
  if constexpr (EPI == kSwiglu) {
    a.y[n] = swiglu_value(sum, up);
  } else if constexpr (EPI == kResidual) {
    const bf16 v = residual_value(a.y[n], sum);
    a.y[n] = v;
    if (a.tap != nullptr) a.tap[n] = v;
  } else {
    a.y[n] = to_b(sum);
  }
}

// ROWS rows of W per unit. Plain / residual: output n is row n. kSwiglu (the fused gate/up projection,
// W = [gate; up] with N = I outputs): a unit is OUT = ROWS / 2 outputs n0.., and its rows are gate rows
// n0.. then up rows I + n0... A row's sum does not depend on ROWS, the epilogue or the rows beside it (each
// lane walks its chunks in the same order, and the xor-butterfly sum is the same in every lane), so every
// variant rounds a product exactly as the plain ROWS = 1 kernel does.
// LOADS: W loads a lane keeps in flight, kLoads (at most 64 registers a thread, 8 blocks an SM), kWideLoads (at most
// 85, 6 blocks an SM) or kWholeRowLoads (one row a unit; at most 102, 5 blocks an SM).
constexpr int kWideLoads = 10, kWholeRowLoads = 16;
constexpr int blocks_per_sm_for(int loads) {
  return loads == kLoads ? kResidentWarps / kWarps : loads == kWideLoads ? 6 : 5;
}
// TRACE: the diagnostic stamps (GemvArgs::trace, step_trace.h), compiled only into the traced instances.
template <int ROWS, int EPI, bool NORM, int LOADS = kLoads, bool TRACE = false>
__global__ void __launch_bounds__(kWarps * 32, blocks_per_sm_for(LOADS)) gemv_kernel(GemvArgs a) {
  static_assert(LOADS == kLoads || LOADS == kWideLoads || LOADS == kWholeRowLoads,
                "a load count with its register budget (blocks_per_sm_for)");
  static_assert(LOADS % ROWS == 0, "whole chunks of each row a step");
  constexpr int U = LOADS / ROWS, OUT = EPI == kSwiglu ? ROWS / 2 : ROWS;
  static_assert(EPI != kSwiglu || ROWS % 2 == 0, "a SwiGLU unit pairs gate and up rows");
  const int lane = threadIdx.x & 31;
  const int warp = blockIdx.x * kWarps + (threadIdx.x >> 5);
  const int N = a.N, K = a.K;
  if constexpr (TRACE) {
    step_stamp(a.trace, kStStart);
    step_stamp_sm(a.trace);
  }
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
    load_unit_step(([&](int r) { return row_of(n0, r); }), c0, nvec, wv);
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
  if constexpr (TRACE) step_stamp(a.trace, kStIssued);
  pdl_wait();
  if constexpr (TRACE) step_stamp(a.trace, kStWaited);
  // The prologue: x normalised into shared memory (as rmsnorm_kernel rounds: w * bf16(x * rs), stored as bf16).
  extern __shared__ uint4 xs[];  // NORM: K / 8 chunks
  if constexpr (NORM) {
    // One round trip: each thread loads its chunks of x and of the norm weight together (up to kHeld of
    // each in registers, K <= kHeld * 8 * threads; a longer row reloads the rest), then the block's sum of
    // squares, then the normed chunks into shared memory.
    constexpr int kHeld = kNormHeld, kThreads = kWarps * 32;
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
    for (int i = 0; i < kHeld; ++i)
      if (threadIdx.x + i * kThreads < nvec) ss = sumsq8(xr[i], ss);
    for (int c = threadIdx.x + kHeld * kThreads; c < nvec; c += kThreads) {
      float v[8];
      load8(a.x + static_cast<int64_t>(c) * 8, v);
#pragma unroll
      for (int e = 0; e < 8; ++e) ss += v[e] * v[e];
    }
    const float rs = rsqrtf(block_sum(ss, scratch) / static_cast<float>(K) + a.norm.eps);
#pragma unroll
    for (int i = 0; i < kHeld; ++i) {
      const int c = threadIdx.x + i * kThreads;
      if (c < nvec) xs[c] = normed8(xr[i], wr[i], rs);
    }
    for (int c = threadIdx.x + kHeld * kThreads; c < nvec; c += kThreads)
      xs[c] = normed8(*reinterpret_cast<const uint4*>(a.x + static_cast<int64_t>(c) * 8),
                      __ldg(reinterpret_cast<const uint4*>(a.norm.weight) + c), rs);
    __syncthreads();
  }
  // Folded norm: x's factor rsqrt(mean(x^2) + eps), summed by this warp alone (x comes through L1).
  float row_factor = 1.f;
  if (!NORM && a.norm.folded && u_beg < u_end) {
    float ss = 0.f;
    for (int c = lane; c < nvec; c += 32) ss = sumsq8(__ldg(xv + c), ss);
    row_factor = rsqrtf(warp_sum(ss) / static_cast<float>(K) + a.norm.eps);
  }
  for (int unit = u_beg; unit < u_end; ++unit) {
    const int n0 = unit * OUT;
    float acc[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) acc[r] = 0.f;
    for (int c0 = lane; c0 < nvec; c0 += 32 * U) {
      if (NORM || unit != u_beg || c0 != lane) load_step(n0, c0, wv);  // else loaded before pdl_wait
      // x's chunks in groups of XG (U above 8: half of U, so that the x registers stay at most 8 chunks)
      constexpr int XG = U <= 8 ? U : U / 2;
      static_assert(U % XG == 0 && XG <= 8, "x's chunks in whole groups of at most 8");
#pragma unroll
      for (int g0 = 0; g0 < U; g0 += XG) {
        uint4 xc[XG];
#pragma unroll
        for (int u = 0; u < XG; ++u) {
          const int c = c0 + 32 * (g0 + u);
          const bool ok = c < nvec;
          if constexpr (NORM)
            xc[u] = ok ? xs[c] : zero;
          else
            xc[u] = ok ? __ldg(xv + c) : zero;
        }
#pragma unroll
        for (int u = 0; u < XG; ++u) {
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
          for (int r = 0; r < ROWS; ++r) acc[r] = dot8(wv[g0 + u][r], xf, acc[r]);
        }
      }
    }
    float sum[ROWS];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) sum[r] = warp_sum(acc[r]) * row_factor;
#pragma unroll
    for (int o = 0; o < OUT; ++o)
      if (lane == o && n0 + o < N) store_output<EPI>(a, n0 + o, sum[o], EPI == kSwiglu ? sum[(o + OUT) % ROWS] : 0.f);
  }
  // Every weight of this warp has been read: the next kernel may take the SM slots this block frees.
  if constexpr (TRACE) step_stamp_warp(a.trace, kStWarpEnd);
  pdl_trigger();
}

// ---- The TMA GEMV (gemv_tma(), gemv.h): the same products, W streamed by the TMA engine into shared memory.
// A block: C consumer warps and one producer warp (C = 4 by default: two blocks an SM; 8: one; 2: more). A block owns
// whole groups of C rows (blocks take groups in turn), a group's K in segments of kc columns: a tile is a group's rows
// x one segment. The producer copies tiles into a ring of `stages` shared-memory stages, one cp.async.bulk a row,
// completed on the stage's `full` mbarrier, and refills a stage once its `empty` mbarrier has every consumer's
// arrival. Consumer warp w takes tile row w (kSwiglu: rows 0..C/2-1 are gate rows n0.., the others the up rows
// I + n0..), and its lanes walk the row's chunks in the register GEMV's order: lane l adds chunks l, l + 32, .. of the
// whole row, so each row's sum, its warp reduction and its epilogue are bitwise the register GEMV's (the NORM
// prologue too: its sum of squares is split over 128 (virtual) threads as that kernel's 4-warp block splits it). The
// producer issues its first stages before the PDL wait (weights never depend on an earlier kernel); the consumers
// wait before they read x.
// gemv_tma() == kAuto takes the TMA GEMV for products of at least kTmaAutoRowsPerSm rows of W an SM and segments of
// at least kTmaAutoMinKc columns (narrower row copies measured slower). At the Qwen3 shapes that is the LM head
// alone: the layers' projections, though up to 6% faster alone at 8B, made the decode step slower (docs/PERF.md,
// sixteenth pass). A block this large becomes resident only once the GEMV before it has nearly drained its SM, so
// it loses the PDL overlap the register GEMV's 4-warp blocks get.
constexpr int kTmaAutoRowsPerSm = 512, kTmaAutoMinKc = 512;

struct TmaLayout {
  int warps = 0;           // consumer warps C (rows a tile)
  int kc = 0, stages = 0;  // segment width (columns), ring stages
  size_t smem = 0;         // dynamic shared memory
};
// Shared memory: the stages [stages][C][kc] bf16, x [K] bf16 (normed for NORM), 64 floats of scratch, then
// 2 * stages mbarriers.
__host__ __device__ inline size_t tma_x_offset(int C, int kc, int stages) {
  return sizeof(bf16) * static_cast<size_t>(stages) * C * kc;
}
__host__ __device__ inline size_t tma_scratch_offset(int C, int K, int kc, int stages) {
  return tma_x_offset(C, kc, stages) + sizeof(bf16) * static_cast<size_t>(K);
}
__host__ __device__ inline size_t tma_bar_offset(int C, int K, int kc, int stages) {
  return tma_scratch_offset(C, K, kc, stages) + 64 * sizeof(float);
}

template <int EPI, bool NORM, int C>
__global__ void __launch_bounds__(32 * (C + 1), 8 / C) gemv_tma_kernel(GemvArgs a, int kc, int stages) {
  static_assert(C == 2 || C == 4 || C == 8, "2, 4 or 8 consumer warps");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap();  // TMA and mbarrier transactions need sm_90; the host never launches this there (tma_layout)
#else
  extern __shared__ __align__(128) unsigned char smem[];
  constexpr int OUT = EPI == kSwiglu ? C / 2 : C;
  const int N = a.N, K = a.K, nvec = K / 8, cps = kc / 8, segs = K / kc;
  const size_t stage_elems = static_cast<size_t>(C) * kc;
  bf16* ring = reinterpret_cast<bf16*>(smem);
  uint4* xs = reinterpret_cast<uint4*>(smem + tma_x_offset(C, kc, stages));
  float* scratch = reinterpret_cast<float*>(smem + tma_scratch_offset(C, K, kc, stages));
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + tma_bar_offset(C, K, kc, stages));
  uint64_t* empty = full + stages;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int groups = (N + OUT - 1) / OUT;
  const int my_groups = static_cast<int>(blockIdx.x) < groups ? (groups - 1 - static_cast<int>(blockIdx.x)) / gridDim.x + 1 : 0;
  const int tiles = my_groups * segs;
  // Tile row r of group g: its output (past N: no row) and its row of W.
  auto output_of = [&](int g, int r) { return g * OUT + (EPI == kSwiglu ? r % OUT : r); };
  auto w_row = [&](int g, int r) {
    return a.W + (static_cast<int64_t>(output_of(g, r)) + (EPI == kSwiglu && r >= OUT ? N : 0)) * K;
  };
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], C);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  if (warp == C) {  // the producer
    for (int t = 0; t < tiles; ++t) {
      const int s = t % stages, round = t / stages;
      if (round > 0) mbar_wait(&empty[s], (round - 1) & 1);
      const int g = static_cast<int>(blockIdx.x) + (t / segs) * static_cast<int>(gridDim.x), seg = t % segs;
      const bool mine = lane < C && output_of(g, lane) < N;
      const unsigned rows = __popc(__ballot_sync(0xffffffffu, mine));
      if (lane == 0) mbar_expect_tx(&full[s], rows * static_cast<unsigned>(kc * sizeof(bf16)));
      __syncwarp();
      if (mine)
        bulk_copy(ring + s * stage_elems + static_cast<size_t>(lane) * kc, w_row(g, lane) + static_cast<int64_t>(seg) * kc,
                  static_cast<unsigned>(kc * sizeof(bf16)), &full[s]);
    }
    return;
  }
  pdl_wait();
  const int ctid = threadIdx.x;  // 0 .. 32 * C - 1
  if constexpr (NORM) {
    // as the register GEMV's 4-warp block: (virtual) threads 0..127 sum x's squares over chunks tid, tid + 128, ..,
    // here thread ctid for virtual threads ctid, ctid + 32 C, ..; the sum of the four warps' sums is the same
    // lane-butterfly (with 8 consumer warps, warps 4..7 add exact zeros)
    constexpr int kVirtual = C < 4 ? 4 / C : 1;
#pragma unroll
    for (int j = 0; j < kVirtual; ++j) {
      const int vt = ctid + 32 * C * j;
      float ss = 0.f;
      if (vt < 128)
        for (int c = vt; c < nvec; c += 128) {
          if (c < kNormHeld * 128) {  // the register GEMV's held chunks
            ss = sumsq8(*reinterpret_cast<const uint4*>(a.x + static_cast<int64_t>(c) * 8), ss);
          } else {  // and its tail loop's order
            float v[8];
            load8(a.x + static_cast<int64_t>(c) * 8, v);
#pragma unroll
            for (int e = 0; e < 8; ++e) ss += v[e] * v[e];
          }
        }
      ss = warp_sum(ss);
      if (lane == 0) scratch[warp + C * j] = ss;
    }
    consumers_sync<C>();
    constexpr int kWarpSums = C < 4 ? 4 : C;
    const float rs = rsqrtf(warp_sum(lane < kWarpSums ? scratch[lane] : 0.f) / static_cast<float>(K) + a.norm.eps);
    for (int c = ctid; c < nvec; c += 32 * C)
      xs[c] = normed8(*reinterpret_cast<const uint4*>(a.x + static_cast<int64_t>(c) * 8),
                      __ldg(reinterpret_cast<const uint4*>(a.norm.weight) + c), rs);
  } else {
    for (int c = ctid; c < nvec; c += 32 * C) xs[c] = *reinterpret_cast<const uint4*>(a.x + static_cast<int64_t>(c) * 8);
  }
  consumers_sync<C>();
  // Folded norm: x's factor, summed by this warp alone as in the register GEMV.
  float row_factor = 1.f;
  if (!NORM && a.norm.folded) {
    float ss = 0.f;
    for (int c = lane; c < nvec; c += 32) ss = sumsq8(xs[c], ss);
    row_factor = rsqrtf(warp_sum(ss) / static_cast<float>(K) + a.norm.eps);
  }
  float* sums = scratch + 32;  // kSwiglu: [2][C], a group's row sums, by group parity
  float acc = 0.f;
  for (int t = 0; t < tiles; ++t) {
    const int s = t % stages, round = t / stages;
    const int g = static_cast<int>(blockIdx.x) + (t / segs) * static_cast<int>(gridDim.x), seg = t % segs;
    const bool live = output_of(g, warp) < N;
    mbar_wait(&full[s], round & 1);
    if (live) {
      const uint4* wseg = reinterpret_cast<const uint4*>(ring + s * stage_elems + static_cast<size_t>(warp) * kc);
      const uint4* xseg = xs + static_cast<size_t>(seg) * cps;
      // this lane's chunks of the row are l, l + 32, ..: the first one in this segment
      for (int c = (lane - seg * cps % 32 + 32) % 32; c < cps; c += 32) {
        const uint4 x8 = xseg[c];
        const float xf[8] = {lo_f(x8.x), hi_f(x8.x), lo_f(x8.y), hi_f(x8.y), lo_f(x8.z), hi_f(x8.z), lo_f(x8.w), hi_f(x8.w)};
        acc = dot8(wseg[c], xf, acc);
      }
    }
    __syncwarp();
    if (lane == 0) mbar_arrive(&empty[s]);
    if (seg == segs - 1) {
      const float sum = warp_sum(acc) * row_factor;
      acc = 0.f;
      const int n = output_of(g, warp);
      if constexpr (EPI == kSwiglu) {
        float* slot = sums + ((t / segs) & 1) * C;
        if (lane == 0) slot[warp] = sum;
        consumers_sync<C>();
        if (lane == 0 && warp < OUT && n < N) store_output<EPI>(a, n, slot[warp], slot[warp + OUT]);
      } else {
        if (lane == 0 && n < N) store_output<EPI>(a, n, sum, 0.f);
      }
    }
  }
  // Every weight this warp reads has been read (the block triggers with its first warp to get here): the next kernel
  // may take the SM slots the block frees.
  pdl_trigger();
#endif
}

struct Plan {
  int resident_warps = 0;  // warps of this kernel the GPU holds at once
};

// Shared memory of the NORM prologue for K; the plan assumes kPlanK (a Qwen3-8B hidden row).
size_t smem_of(bool norm, int K) { return norm ? static_cast<size_t>(K) * sizeof(bf16) : 0; }
constexpr int kPlanK = 4096;

template <int ROWS, int EPI, bool NORM, int LOADS = kLoads> cudaError_t plan_of(Plan& p) {
  static Plan cached;
  static bool ready = false;
  if (!ready) {
    int sms = 0, blocks = 0;
    cudaError_t e = sm_count(sms);
    if (e == cudaSuccess)
      e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, gemv_kernel<ROWS, EPI, NORM, LOADS>, kWarps * 32,
                                                        smem_of(NORM, kPlanK));
    if (e != cudaSuccess) return e;
    cached.resident_warps = std::max(1, sms * std::max(1, blocks) * kWarps);
    ready = true;
  }
  p = cached;
  return cudaSuccess;
}

// One wave: the units split evenly over at most the resident warps.
template <int ROWS, int EPI, bool NORM, int LOADS = kLoads> cudaError_t launch(GemvArgs a, cudaStream_t stream) {
  Plan p;
  cudaError_t e = plan_of<ROWS, EPI, NORM, LOADS>(p);
  if (e != cudaSuccess) return e;
  constexpr int OUT = EPI == kSwiglu ? ROWS / 2 : ROWS;
  const int units = (a.N + OUT - 1) / OUT;
  a.units_per_warp = (units + p.resident_warps - 1) / p.resident_warps;
  const int warps = (units + a.units_per_warp - 1) / a.units_per_warp;
  const int blocks = (warps + kWarps - 1) / kWarps;
  static_assert(kStWarpEnd + kWarps <= kStEnd, "a block's warp ends fit before kStEnd");
  int sms = 0;
  if (a.trace != nullptr && (e = sm_count(sms)) != cudaSuccess) return e;
  // The traced instance (the same plan) where the launch has stamps and its grid fits their rows; else the engine's.
  if (a.trace != nullptr && blocks <= sms * kGemvTraceBlocksPerSm)
    return launch_kernel(gemv_kernel<ROWS, EPI, NORM, LOADS, true>, blocks, kWarps * 32, smem_of(NORM, a.K), stream, a);
  return launch_kernel(gemv_kernel<ROWS, EPI, NORM, LOADS>, blocks, kWarps * 32, smem_of(NORM, a.K), stream, a);
}

// A plain or residual GEMV's serial steps a warp with `rows` rows (outputs) a unit: units a warp x steps a unit,
// where a step is one round trip of `loads` loads a lane (the last one of a row often partly empty).
int serial_steps(int rows, int N, int K, int resident_warps, int loads = kLoads) {
  const int units = (N + rows - 1) / rows, nvec = K / 8, chunks_per_step = 32 * (loads / rows);
  return (units + resident_warps - 1) / resident_warps * ((nvec + chunks_per_step - 1) / chunks_per_step);
}

// Rows per unit: 4 (or 2) when N has that many rows for every resident warp, else 1, so that the small
// projections still spread over the whole GPU; but a plain or residual GEMV takes 1, 2 or 4 rows, whichever
// needs strictly fewer serial steps a warp. E.g. Qwen3-4B's qkv projection (N = 6144, K = 2560, 4224
// resident warps): 1 row a unit is 2 units of 2 steps a warp (the second a quarter full), 4 steps; 2 rows is
// 1 unit of 3 steps; measured 10.8 -> 9.4 us alone (docs/PERF.md, tenth pass). SwiGLU units are 2 or 4 rows
// (1 or 2 outputs) by the N rule only: 2-row units, fewer steps at Qwen3-4B/8B, did not speed up 4B decode
// and sped up 8B decode by 0.3%. Then, by gemv_wide_level(), a plain or residual GEMV without the norm prologue may
// keep more W loads a lane in flight (fewer resident warps): at level 1 or more kWideLoads (1 or 2 rows a unit) where
// that needs strictly fewer serial steps, at Qwen3-4B the down projection (N = 2560, K = 9728: 5 steps -> 4) and the
// qkv one (3 -> 2), none at 8B (docs/PERF.md, thirty-third pass); at level 2 kWholeRowLoads (one row a unit) where a
// warp's whole work is then one step and was more, so that all its weights are loaded before the PDL wait, while the
// kernel before it still runs: at Qwen3-4B the o projection (N = 2560, K = 4096: 2 steps -> 1, beside the attention),
// none at 8B (thirty-fourth pass).
struct RowsChoice {
  int rows = 1, loads = kLoads;
};
template <int EPI, bool NORM> cudaError_t choose_rows(const GemvArgs& a, RowsChoice& c) {
  Plan p;
  cudaError_t e = plan_of<EPI == kSwiglu ? 2 : 1, EPI, NORM>(p);
  if (e != cudaSuccess) return e;
  const int W = p.resident_warps;
  c = RowsChoice{};
  if constexpr (EPI == kSwiglu) {
    c.rows = a.N >= 2 * W ? 4 : 2;  // 2 outputs (4 rows) or 1 per unit
  } else {
    c.rows = a.N >= 4 * W ? 4 : a.N >= 2 * W ? 2 : 1;
    for (int r : {1, 2, 4})
      if (serial_steps(r, a.N, a.K, W) < serial_steps(c.rows, a.N, a.K, W)) c.rows = r;
    if constexpr (!NORM) {  // (the NORM prologue's kernels are not built with more loads)
      int steps = serial_steps(c.rows, a.N, a.K, W);
      if (gemv_wide_level() >= 1) {
        Plan wide1, wide2;
        e = plan_of<1, EPI, NORM, kWideLoads>(wide1);
        if (e == cudaSuccess) e = plan_of<2, EPI, NORM, kWideLoads>(wide2);
        if (e != cudaSuccess) return e;
        const int s1 = serial_steps(1, a.N, a.K, wide1.resident_warps, kWideLoads);
        const int s2 = serial_steps(2, a.N, a.K, wide2.resident_warps, kWideLoads);
        if (std::min(s1, s2) < steps) {
          c = RowsChoice{s2 <= s1 ? 2 : 1, kWideLoads};
          steps = std::min(s1, s2);
        }
      }
      if (gemv_wide_level() >= 2 && steps > 1) {
        Plan whole;
        e = plan_of<1, EPI, NORM, kWholeRowLoads>(whole);
        if (e != cudaSuccess) return e;
        if (serial_steps(1, a.N, a.K, whole.resident_warps, kWholeRowLoads) == 1) c = RowsChoice{1, kWholeRowLoads};
      }
    }
  }
  return cudaSuccess;
}

template <int EPI, bool NORM> cudaError_t launch_any_rows(const GemvArgs& a, cudaStream_t stream) {
  RowsChoice c;
  cudaError_t e = choose_rows<EPI, NORM>(a, c);
  if (e != cudaSuccess) return e;
  if constexpr (EPI == kSwiglu) {
    return c.rows == 4 ? launch<4, EPI, NORM>(a, stream) : launch<2, EPI, NORM>(a, stream);
  } else {
    if constexpr (!NORM) {
      if (c.loads == kWholeRowLoads) return launch<1, EPI, NORM, kWholeRowLoads>(a, stream);
      if (c.loads == kWideLoads) return c.rows == 2 ? launch<2, EPI, NORM, kWideLoads>(a, stream)
                                                    : launch<1, EPI, NORM, kWideLoads>(a, stream);
    }
    if (c.rows == 4) return launch<4, EPI, NORM>(a, stream);
    if (c.rows == 2) return launch<2, EPI, NORM>(a, stream);
    return launch<1, EPI, NORM>(a, stream);
  }
}

// The TMA GEMV's layout for K: C consumer warps (SPECPRESS_GEMV_TMA_WARPS: 2, 4, the default, or 8), kc the widest
// segment of at most kTmaMaxKc columns that divides K (a multiple of 8, for 16-byte row copies), as many stages as
// fit the block's share of kTmaRingBytes an SM (C / 8 of it; at least 2, at most 16; SPECPRESS_GEMV_TMA_STAGES sets
// the count instead), fewer where the device's shared memory a block is smaller. kc == 0: no layout fits (or the
// device has no TMA: compute capability below 9.0).
constexpr int kTmaMaxKc = 1280;
constexpr size_t kTmaRingBytes = 160 << 10;
int tma_stages_setting() {
  static const int stages = env_int("SPECPRESS_GEMV_TMA_STAGES", 2, 16, 0, "2 .. 16");
  return stages;
}
int tma_warps_setting() {
  static const int warps = env_int_of("SPECPRESS_GEMV_TMA_WARPS", {2, 4, 8}, 4, "2, 4 or 8");
  return warps;
}
// kAuto: the TMA GEMV for products of at least this many rows of W an SM (SPECPRESS_GEMV_TMA_MIN_ROWS overrides).
int tma_min_rows_setting() {
  static const int rows = env_int("SPECPRESS_GEMV_TMA_MIN_ROWS", 1, 1 << 20, kTmaAutoRowsPerSm, "1 .. 1048576");
  return rows;
}
cudaError_t tma_layout(int K, TmaLayout& L) {
  static int smem_max = 0, cc_major = 0;
  if (smem_max == 0) {
    int dev = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&smem_max, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&cc_major, cudaDevAttrComputeCapabilityMajor, dev);
    if (e != cudaSuccess) return e;
  }
  L = TmaLayout{};
  if (cc_major < 9) return cudaSuccess;  // no TMA bulk copies
  const int C = tma_warps_setting();
  for (int kc = std::min(K, kTmaMaxKc) / 8 * 8; kc >= 8; kc -= 8) {
    if (K % kc != 0) continue;
    const size_t stage_bytes = sizeof(bf16) * C * static_cast<size_t>(kc);
    int stages = tma_stages_setting();
    if (stages == 0) stages = static_cast<int>(std::clamp<size_t>(kTmaRingBytes * C / 8 / stage_bytes, 2, 16));
    for (; stages >= 2; --stages) {
      const size_t smem = tma_bar_offset(C, K, kc, stages) + 2 * sizeof(uint64_t) * stages;
      if (smem <= static_cast<size_t>(smem_max)) {
        L = TmaLayout{C, kc, stages, smem};
        return cudaSuccess;
      }
    }
  }
  return cudaSuccess;
}

// Whether gemv_tma() sends this product (rows: W's rows) to the TMA GEMV, and with which layout.
cudaError_t tma_applies(const GemvArgs& a, int rows, TmaLayout& L, bool& yes) {
  yes = false;
  const GemvTma mode = gemv_tma();
  if (mode == GemvTma::kOff) return cudaSuccess;
  if (mode == GemvTma::kAuto) {  // the cheap test first: most products are too small
    int sms = 0;
    cudaError_t e = sm_count(sms);
    if (e != cudaSuccess) return e;
    if (static_cast<int64_t>(rows) < static_cast<int64_t>(tma_min_rows_setting()) * sms) return cudaSuccess;
  }
  cudaError_t e = tma_layout(a.K, L);
  if (e != cudaSuccess || L.kc == 0) return e;
  yes = mode == GemvTma::kAlways || L.kc >= kTmaAutoMinKc;
  return cudaSuccess;
}

template <int EPI, bool NORM, int C> cudaError_t launch_tma_c(const GemvArgs& a, const TmaLayout& L, cudaStream_t stream) {
  static int blocks_per_sm = 0;  // at the largest shared memory a layout takes (tma_layout keeps it within the device's)
  static size_t smem_seen = 0;
  if (blocks_per_sm == 0 || L.smem > smem_seen) {
    cudaError_t e = cudaFuncSetAttribute(gemv_tma_kernel<EPI, NORM, C>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(L.smem));
    if (e == cudaSuccess)
      e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_sm, gemv_tma_kernel<EPI, NORM, C>, 32 * (C + 1), L.smem);
    if (e != cudaSuccess) return e;
    blocks_per_sm = std::max(1, blocks_per_sm);
    smem_seen = L.smem;
  }
  int sms = 0;
  cudaError_t e = sm_count(sms);
  if (e != cudaSuccess) return e;
  constexpr int OUT = EPI == kSwiglu ? C / 2 : C;
  const int groups = (a.N + OUT - 1) / OUT;
  return launch_kernel(gemv_tma_kernel<EPI, NORM, C>, std::min(sms * blocks_per_sm, groups), 32 * (C + 1), L.smem,
                       stream, a, L.kc, L.stages);
}

template <int EPI, bool NORM> cudaError_t launch_tma(const GemvArgs& a, const TmaLayout& L, cudaStream_t stream) {
  if (L.warps == 2) return launch_tma_c<EPI, NORM, 2>(a, L, stream);
  if (L.warps == 4) return launch_tma_c<EPI, NORM, 4>(a, L, stream);
  return launch_tma_c<EPI, NORM, 8>(a, L, stream);
}

template <int EPI> cudaError_t launch_with_norm(const GemvArgs& a, cudaStream_t stream) {
  TmaLayout L;
  bool tma = false;
  cudaError_t e = tma_applies(a, EPI == kSwiglu ? 2 * a.N : a.N, L, tma);
  if (e != cudaSuccess) return e;
  if (tma) return a.norm.weight == nullptr ? launch_tma<EPI, false>(a, L, stream) : launch_tma<EPI, true>(a, L, stream);
  if (a.norm.weight == nullptr) return launch_any_rows<EPI, false>(a, stream);
  return launch_any_rows<EPI, true>(a, stream);
}

thread_local unsigned long long* g_trace_next = nullptr;  // gemv_trace_next

// The entry points' arguments, with the pending stamps (gemv_trace_next), which every entry takes first, so that they
// never reach a later call; the register GEMV writes them, the TMA GEMV does not.
GemvArgs args_of(const bf16* x, const bf16* W, bf16* y, int N, int K, const GemvNorm& norm, unsigned long long* trace) {
  GemvArgs a;
  a.trace = trace;
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

namespace {
GemvTma gemv_tma_from_env() {
  const char* env = std::getenv("SPECPRESS_GEMV_TMA");
  if (env == nullptr || *env == '\0' || std::strcmp(env, "1") == 0) return GemvTma::kAuto;
  if (std::strcmp(env, "0") == 0) return GemvTma::kOff;
  if (std::strcmp(env, "always") == 0) return GemvTma::kAlways;
  bad_env_value("SPECPRESS_GEMV_TMA", env, "0, 1 or always");
}
GemvTma& gemv_tma_setting() {
  static GemvTma mode = [] {  // read once, with the TMA GEMV's tuning variables, so that a bad one fails at once
    const GemvTma m = gemv_tma_from_env();
    (void)tma_stages_setting();
    (void)tma_warps_setting();
    (void)tma_min_rows_setting();
    return m;
  }();
  return mode;
}
}  // namespace

GemvTma gemv_tma() { return gemv_tma_setting(); }
void gemv_trace_next(unsigned long long* stamps) { g_trace_next = stamps; }
void set_gemv_tma(GemvTma mode) { gemv_tma_setting() = mode; }

namespace {
int& gemv_wide_setting() {  // read once; a bad value fails naming the variable
  static int level = env_int("SPECPRESS_GEMV_WIDE", 0, 2, 2, "0, 1 or 2");
  return level;
}
}  // namespace
int gemv_wide_level() { return gemv_wide_setting(); }
void set_gemv_wide_level(int level) { gemv_wide_setting() = std::clamp(level, 0, 2); }

int gemv_lane_loads(int N, int K, bool residual) {
  if (N <= 0 || K <= 0 || K % 8 != 0) return 0;
  GemvArgs a;
  a.N = N;
  a.K = K;
  RowsChoice c;
  const cudaError_t e = residual ? choose_rows<kResidual, false>(a, c) : choose_rows<kPlain, false>(a, c);
  return e == cudaSuccess ? c.loads : 0;
}

bool gemv_tma_takes(int rows, int K) {
  if (rows <= 0 || K <= 0 || K % 8 != 0) return false;
  GemvArgs a;
  a.N = rows;
  a.K = K;
  TmaLayout L;
  bool yes = false;
  return tma_applies(a, rows, L, yes) == cudaSuccess && yes;
}

cudaError_t gemv(const __nv_bfloat16* x, const __nv_bfloat16* W, __nv_bfloat16* y, int N, int K, cudaStream_t stream,
                 const GemvNorm& norm) {
  unsigned long long* trace = std::exchange(g_trace_next, nullptr);
  if (N <= 0) return cudaSuccess;
  if (!valid(x, W, y, K, norm)) return cudaErrorInvalidValue;
  return launch_with_norm<kPlain>(args_of(x, W, y, N, K, norm, trace), stream);
}

cudaError_t gemv_swiglu(const __nv_bfloat16* x, const __nv_bfloat16* W, __nv_bfloat16* act, int I, int K,
                        cudaStream_t stream, const GemvNorm& norm) {
  unsigned long long* trace = std::exchange(g_trace_next, nullptr);
  if (I <= 0) return cudaSuccess;
  if (!valid(x, W, act, K, norm)) return cudaErrorInvalidValue;
  return launch_with_norm<kSwiglu>(args_of(x, W, act, I, K, norm, trace), stream);
}

cudaError_t gemv_residual(const __nv_bfloat16* x, const __nv_bfloat16* W, __nv_bfloat16* residual,
                          __nv_bfloat16* tap, int N, int K, cudaStream_t stream) {
  unsigned long long* trace = std::exchange(g_trace_next, nullptr);
  if (N <= 0) return cudaSuccess;
  if (!valid(x, W, residual, K, GemvNorm{})) return cudaErrorInvalidValue;
  GemvArgs a = args_of(x, W, residual, N, K, GemvNorm{}, trace);
  a.tap = tap;
  return launch_with_norm<kResidual>(a, stream);
}

}  // namespace specpress::kernels
