// gemm_wg16.cu — see gemm_wg16.h. A block is one consumer warpgroup (warps 0-3) and a producer warp (warp 4).
// Stage s of the ring holds kb W boxes (64 rows x 64 k, 8 KB each) and then kb X boxes (16 rows x 64 k, 2 KB),
// all in the TMA's 128-byte swizzle, which is the K-major layout a wgmma descriptor with 128-byte swizzling names:
// 8-row groups of 1024 bytes (the stride byte offset), a k16 slice 32 bytes further into each 128-byte row.
// full[s] completes when a stage's bytes have landed (the producer's expect_tx), empty[s] when the 4 consumer warps
// have finished the wgmma that read it (one arrival a warp). A consumer thread keeps kChains accumulators, so that a
// stage's wgmma are not one chain of dependent products.
#include <cuda.h>  // CUtensorMap and its enums (the encoder is reached through the runtime: no libcuda link)

#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>

#include "kernels/argmax.cuh"
#include "kernels/common.cuh"
#include "kernels/gemm_wg16.h"
#include "kernels/tma.cuh"

namespace specpress::kernels {
namespace {
using namespace detail;

constexpr int kWBox = kWg16Rows * kWg16Chunk * 2;   // 8 KB
constexpr int kXBox = kWg16MaxT * kWg16Chunk * 2;   // 2 KB
constexpr int kThreads = 160;                       // 4 consumer warps + the producer
constexpr int kTileFloats = kWg16Rows * kWg16MaxT;  // one tile's partial (1024 floats)
// Independent wgmma accumulators a consumer thread keeps: a stage's wgmma go to them in turn, so that they are not
// one chain of dependent products. Against one chain: 4B verify 30-36 us shorter, 8B 26-28; 8 chains as 4, 16 slower
// (docs/PERF.md, fifty-first pass).
[[maybe_unused]] constexpr int kChains = 4;  // (only passes that compile the kernel body use it)
// when a block lets the next kernel launch under PDL (KernelArgs::trigger): at its exit (none), once its producer has
// issued every load, or as the producer starts
constexpr int kTriggerNone = 0, kTriggerAfterLoads = 1, kTriggerAtStart = 2;

struct KernelArgs {
  __nv_bfloat16* Y;
  const __nv_bfloat16* R;
  int64_t ldy, ldr;
  int T, N, tiles, chunks, splits, stages, tiles_per_block;
  float* workspace;
  unsigned* counters;
  int trigger, prefill, overlap;  // trigger: kTriggerNone, kTriggerAfterLoads or kTriggerAtStart
  int x_stage_box;  // x_map is encode_stage's: one copy a stage (Wg16Args::x_stage_box); in the pointer's padding
  const float* row_scale;  // SwiGLU form: the tokens' factors on gate and up (nullptr: none)
  int silu_mul;            // SwiGLU form: N is the number of features (W has 2N rows), tiles of 32 features
  int row_norm;            // the factors are rsqrt(mean(x^2) + eps) of X's rows, summed here (SwiGLU or plain form)
  float eps;
  int K;
  unsigned long long* trace;  // this launch's stamps, kWg16TraceFields a block (nullptr: off; Wg16Args::trace)
};
// The fused argmax's buffers (Wg16Args::argmax), a kernel parameter of their own: with these four pointers appended
// to KernelArgs instead, every instance read its parameters through a generic address (the PTX of the products without
// the argmax changed too) and the Qwen3-4B verify step took about 60 us longer (docs/PERF.md, forty-ninth pass).
struct ArgmaxArgs {
  int64_t* tokens;
  float* values;
  int* indices;
  unsigned* counter;
};

// wgmma needs the architecture-specific target (sm_90a, as CMakeLists.txt builds); any other device build gets a
// kernel that traps, which the host side never launches (gemm_wg16 checks the device).
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define SPECPRESS_WGMMA 1
#endif

// The cluster sum's pieces (Wg16Args::cluster_sum): a tile's K splits run as one thread-block cluster, the other
// splits store their partials into split 0's shared memory and arrive on its barrier, so that no partial goes through
// the workspace, a fence and a counter. Only the kernel body uses them, so they are compiled where it is.
#if defined(SPECPRESS_WGMMA)
__device__ __forceinline__ unsigned cluster_ctas() {
  unsigned n;
  asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(n));
  return n;
}
// every thread of the cluster arrives once, after the barriers' init; waiting (acquire) orders the init before a
// remote access
__device__ __forceinline__ void cluster_arrive_relaxed() {
  asm volatile("barrier.cluster.arrive.relaxed;\n" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait;\n" ::: "memory"); }
__device__ __forceinline__ unsigned map_to_rank(unsigned local, unsigned rank) {
  unsigned r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(local), "r"(rank));
  return r;
}
__device__ __forceinline__ void st_cluster_v4(unsigned addr, float a, float b, float c, float d) {
  asm volatile("st.shared::cluster.v4.f32 [%0], {%1, %2, %3, %4};" ::"r"(addr), "f"(a), "f"(b), "f"(c), "f"(d)
               : "memory");
}
__device__ __forceinline__ void mbar_arrive_remote(unsigned remote_bar) {
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];\n" ::"r"(remote_bar) : "memory");
}
__device__ __forceinline__ void mbar_wait_cluster(uint64_t* bar, unsigned parity) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%0], %1;\n"
      "@!p bra WAIT_%=;\n"
      "}\n" ::"r"(smem_u32(bar)),
      "r"(parity)
      : "memory");
}
#endif

