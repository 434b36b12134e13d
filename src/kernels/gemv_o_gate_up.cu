// gemv_o_gate_up.cu — see gemv_o_gate_up.h. A block is 4 warps, 5 blocks an SM (at most 102 registers a thread, as
// the o GEMV's 16-load instance in gemv.cu). Warp w: o row w (its 16 chunks a lane in registers, loaded before the
// PDL wait), then gate/up units [w * upw, (w + 1) * upw) of 2 outputs (gate rows n0, n0 + 1, up rows I + n0, I + n0 +
// 1), 2 chunks of each row a lane a step (8 loads in flight), as gemv.cu's SwiGLU GEMV walks them. Each row's chunks
// are summed in the register GEMV's order and reduced by the same butterfly, so every output is bitwise that of
// gemv_residual followed by gemv_swiglu.
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "kernels/common.cuh"
#include "kernels/gemv_math.cuh"
#include "kernels/gemv_o_gate_up.h"
#include "kernels/tma.cuh"

namespace specpress::kernels {
namespace {
using namespace detail;
constexpr int kWarps = 4, kBlocksPerSm = 5;
constexpr int kOLoads = 16;                  // o: a lane's chunks of its row, all in flight (K_o <= 4096)
constexpr int kRows = 4, kU = 2;             // gate/up: a unit's rows, chunks of each a lane a step
constexpr int kStepChunks = 32 * kU;         // a row's chunks a step (1 KB)
constexpr int kMaxStage = 2, kMaxH = 16384;  // staged steps (2: 32 KB a block, 5 blocks an SM)

struct Args {
  const bf16* attn = nullptr;
  const bf16* Wo = nullptr;
  bf16* x = nullptr;
  const bf16* Wgu = nullptr;
  bf16* act = nullptr;
  int H = 0, Ko = 0, I = 0;
  float eps = 1e-6f;
  unsigned* barrier = nullptr;
  int units_per_warp = 1, stage_steps = 0, stage_when = 0;
  unsigned long long* trace = nullptr;  // the traced instance's stamps (step_trace.h: the GEMV's fields and kStArrived .. kStStaged)
};
// Every block of the grid arrives and waits for the others (all are resident: the host checks). barrier[0] only grows
// (modulo 2^32): thread 0 read it as `base` when the block started (the previous launch's arrivals are all in by then:
// its blocks passed their barrier before they let the kernels after them start), arrives with a release reduction (no
// reply to wait for) and loads it with acquire until it reaches base + the grid; a block barrier on each side, so each
// block's writes before the barrier are visible to every block after it. A second without the last arrival is a grid
// that could not be resident after all (the host's occupancy check wrong, say, under another process's kernels): a
// trap, an error for the stream, not a hang. (The fortieth pass also measured a generation word that the last arrival
// advances, and pauses between the loads: neither was faster.)
template <bool TRACE>
__device__ __forceinline__ void grid_barrier(unsigned* barrier, unsigned base, unsigned long long* trace) {
  __syncthreads();
  if constexpr (TRACE) step_stamp(trace, kStArrived);
  if (threadIdx.x == 0) {
    const unsigned long long t0 = globaltimer();
    red_add_release(barrier, 1u);
    const unsigned target = base + gridDim.x;
    while (static_cast<int>(ld_acquire(barrier) - target) < 0)
      if (globaltimer() - t0 > 1000000000ull) __trap();
  }
  if constexpr (TRACE) step_stamp(trace, kStReleased);
  __syncthreads();
}

template <bool TRACE>
__global__ void __launch_bounds__(kWarps * 32, kBlocksPerSm) o_gate_up_kernel(Args a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap();  // bulk copies and mbarriers need sm_90; the host never launches it there (gemv_o_gate_up_takes)
#else
  // [kWarps][kRows][S * kStepChunks] staged gate/up chunks, then x [H / 8] after the barrier
  extern __shared__ __align__(128) uint4 smem[];
  __shared__ __align__(8) uint64_t staged[kWarps];
  const int lane = threadIdx.x & 31, wib = threadIdx.x >> 5, warp = blockIdx.x * kWarps + wib;
  const int H = a.H, I = a.I, nvec = H / 8, nvec_o = a.Ko / 8;
  const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
  if constexpr (TRACE) {
    step_stamp(a.trace, kStStart);
    step_stamp_sm(a.trace);
  }
  __shared__ unsigned barrier_base;  // the barrier's count when the block started (held here, not in a register)
  if (threadIdx.x == 0) barrier_base = ld_relaxed(a.barrier);

  // o: this warp's row, all of it, before the wait (weights never depend on an earlier kernel)
  const bool o_row = warp < H;
  uint4 wo[kOLoads];
  if (o_row) {
    const bf16* row = a.Wo + static_cast<int64_t>(warp) * a.Ko;
#pragma unroll
    for (int u = 0; u < kOLoads; ++u) {
      const int c = lane + 32 * u;
      wo[u] = c < nvec_o ? ld_stream(row + static_cast<int64_t>(c) * 8) : zero;
    }
  }

  // gate/up: this warp's units, and its first unit's first S steps staged into shared memory
  const int units = (I + 1) / 2, steps = (nvec + kStepChunks - 1) / kStepChunks;
  const int u_beg = warp * a.units_per_warp, u_end = min(units, u_beg + a.units_per_warp);
  const int S = u_beg < u_end ? min(a.stage_steps, steps) : 0;
  const int staged_chunks = min(S * kStepChunks, nvec);  // a row's staged chunks
  uint4* stage = smem + static_cast<size_t>(wib) * kRows * a.stage_steps * kStepChunks;
  auto row_of = [&](int n0, int r) {  // past the last output: the last row again (its output is not written)
    const int n = min(n0 + (r & 1), I - 1);
    return a.Wgu + (static_cast<int64_t>(n) + (r >= 2 ? I : 0)) * H;
  };
  if (S > 0 && lane == 0) {
    mbar_init(&staged[wib], 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncwarp();
  auto issue_stage = [&] {
    if (S == 0 || lane != 0) return;
    const unsigned bytes = static_cast<unsigned>(staged_chunks) * 16u;
    mbar_expect_tx(&staged[wib], kRows * bytes);
#pragma unroll
    for (int r = 0; r < kRows; ++r)
      bulk_copy(stage + r * S * kStepChunks, row_of(u_beg * 2, r), bytes, &staged[wib]);
  };
  if (a.stage_when == 0) issue_stage();
  if (a.stage_when == 1) {
    // once lane 0's o loads have arrived: an instruction that reads them (its result is never true in practice, and
    // harmless if it were)
    unsigned seen = 0;
#pragma unroll
    for (int u = 0; u < kOLoads; ++u) seen ^= wo[u].x ^ wo[u].w;
    if (seen == 0x7fc0ffeeu) __nanosleep(1);
    issue_stage();
  }

  if constexpr (TRACE) step_stamp(a.trace, kStIssued);
  pdl_wait();
  if constexpr (TRACE) step_stamp(a.trace, kStWaited);
  if (o_row) {  // as gemv.cu's 16-load residual instance: x's chunks in two groups of 8
    const uint4* av = reinterpret_cast<const uint4*>(a.attn);
    float acc = 0.f;
#pragma unroll
    for (int g0 = 0; g0 < kOLoads; g0 += 8) {
      uint4 xc[8];
#pragma unroll
      for (int u = 0; u < 8; ++u) {
        const int c = lane + 32 * (g0 + u);
        xc[u] = c < nvec_o ? __ldg(av + c) : zero;
      }
#pragma unroll
      for (int u = 0; u < 8; ++u) {
        const float xf[8] = {lo_f(xc[u].x), hi_f(xc[u].x), lo_f(xc[u].y), hi_f(xc[u].y),
                             lo_f(xc[u].z), hi_f(xc[u].z), lo_f(xc[u].w), hi_f(xc[u].w)};
        acc = dot8(wo[g0 + u], xf, acc);
      }
    }
    const float sum = warp_sum(acc) * 1.f;
    if (lane == 0) a.x[warp] = residual_value(a.x[warp], sum);
  }
  if (a.stage_when == 2) issue_stage();

  // gate/up's first step from global memory goes out before the barrier: (u_beg, S), or the next unit's first
  uint4 wv[kU][kRows];
  auto load_step = [&](int n0, int c0) { load_unit_step(([&](int r) { return row_of(n0, r); }), c0, nvec, wv); };
  const int first_unit = S < steps ? u_beg : u_beg + 1, first_step = S < steps ? S : 0;
  if (first_unit < u_end) load_step(first_unit * 2, lane + first_step * kStepChunks);

  grid_barrier<TRACE>(a.barrier, barrier_base, a.trace);

  // x after every o row's add, into shared memory past L1 (other SMs wrote it in this kernel), and the folded norm's
  // factor, summed as the register GEMV's warps sum it
  uint4* xs = smem + static_cast<size_t>(kWarps) * kRows * a.stage_steps * kStepChunks;
  for (int c = threadIdx.x; c < nvec; c += kWarps * 32) xs[c] = __ldcg(reinterpret_cast<const uint4*>(a.x) + c);
  __syncthreads();
  if constexpr (TRACE) step_stamp(a.trace, kStXReady);
  if (u_beg < u_end) {
    float ss = 0.f;
    for (int c = lane; c < nvec; c += 32) ss = sumsq8(xs[c], ss);
    const float row_factor = rsqrtf(warp_sum(ss) / static_cast<float>(H) + a.eps);
    if (S > 0) mbar_wait(&staged[wib], 0);
    if constexpr (TRACE)
      if (S > 0 && wib == 0) step_stamp(a.trace, kStStaged);
    for (int unit = u_beg; unit < u_end; ++unit) {
      const int n0 = unit * 2;
      float acc[kRows];
#pragma unroll
      for (int r = 0; r < kRows; ++r) acc[r] = 0.f;
      for (int s = 0; s < steps; ++s) {
        const int c0 = lane + s * kStepChunks;
        const bool from_smem = unit == u_beg && s < S;
        if (!from_smem && !(unit == first_unit && s == first_step)) load_step(n0, c0);
#pragma unroll
        for (int u = 0; u < kU; ++u) {
          const int c = c0 + 32 * u;
          const uint4 xc = c < nvec ? xs[c] : zero;
          const float xf[8] = {lo_f(xc.x), hi_f(xc.x), lo_f(xc.y), hi_f(xc.y),
                               lo_f(xc.z), hi_f(xc.z), lo_f(xc.w), hi_f(xc.w)};
#pragma unroll
          for (int r = 0; r < kRows; ++r) {
            const uint4 w = !from_smem ? wv[u][r] : c < nvec ? stage[r * S * kStepChunks + c] : zero;
            acc[r] = dot8(w, xf, acc[r]);
          }
        }
      }
      float sum[kRows];
#pragma unroll
      for (int r = 0; r < kRows; ++r) sum[r] = warp_sum(acc[r]) * row_factor;
#pragma unroll
      for (int o = 0; o < 2; ++o)
        if (lane == o && n0 + o < I) a.act[n0 + o] = swiglu_value(sum[o], sum[o + 2]);
    }
  }
  // every weight of this warp has been read (and the barrier passed): the next kernel may take the freed slots
  if constexpr (TRACE) step_stamp_warp(a.trace, kStWarpEnd);
  pdl_trigger();
#endif
}

size_t smem_bytes(int H, int stage_steps) {
  return sizeof(uint4) * (static_cast<size_t>(kWarps) * kRows * stage_steps * kStepChunks + static_cast<size_t>(H) / 8);
}

// The settings' kernel attributes (both instances) and its blocks an SM at H's shared memory, once per H.
cudaError_t resident_blocks(int H, int& blocks) {
  static int cached_h = -1, cached_blocks = 0;
  if (H != cached_h) {
    const GemvOGateUpSettings& s = gemv_o_gate_up_settings();
    const size_t smem = smem_bytes(H, s.stage_steps);
    int sms = 0, per_sm = 0, dev = 0, cc_major = 0;
    cudaError_t e = sm_count(sms);
    if (e == cudaSuccess) e = cudaGetDevice(&dev);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&cc_major, cudaDevAttrComputeCapabilityMajor, dev);
    for (auto* kernel : {o_gate_up_kernel<false>, o_gate_up_kernel<true>}) {
      if (e == cudaSuccess)
        e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
      if (e == cudaSuccess && s.carveout >= 0)
        e = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, s.carveout);
      int n = 0;
      if (e == cudaSuccess) e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, kWarps * 32, smem);
      per_sm = kernel == o_gate_up_kernel<false> ? n : std::min(per_sm, n);
    }
    if (e != cudaSuccess) return e;
    cached_h = H;
    cached_blocks = cc_major >= 9 ? sms * per_sm : 0;  // no bulk copies below sm_90
  }
  blocks = cached_blocks;
  return cudaSuccess;
}

int carveout_setting() {
  const char* env = std::getenv("SPECPRESS_OGU_CARVEOUT");
  if (env != nullptr && std::strcmp(env, "driver") == 0) return -1;
  return env_int("SPECPRESS_OGU_CARVEOUT", 0, 100, -1, "0 .. 100 or driver");
}

}  // namespace

const GemvOGateUpSettings& gemv_o_gate_up_settings() {
  static const GemvOGateUpSettings s{env_int("SPECPRESS_OGU_STAGE", 0, kMaxStage, 2, "0, 1 or 2"),
                                     env_int("SPECPRESS_OGU_STAGE_WHEN", 0, 2, 1, "0, 1 or 2"),
                                     carveout_setting()};
  return s;
}

bool gemv_o_gate_up_takes(int H, int Ko, int I) {
  if (H < 8 || H % 8 != 0 || H > kMaxH || Ko < 8 || Ko % 8 != 0 || Ko > kOLoads * 32 * 8 || I < 1) return false;
  int resident = 0;
  if (resident_blocks(H, resident) != cudaSuccess) return false;
  return (H + kWarps - 1) / kWarps <= resident;
}

cudaError_t gemv_o_gate_up(const __nv_bfloat16* attn, const __nv_bfloat16* Wo, __nv_bfloat16* x,
                           const __nv_bfloat16* Wgu, __nv_bfloat16* act, int H, int Ko, int I, float eps,
                           unsigned* barrier, cudaStream_t stream, unsigned long long* trace) {
  if (barrier == nullptr || !gemv_o_gate_up_takes(H, Ko, I)) return cudaErrorInvalidValue;
  const GemvOGateUpSettings& s = gemv_o_gate_up_settings();
  Args a;
  a.attn = attn;
  a.Wo = Wo;
  a.x = x;
  a.Wgu = Wgu;
  a.act = act;
  a.H = H;
  a.Ko = Ko;
  a.I = I;
  a.eps = eps;
  a.barrier = barrier;
  const int blocks = (H + kWarps - 1) / kWarps, warps = blocks * kWarps, units = (I + 1) / 2;
  a.units_per_warp = (units + warps - 1) / warps;
  a.stage_steps = s.stage_steps;
  a.stage_when = s.stage_when;
  a.trace = trace;
  return launch_kernel(trace != nullptr ? o_gate_up_kernel<true> : o_gate_up_kernel<false>, blocks, kWarps * 32,
                       smem_bytes(H, s.stage_steps), stream, a);
}

}  // namespace specpress::kernels