#if !defined(__CUDA_ARCH__) || defined(SPECPRESS_WGMMA)
// A wgmma shared-memory descriptor: K-major, 128-byte swizzle, 8-row groups 1024 bytes apart.
__device__ __forceinline__ uint64_t smem_desc(const void* p) {
  const uint64_t addr = smem_u32(p);
  return ((addr & 0x3FFFF) >> 4) | (uint64_t{1} << 16) | (uint64_t{1024 >> 4} << 32) | (uint64_t{1} << 62);
}
// d (64 x 16 fp32, this thread's 8) += A (64 x 16, descriptor a) · B (16 x 16, descriptor b); scale_d 0: d = A · B.
__device__ __forceinline__ void wgmma_m64n16k16(float* d, uint64_t a, uint64_t b, int scale_d) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %10, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, 1, 0, 0;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
      : "l"(a), "l"(b), "r"(scale_d));
}
// The diagnostic stamps (Wg16Args::trace): %globaltimer ns into field f of this block's row.
template <bool TRACE>
__device__ __forceinline__ void stamp(unsigned long long* trace, int f) {
  if (!TRACE || trace == nullptr) return;
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  trace[static_cast<size_t>(blockIdx.x) * kWg16TraceFields + f] = t;
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait_all() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait_1() { asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory"); }
// One 4D box of `map` at (c0, c1, c2, c3) into shared memory, counted on `bar` (the SwiGLU form's W).
__device__ __forceinline__ void tma_load_4d(void* dst, const CUtensorMap* map, int c0, int c1, int c2, int c3,
                                            uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6}], "
      "[%2];\n" ::"r"(smem_u32(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_u32(bar)), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}
// One 3D box of `map` at (c0, c1, c2) into shared memory, counted on `bar` (X as a stage's chunks, x_stage_box).
__device__ __forceinline__ void tma_load_3d(void* dst, const CUtensorMap* map, int c0, int c1, int c2, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];\n" ::
          "r"(smem_u32(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_u32(bar)), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}
// One 2D box of `map` at (column c0, row c1) into shared memory, counted on `bar`.
__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap* map, int c0, int c1, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];\n" ::"r"(
          smem_u32(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_u32(bar)), "r"(c0), "r"(c1)
      : "memory");
}
#endif

#if defined(SPECPRESS_WGMMA)
// The fused argmax's end (Wg16Args::argmax), for the 128 consumer threads of a block: best_v / best_i [q] are this
// thread's first maxima over its rows of token 8 (q >> 1) + 2 (lane % 4) + (q & 1), rows in ascending order. The
// block's bests a token go to the launch's per-block buffers; the last block to count itself merges every block's
// (in any order: beats() is a total order on first maxima) and writes the tokens.
__device__ __forceinline__ void argmax_epilogue(int64_t* argmax, float* values, int* indices, unsigned* counter, int T,
                                                float (&best_v)[4], int (&best_i)[4]) {
  __shared__ float warp_v[4][kWg16MaxT];
  __shared__ int warp_i[4][kWg16MaxT];
  __shared__ int merge;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    lanes_argmax<4, 8, 16>(best_v[q], best_i[q]);  // the lanes of one lane % 4 hold the same tokens' other rows
    if (lane < 4) {
      const int tok = 8 * (q >> 1) + 2 * lane + (q & 1);
      warp_v[warp][tok] = best_v[q];
      warp_i[warp][tok] = best_i[q];
    }
  }
  consumers_sync<4>();
  if (tid < kWg16MaxT) {
    float v = warp_v[0][tid];
    int i = warp_i[0][tid];
#pragma unroll
    for (int w = 1; w < 4; ++w) keep_best(warp_v[w][tid], warp_i[w][tid], v, i);
    values[blockIdx.x * kWg16MaxT + tid] = v;
    indices[blockIdx.x * kWg16MaxT + tid] = i;
    __threadfence();
  }
  consumers_sync<4>();
  if (tid == 0) {
    const unsigned prev = atomicAdd(counter, 1u);
    merge = prev == gridDim.x - 1;
    if (merge) *counter = 0;  // every block has counted itself: ready for the next launch
  }
  consumers_sync<4>();
  if (!merge) return;
  __threadfence();
  // token tid / 8 over blocks tid % 8, tid % 8 + 8, ...; then the 8 lanes of a token (aligned in their warp)
  const int tok = tid >> 3, part = tid & 7;
  float v = -INFINITY;
  int i = kNoIndex;
  for (int b = part; b < static_cast<int>(gridDim.x); b += 8)
    keep_best(__ldcg(values + b * kWg16MaxT + tok), __ldcg(indices + b * kWg16MaxT + tok), v, i);
  lanes_argmax<1, 2, 4>(v, i);
  if (part == 0 && tok < T) argmax[tok] = i == kNoIndex ? 0 : i;  // a row of NaN only: 0, as argmax_rows
}
#endif

// TRACE: the diagnostic stamps (Wg16Args::trace), compiled only into the traced instances, so that the kernels the
// engine runs are the same code with the trace off. ARGMAX: the fused argmax (Wg16Args::argmax), likewise compiled only
// into the LM heads' instances, so that the other products keep their code (and registers).
template <int KB, bool TRACE, bool ARGMAX>
__global__ void __launch_bounds__(kThreads) wg16_kernel(const __grid_constant__ CUtensorMap w_map,
                                                        const __grid_constant__ CUtensorMap x_map, KernelArgs a,
                                                        ArgmaxArgs am) {
#if defined(SPECPRESS_WGMMA)
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  constexpr int stage_bytes = KB * (kWBox + kXBox);
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + a.stages * stage_bytes);
  uint64_t* empty = full + a.stages;
  __shared__ int last_block;
  __shared__ float row_factor[kWg16MaxT];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  // this block's tiles: [tile0, tile0 + nt) one after the other (tiles_per_block > 1, no K split), or tile0 alone
  // for K split `split`
  const int tpb = a.tiles_per_block;
  // launched as clusters of a.splits blocks (Wg16Args::cluster_sum): a tile's splits are consecutive blocks, its split
  // 0 the cluster's rank 0; otherwise the splits of all tiles follow one another
  const bool clustered = a.splits > 1 && cluster_ctas() > 1;
  const int bx = static_cast<int>(blockIdx.x);
  const int tile0 = tpb > 1 ? bx * tpb : clustered ? bx / a.splits : bx % a.tiles;
  const int nt = tpb > 1 ? min(tpb, a.tiles - tile0) : 1;
  const int split = tpb > 1 ? 0 : clustered ? bx % a.splits : bx / a.tiles;
  // clustered: split 0's slots for the other splits' partials (after the ring's barriers), and its barrier counting
  // their threads' stores (wg16_cluster_sum_bytes)
  float* const cluster_parts = reinterpret_cast<float*>(smem + ((a.stages * stage_bytes + 16 * a.stages + 15) & ~15));
  uint64_t* const sum_bar = reinterpret_cast<uint64_t*>(cluster_parts + (a.splits - 1) * kTileFloats);
  // this split's chunk steps: steps [s0, s1) of KB chunks each (the host checks that KB divides the chunks)
  const int steps = a.chunks / KB;
  const int s0 = static_cast<int>(static_cast<int64_t>(steps) * split / a.splits);
  const int s1 = static_cast<int>(static_cast<int64_t>(steps) * (split + 1) / a.splits);
  const int n = s1 - s0, total = nt * n;  // steps a tile, steps in all (step g: tile g / n, chunk step g % n)
  if (threadIdx.x == 0) {
    stamp<TRACE>(a.trace, kWg16TraceStart);
    if (TRACE && a.trace != nullptr) {
      unsigned sm;
      asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
      a.trace[static_cast<size_t>(blockIdx.x) * kWg16TraceFields + kWg16TraceSm] = sm;
    }
    for (int s = 0; s < a.stages; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], 4);
    }
    if (clustered && split == 0) mbar_init(sum_bar, 128 * (a.splits - 1));
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  if (clustered) cluster_arrive_relaxed();  // every thread; waited for before a remote access or the exit
  if (warp == 4) {  // the producer: lane 0 issues every copy
    if (lane == 0) {
      auto load_w = [&](int g) {
        const int s = g % a.stages, tile = tile0 + g / n, i = g % n;
        mbar_expect_tx(&full[s], static_cast<unsigned>(stage_bytes));
        for (int b = 0; b < KB; ++b) {
          const int col = ((s0 + i) * KB + b) * kWg16Chunk;
          if (a.silu_mul)  // groups 4 tile .. 4 tile + 3 of 8 features, gate then up: 64 rows, as one box
            tma_load_4d(smem + s * stage_bytes + b * kWBox, &w_map, col, 0, 0, 4 * tile, &full[s]);
          else
            tma_load_2d(smem + s * stage_bytes + b * kWBox, &w_map, col, tile * kWg16Rows, &full[s]);
        }
      };
      auto load_x = [&](int g) {
        const int s = g % a.stages, i = g % n;
        if (a.x_stage_box) {  // the stage's KB chunks as one box: the same bytes in the same places
          tma_load_3d(smem + s * stage_bytes + KB * kWBox, &x_map, 0, 0, (s0 + i) * KB, &full[s]);
          return;
        }
        for (int b = 0; b < KB; ++b)
          tma_load_2d(smem + s * stage_bytes + KB * kWBox + b * kXBox, &x_map, ((s0 + i) * KB + b) * kWg16Chunk, 0,
                      &full[s]);
      };
      if (a.trigger == kTriggerAtStart) pdl_trigger();  // the next kernel's blocks may take the SMs this one leaves
      // W is constant: the whole ring before the wait on the previous kernel (prefill), X after it.
      const int first = min(total, a.stages), ahead = min(first, a.prefill);
      for (int g = 0; g < ahead; ++g) load_w(g);
      pdl_wait();
      stamp<TRACE>(a.trace, kWg16TraceWaited);
      for (int g = ahead; g < first; ++g) load_w(g);
      for (int g = 0; g < first; ++g) load_x(g);
      for (int g = first; g < total; ++g) {
        mbar_wait(&empty[g % a.stages], ((g / a.stages) - 1) & 1);
        load_w(g);
        load_x(g);
      }
      if (a.trigger == kTriggerAfterLoads) pdl_trigger();
    }
    if (clustered) cluster_wait();
    return;
  }
  pdl_wait();  // before the residual's read and any write
  // d[4 j + e]: output row 16 warp + g (+8 for e >= 2), token 8 j + 2 c + (e & 1) (g = lane / 4, c = lane % 4)
  const int g = lane >> 2, c = lane & 3;
  auto tok_of = [&](int e) { return 8 * (e >> 2) + 2 * c + (e & 1); };
  // row_norm: X row tid / 8's sum of squares, in the order of row_rms_kernel (rmsnorm.cu), whose lane l sums the
  // 8-column chunks l, l + 32, ... of the row: chunk j of box b (j = 8 b + q) is lane 8 (b % 4) + q's, so this
  // thread (q = tid % 8) keeps lanes q, q + 8, q + 16, q + 24 as ssq[0..3], and reduces them as warp_sum would.
  // X is the same for every tile: summed during the first.
  float ssq[4] = {0.f, 0.f, 0.f, 0.f};
  const int x_row = threadIdx.x >> 3, x_chunk = threadIdx.x & 7;
  const int x_offset = x_row * 128 + ((x_chunk ^ (x_row & 7)) << 4);  // the chunk under the 128-byte swizzle
  const int tid = threadIdx.x;  // 0..127
  // the fused argmax: this thread's first maximum of each of its 4 tokens (slot q: token tok_of(e) with
  // q = (e & 1) + 2 (e >> 2)) over its rows of every tile
  float best_v[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
  int best_i[4] = {kNoIndex, kNoIndex, kNoIndex, kNoIndex};
  for (int t = 0; t < nt; ++t) {
    const int tile = tile0 + t;
    auto row_of = [&](int e) { return tile * kWg16Rows + 16 * warp + g + ((e & 2) ? 8 : 0); };
    // the residual's values (SwiGLU form: the tokens' row factors), loaded now so that the epilogue does not wait
    float res[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const int row = row_of(e), tok = tok_of(e);
      if (a.silu_mul)
        res[e] = a.row_scale != nullptr && tok < a.T ? a.row_scale[tok] : 1.f;
      else
        res[e] = a.R != nullptr && row < a.N && tok < a.T ? to_f(a.R[tok * a.ldr + row]) : 0.f;
    }
    // kChains accumulators, wgmma j of a stage into chain j % kChains, added at the tile's end
    float d[8], chain[kChains][8];
#pragma unroll
    for (int q = 0; q < kChains; ++q)
#pragma unroll
      for (int j = 0; j < 8; ++j) chain[q][j] = 0.f;
    for (int i = 0; i < n; ++i) {
      const int gs = t * n + i, s = gs % a.stages;
      mbar_wait(&full[s], (gs / a.stages) & 1);
      if (gs == 0 && tid == 0) stamp<TRACE>(a.trace, kWg16TraceFirstStage);
      const uint8_t* st = smem + s * stage_bytes;
      wgmma_fence();
#pragma unroll
      for (int b = 0; b < KB; ++b) {
        const uint64_t wd = smem_desc(st + b * kWBox), xd = smem_desc(st + KB * kWBox + b * kXBox);
#pragma unroll
        for (int kk = 0; kk < 4; ++kk)  // +32 bytes a k16 slice
          wgmma_m64n16k16(chain[(4 * b + kk) % kChains], wd + 2 * kk, xd + 2 * kk, 1);
      }
      wgmma_commit();
      if (a.row_norm && t == 0) {  // while the wgmma run (both only read the stage)
#pragma unroll
        for (int b = 0; b < KB; ++b) {
          const uint4 u = *reinterpret_cast<const uint4*>(st + KB * kWBox + b * kXBox + x_offset);
          const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
          const int v = ((s0 + i) * KB + b) & 3;  // selected, not indexed: ssq stays in registers
          float acc = v == 0 ? ssq[0] : v == 1 ? ssq[1] : v == 2 ? ssq[2] : ssq[3];
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const float2 f = __bfloat1622float2(h[e]);
            acc += f.x * f.x + f.y * f.y;
          }
#pragma unroll
          for (int w = 0; w < 4; ++w)
            if (w == v) ssq[w] = acc;
        }
      }
      if (a.overlap) {
        // one group left in flight: the previous stage's wgmma have read their operands, so that stage is free
        // (one tile a block: the host refuses overlap with tiles_per_block > 1)
        wgmma_wait_1();
        __syncwarp();
        if (lane == 0 && i > 0) mbar_arrive(&empty[(i - 1) % a.stages]);
      } else {
        wgmma_wait_all();
        __syncwarp();
        if (lane == 0) mbar_arrive(&empty[s]);
      }
    }
    wgmma_wait_all();
#pragma unroll
    for (int j = 0; j < 8; ++j) d[j] = (chain[0][j] + chain[1][j]) + (chain[2][j] + chain[3][j]);
    static_assert(kChains == 4, "the chains' sum above adds four");
    if (t == nt - 1 && tid == 0) stamp<TRACE>(a.trace, kWg16TraceConsumed);
    if (clustered) {
      if (split != 0) {  // into split 0's slot split - 1, then one arrival a thread on its barrier
        cluster_wait();  // split 0's barrier is initialised
        const unsigned slot = smem_u32(cluster_parts + (split - 1) * kTileFloats + 8 * tid);
        const unsigned remote = map_to_rank(slot, 0);
        st_cluster_v4(remote, d[0], d[1], d[2], d[3]);
        st_cluster_v4(remote + 16, d[4], d[5], d[6], d[7]);
        mbar_arrive_remote(map_to_rank(smem_u32(sum_bar), 0));
        if (tid == 0) {
          stamp<TRACE>(a.trace, kWg16TraceArrived);
          stamp<TRACE>(a.trace, kWg16TraceEnd);
        }
        return;
      }
      cluster_wait();
      if (tid == 0) {
        stamp<TRACE>(a.trace, kWg16TraceArrived);
        if (TRACE && a.trace != nullptr)
          a.trace[static_cast<size_t>(blockIdx.x) * kWg16TraceFields + kWg16TraceLast] = 1;
      }
      mbar_wait_cluster(sum_bar, 0);  // every other split's threads have stored (release / acquire, cluster scope)
      // in split order from zero, as the workspace sum below: the same bits
      float own[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) own[j] = d[j], d[j] = 0.f;
#pragma unroll
      for (int j = 0; j < 8; ++j) d[j] += own[j];
      for (int sp = 1; sp < a.splits; ++sp) {
        const float4* p = reinterpret_cast<const float4*>(cluster_parts + (sp - 1) * kTileFloats + 8 * tid);
        const float4 u = p[0], v = p[1];
        d[0] += u.x, d[1] += u.y, d[2] += u.z, d[3] += u.w;
        d[4] += v.x, d[5] += v.y, d[6] += v.z, d[7] += v.w;
      }
    } else if (a.splits > 1) {
      float* const tile_parts = a.workspace + static_cast<size_t>(tile) * a.splits * kTileFloats;  // its partials
      float4* part = reinterpret_cast<float4*>(tile_parts + static_cast<size_t>(split) * kTileFloats);
      part[2 * tid] = make_float4(d[0], d[1], d[2], d[3]);
      part[2 * tid + 1] = make_float4(d[4], d[5], d[6], d[7]);
      __threadfence();
      consumers_sync<4>();
      if (tid == 0) {
        const unsigned prev = atomicAdd(&a.counters[tile], 1u);
        last_block = prev == static_cast<unsigned>(a.splits) - 1;
        if (last_block) a.counters[tile] = 0;  // every block of this tile has arrived: ready for the next launch
        stamp<TRACE>(a.trace, kWg16TraceArrived);
        if (TRACE && a.trace != nullptr)
          a.trace[static_cast<size_t>(blockIdx.x) * kWg16TraceFields + kWg16TraceLast] = last_block;
      }
      consumers_sync<4>();
      if (!last_block) {
        if (tid == 0) stamp<TRACE>(a.trace, kWg16TraceEnd);
        return;
      }
      __threadfence();
#pragma unroll
      for (int j = 0; j < 8; ++j) d[j] = 0.f;
      // In split order, so that the sum does not depend on which block came last. The loads of kSumBatch splits
      // are issued together, then added (the same order, so the same bits as one split at a time): the last block's
      // tail from its arrival to its end went 1.73 -> 1.54 us (median, the 4B verify's o products) and the 4B
      // verify step 14-18 us shorter (docs/PERF.md, fiftieth pass).
      constexpr int kSumBatch = 4;
      for (int sp0 = 0; sp0 < a.splits; sp0 += kSumBatch) {
        float4 u[kSumBatch], v[kSumBatch];
#pragma unroll
        for (int b = 0; b < kSumBatch; ++b) {
          if (sp0 + b >= a.splits) break;
          const float4* p = reinterpret_cast<const float4*>(tile_parts + static_cast<size_t>(sp0 + b) * kTileFloats);
          u[b] = __ldcg(p + 2 * tid);
          v[b] = __ldcg(p + 2 * tid + 1);
        }
#pragma unroll
        for (int b = 0; b < kSumBatch; ++b) {
          if (sp0 + b >= a.splits) break;
          d[0] += u[b].x, d[1] += u[b].y, d[2] += u[b].z, d[3] += u[b].w;
          d[4] += v[b].x, d[5] += v[b].y, d[6] += v[b].z, d[7] += v[b].w;
        }
      }
    }
    if (a.row_norm) {
      if (t == 0) {  // warp_sum's levels 16 and 8 inside the thread, then 4, 2, 1 across the row's 8 lanes
        float v = (ssq[0] + ssq[2]) + (ssq[1] + ssq[3]);
#pragma unroll
        for (int o = 4; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        if (x_chunk == 0) row_factor[x_row] = rsqrtf(v / static_cast<float>(a.K) + a.eps);
        consumers_sync<4>();
      }
#pragma unroll
      for (int e = 0; e < 8; ++e) res[e] = row_factor[tok_of(e)];
    }
    if (a.silu_mul) {
      // the tile's rows 16 warp + g and 16 warp + g + 8 are feature j's gate and up rows: silu_mul's arithmetic
      // (swiglu.cu) on the bf16 products, so the result is bitwise that of this product into gate_up + silu_mul
      const int j = tile * (kWg16Rows / 2) + 8 * warp + g;
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int e = (q & 1) + 4 * (q >> 1), tok = tok_of(e);  // e = 0, 1, 4, 5: gate d[e], up d[e + 2]
        if (j >= a.N || tok >= a.T) continue;
        float gv = round_b(d[e]), uv = round_b(d[e + 2]);
        if (a.row_scale != nullptr || a.row_norm) {
          gv = round_b(gv * res[e]);
          uv = round_b(uv * res[e]);
        }
        a.Y[tok * a.ldy + j] = to_b(round_b(gv / (1.f + expf(-gv))) * uv);
      }
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const int row = row_of(e), tok = tok_of(e);
        // row_norm: the bf16 product scaled by the token's factor, as the attention applies a given row_scale
        if (row >= a.N || tok >= a.T) continue;
        const bf16 y = to_b(a.row_norm ? round_b(d[e]) * res[e] : d[e] + res[e]);
        a.Y[tok * a.ldy + row] = y;
        // the value as written; this thread's rows of a token ascend (g before g + 8, tile by tile)
        const int q = (e & 1) + 2 * (e >> 2);
        if constexpr (ARGMAX) {
          if (replaces(to_f(y), best_v[q], best_i[q])) {
            best_v[q] = to_f(y);
            best_i[q] = row;
          }
        }
      }
    }
  }
  if constexpr (ARGMAX)
    argmax_epilogue(am.tokens, am.values, am.indices, am.counter, a.T, best_v, best_i);
  if (TRACE && a.trace != nullptr) {  // every consumer's stores issued
    consumers_sync<4>();
    if (tid == 0) stamp<TRACE>(a.trace, kWg16TraceEnd);
  }
#elif defined(__CUDA_ARCH__)
  __trap();
#endif
}

// cuTensorMapEncodeTiled, through the runtime's driver entry point (looked up once).
using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                 const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
EncodeTiled encoder() {
  static EncodeTiled fn = nullptr;
  static std::once_flag once;
  std::call_once(once, [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) == cudaSuccess &&
        q == cudaDriverEntryPointSuccess)
      fn = reinterpret_cast<EncodeTiled>(p);
  });
  return fn;
}

// A [rows, cols] bf16 matrix (row stride ld elements) as boxes of box_rows x 64 columns, 128-byte swizzled.
bool encode(CUtensorMap& map, const void* base, int64_t rows, int64_t cols, int64_t ld, int box_rows,
            CUtensorMapL2promotion promote) {
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(ld) * 2};
  const cuuint32_t box[2] = {kWg16Chunk, static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t elem[2] = {1, 1};
  return encoder()(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(base), dims, strides, box, elem,
                   CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, promote,
                   CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// The SwiGLU form's W, gate rows [0, I) then up rows [I, 2I) of row stride ld, as a 4D tensor (k, i, half, group)
// with feature 8 group + i: a box of 4 groups puts each group's 8 gate rows and then its 8 up rows together, 64
// rows of 128 bytes in the same 128-byte swizzle as the plain form's box.
bool encode_silu_mul(CUtensorMap& map, const void* base, int64_t inter, int64_t cols, int64_t ld) {
  const cuuint64_t dims[4] = {static_cast<cuuint64_t>(cols), 8, 2, static_cast<cuuint64_t>(inter / 8)};
  const cuuint64_t strides[3] = {static_cast<cuuint64_t>(ld) * 2, static_cast<cuuint64_t>(inter * ld) * 2,
                                 static_cast<cuuint64_t>(8 * ld) * 2};
  const cuuint32_t box[4] = {kWg16Chunk, 8, 2, kWg16Rows / 16};
  const cuuint32_t elem[4] = {1, 1, 1, 1};
  return encoder()(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, const_cast<void*>(base), dims, strides, box, elem,
                   CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                   CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// The same matrix (cols a multiple of 64) as boxes of box_rows x 64 columns x kb chunks, the chunk the outer
// dimension: a box lands as kb of encode's boxes one after the other, so one copy fills a stage's X (x_stage_box).
bool encode_stage(CUtensorMap& map, const void* base, int64_t rows, int64_t cols, int64_t ld, int box_rows, int kb,
                  CUtensorMapL2promotion promote) {
  const cuuint64_t dims[3] = {kWg16Chunk, static_cast<cuuint64_t>(rows), static_cast<cuuint64_t>(cols / kWg16Chunk)};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(ld) * 2, kWg16Chunk * 2};
  const cuuint32_t box[3] = {kWg16Chunk, static_cast<cuuint32_t>(box_rows), static_cast<cuuint32_t>(kb)};
  const cuuint32_t elem[3] = {1, 1, 1};
  return encoder()(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, const_cast<void*>(base), dims, strides, box, elem,
                   CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, promote,
                   CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

thread_local bool g_last_clustered = false;  // wg16_last_launch_clustered

// Whether the device holds all `blocks / splits` clusters of `splits` blocks of this kernel at once: a cluster that
// does not fit waits for a whole cluster's SMs to free, a second wave (the Qwen3-4B o and down products' 40 clusters
// of 3 where 39 fit took the verify step from 2.75 to 3.01 ms; docs/PERF.md, fifty-fourth pass). Asked once per
// kernel, shared memory and split count.
bool clusters_fit(const void* kernel, size_t smem, int splits, int blocks) {
  static std::mutex m;
  static std::map<std::tuple<const void*, size_t, int>, int> held;  // clusters the device holds at once
  const std::lock_guard<std::mutex> lock(m);
  auto [it, fresh] = held.try_emplace({kernel, smem, splits}, 0);
  if (fresh) {
    cudaLaunchAttribute cluster{};
    cluster.id = cudaLaunchAttributeClusterDimension;
    cluster.val.clusterDim.x = static_cast<unsigned>(splits);
    cluster.val.clusterDim.y = cluster.val.clusterDim.z = 1;
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(static_cast<unsigned>(blocks));
    cfg.blockDim = dim3(kThreads);
    cfg.dynamicSmemBytes = smem;
    cfg.attrs = &cluster;
    cfg.numAttrs = 1;
    if (cudaOccupancyMaxActiveClusters(&it->second, kernel, &cfg) != cudaSuccess) {
      (void)cudaGetLastError();  // not sticky: clear it, and take the workspace sum
      it->second = 0;
    }
  }
  return it->second >= blocks / splits;
}

}  // namespace

bool wg16_last_launch_clustered() { return g_last_clustered; }

size_t wg16_cluster_sum_bytes(int splits) {
  return splits > 1 ? static_cast<size_t>(splits - 1) * kTileFloats * sizeof(float) + 32 : 0;
}

size_t wg16_smem_bytes(const Wg16Plan& plan) {
  return static_cast<size_t>(plan.stages) * plan.kb * (kWBox + kXBox) + 2 * sizeof(uint64_t) * plan.stages + 1024;
}

Wg16Plan wg16_plan(int N, int K, int sms, bool split_k, int tiles_per_block, int ring_kb, int max_splits) {
  const int chunks = (K + kWg16Chunk - 1) / kWg16Chunk, tiles = wg16_tiles(N);
  Wg16Plan p;
  p.kb = chunks % 4 == 0 ? 4 : chunks % 2 == 0 ? 2 : 1;
  p.splits = split_k ? std::max(1, std::min(sms / tiles, chunks / (5 * p.kb))) : 1;
  if (max_splits > 0) p.splits = std::min(p.splits, max_splits);
  // more tiles than SMs: consecutive tiles a block, so that the blocks fit in one wave (cuBLASLt's plans for the
  // gate/up shapes run one wave of 116-128 blocks)
  if (p.splits == 1)
    p.tiles_per_block = tiles_per_block > 0 ? tiles_per_block : tiles > sms ? (tiles + sms - 1) / sms : 1;
  const int blocks = wg16_blocks(N, p);
  const int per_sm = (blocks + sms - 1) / sms;
  const int ring_budget = std::clamp(ring_kb, 1, kWg16RingKb) * 1024;
  for (;;) {
    const int stage = p.kb * (kWBox + kXBox);
    p.stages = std::min(4, ring_budget / per_sm / stage);
    if (p.stages >= 3 || p.kb == 1 || chunks % (p.kb / 2) != 0) break;
    p.kb /= 2;
  }
  p.stages = std::max(2, p.stages);
  return p;
}

bool gemm_wg16_available() {
  int dev = 0, major = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return false;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) return false;
  return major == 9 && encoder() != nullptr;
}

cudaError_t gemm_wg16(const Wg16Args& a, cudaStream_t stream) {
  const Wg16Plan& p = a.plan;
  const int chunks = (a.K + kWg16Chunk - 1) / kWg16Chunk;
  if (a.T < 1 || a.T > kWg16MaxT || a.N < 1 || a.K < 1 || a.K % 8 != 0) return cudaErrorInvalidValue;
  const int out_n = a.silu_mul ? a.N / 2 : a.N;  // Y's columns
  if (a.ldw % 8 != 0 || a.ldx % 8 != 0 || a.ldw < a.K || a.ldx < a.K || a.ldy < out_n) return cudaErrorInvalidValue;
  if (!aligned16(a.W) || !aligned16(a.X) || a.Y == nullptr) return cudaErrorInvalidValue;
  if (a.R != nullptr && a.ldr < a.N) return cudaErrorInvalidValue;
  if (a.silu_mul && (a.N % 16 != 0 || a.R != nullptr)) return cudaErrorInvalidValue;
  if (a.row_norm && (a.R != nullptr || a.row_scale != nullptr || p.splits != 1 || !(a.eps >= 0.f)))
    return cudaErrorInvalidValue;
  if (a.argmax != nullptr && (p.splits != 1 || a.R != nullptr || a.row_norm || a.silu_mul ||
                              a.argmax_values == nullptr || a.argmax_indices == nullptr || a.argmax_counter == nullptr))
    return cudaErrorInvalidValue;
  if ((p.kb != 1 && p.kb != 2 && p.kb != 4) || p.stages < 2 || p.stages > 12) return cudaErrorInvalidValue;
  if (a.prefill < 0) return cudaErrorInvalidValue;
  if (p.tiles_per_block < 1 || (p.tiles_per_block > 1 && (p.splits != 1 || a.overlap))) return cudaErrorInvalidValue;
  if (chunks % p.kb != 0 || p.splits < 1 || p.splits > chunks / p.kb) return cudaErrorInvalidValue;
  if (p.splits > 1 && (a.workspace == nullptr || a.counters == nullptr)) return cudaErrorInvalidValue;
  int dev = 0, major = 0, smem_max = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&smem_max, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
  if (e != cudaSuccess) return e;
  if (major != 9 || encoder() == nullptr) return cudaErrorNotSupported;
  const size_t smem = wg16_smem_bytes(p);
  using Kernel = void (*)(const CUtensorMap, const CUtensorMap, KernelArgs, ArgmaxArgs);
  static const Kernel kernels[2][2][3] = {  // [trace][argmax][kb 1, 2, 4]
      {{wg16_kernel<1, false, false>, wg16_kernel<2, false, false>, wg16_kernel<4, false, false>},
       {wg16_kernel<1, false, true>, wg16_kernel<2, false, true>, wg16_kernel<4, false, true>}},
      {{wg16_kernel<1, true, false>, wg16_kernel<2, true, false>, wg16_kernel<4, true, false>},
       {wg16_kernel<1, true, true>, wg16_kernel<2, true, true>, wg16_kernel<4, true, true>}}};
  const Kernel kernel = kernels[a.trace != nullptr][a.argmax != nullptr][p.kb == 1 ? 0 : p.kb == 2 ? 1 : 2];
  static std::once_flag attr_once;
  static cudaError_t attr_error = cudaSuccess;
  static size_t static_bytes = 0;  // the most static shared memory of the twelve kernels
  std::call_once(attr_once, [&] {  // each kernel may take the device's dynamic shared memory, less its static
    for (const auto& by_trace : kernels)
      for (const auto& by_argmax : by_trace)
        for (Kernel f : by_argmax) {
          cudaFuncAttributes fa{};
          if (attr_error == cudaSuccess) attr_error = cudaFuncGetAttributes(&fa, f);
          if (attr_error == cudaSuccess)
            attr_error = cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              smem_max - static_cast<int>(fa.sharedSizeBytes));
          static_bytes = std::max(static_bytes, fa.sharedSizeBytes);
        }
  });
  if (attr_error != cudaSuccess) return attr_error;
  if (smem + static_bytes > static_cast<size_t>(smem_max)) return cudaErrorInvalidValue;
  // The cluster sum (at most 8 splits, the portable cluster size): split 0's slots and barrier on top of the ring,
  // where they fit and the device holds every cluster at once; otherwise the workspace sum.
  const int blocks = wg16_blocks(a.N, p);  // the host checks above: tiles_per_block > 1 only with splits 1
  const size_t cluster_smem = smem + wg16_cluster_sum_bytes(p.splits);
  const bool cluster_sum = a.cluster_sum && p.splits > 1 && p.splits <= 8 && p.tiles_per_block == 1 &&
                           cluster_smem + static_bytes <= static_cast<size_t>(smem_max) &&
                           clusters_fit(reinterpret_cast<const void*>(kernel), cluster_smem, p.splits, blocks);
  g_last_clustered = cluster_sum;
  CUtensorMap w_map, x_map;
  const bool w_ok = a.silu_mul ? encode_silu_mul(w_map, a.W, a.N / 2, a.K, a.ldw)
                               : encode(w_map, a.W, a.N, a.K, a.ldw, kWg16Rows, CU_TENSOR_MAP_L2_PROMOTION_L2_256B);
  const bool x_stage_box = a.x_stage_box && a.K % kWg16Chunk == 0;
  const bool x_ok = x_stage_box ? encode_stage(x_map, a.X, a.T, a.K, a.ldx, kWg16MaxT, p.kb,
                                               CU_TENSOR_MAP_L2_PROMOTION_L2_128B)
                                : encode(x_map, a.X, a.T, a.K, a.ldx, kWg16MaxT, CU_TENSOR_MAP_L2_PROMOTION_L2_128B);
  if (!w_ok || !x_ok) return cudaErrorInvalidValue;
  KernelArgs k{};
  k.Y = a.Y;
  k.R = a.R;
  k.ldy = a.ldy;
  k.ldr = a.R != nullptr ? a.ldr : 0;
  k.T = a.T;
  k.N = out_n;
  k.tiles = wg16_tiles(a.N);
  k.chunks = chunks;
  k.splits = p.splits;
  k.stages = p.stages;
  k.tiles_per_block = p.tiles_per_block;
  k.workspace = a.workspace;
  k.counters = a.counters;
  k.trigger = !a.trigger ? kTriggerNone : a.trigger_early ? kTriggerAtStart : kTriggerAfterLoads;
  k.prefill = a.prefill;
  k.overlap = a.overlap ? 1 : 0;
  k.x_stage_box = x_stage_box ? 1 : 0;
  k.row_scale = a.silu_mul ? a.row_scale : nullptr;
  k.silu_mul = a.silu_mul ? 1 : 0;
  k.row_norm = a.row_norm ? 1 : 0;
  k.eps = a.eps;
  k.K = a.K;
  k.trace = a.trace;
  const ArgmaxArgs am{a.argmax, a.argmax_values, a.argmax_indices, a.argmax_counter};
  // with PDL when it is on (launch.h), recorded as ours for the graph-edge rewrite unless SPECPRESS_LC_SKIP names it
  const LcSkipScope lc(kLcWg16);
  if (cluster_sum)
    return detail::launch_kernel_cluster(kernel, dim3(static_cast<unsigned>(blocks)), dim3(kThreads), cluster_smem,
                                         stream, static_cast<unsigned>(p.splits), w_map, x_map, k, am);
  return detail::launch_kernel(kernel, dim3(static_cast<unsigned>(blocks)), dim3(kThreads), smem, stream, w_map,
                               x_map, k, am);
}

}  // namespace specpress::kernels
