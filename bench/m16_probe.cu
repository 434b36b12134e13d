// m16_probe.cu — can a tensor-core product of 16 rows read W faster than cuBLAS when W is packed in the mma's
// fragment order and X is staged in shared memory? A standalone probe (CUDA runtime, cuBLAS; no torch) at the
// Qwen3-4B / -8B verify shapes, run by hand on the GPU machine:
//   nvcc -std=c++20 -O3 -arch=sm_90a -Isrc bench/m16_probe.cu -lcublas -o /tmp/m16_probe && /tmp/m16_probe [--rounds N]
//
// Why: verify's products at M = 16 are cuBLAS(Lt) kernels that read the 4B o and down weights at 50-67% of the copy
// bandwidth (docs/PERF.md), against 67-82% for the one-row GEMV, and they cannot join the PDL chain. The fifth pass
// packed W so that each lane's 16-byte load is its mma A operand (the "tiled" branch) and was at best equal to cuBLAS;
// its diagnosis was X: 16 rows of X loaded from global memory at every step (8 load instructions of 8 cache lines),
// and without them the small products read W 5-8 points faster than cuBLAS. Here each block stages its slice of X in
// shared memory once and the warps take the B operands by ldmatrix.
//
// The kernel: W packed as 4 KB blocks (tile of 16 rows) x (step of 128 k), each block 8 k16 sub-steps of 512 bytes
// (lane l's 16 bytes = its A fragment: rows 16 i + l / 4 and + 8, k pairs 2 (l % 4) and + 8). A thread block takes
// `a` tiles x one K split of `b` steps; its NW warps take the a tiles in turn (c = NW / a warps a tile, each every
// c-th step of the split). Each step a lane loads its 8 sub-steps of W (8 x 16 bytes in flight, as the GEMV), and
// per sub-step one ldmatrix.x4 of X (16 tokens x 16 k) and two mma. The c warps of a tile add up in shared memory in
// warp order; with S > 1 splits, each block writes its tile's fp32 partial and the last block to arrive (a counter a
// tile) adds the S partials in split order and writes Y, so the result is deterministic.
// Timed as CUDA-graph replays over enough copies of W that they do not stay in the L2 (best of N rounds), against
// cublasGemmEx (the engine's at::mm_out); the result is checked against cuBLAS's within 2e-2 of max |Y| (exit 3 if
// not). Result on the H200 (docs/PERF.md, seventeenth pass): the best configuration is 3.6-22% slower than cuBLAS on
// every verify projection but 4B gate/up (-1.7% and +9.2% in two calls), so X in shared memory does not close the gap.
//
// Second kernel (eighteenth pass), m16_tma_kernel: the same packed W streamed into shared memory by cp.async.bulk, so
// that the bytes in flight are not bounded by 64 registers a thread; X of the block's K split resident in shared
// memory (copied by bulk copies too); two ways to feed the consumer warps: a ring of lockstep stages filled by one
// producer warp ("ring"), or a private ring a warp refilled by its own lane 0 ("self"); each also timed with the math
// skipped, the weight stream alone. Result (docs/PERF.md, eighteenth pass): the best configurations 16-75% slower
// than cuBLAS, and even their stream alone no faster than cuBLAS's whole product, so this is not the way past cuBLAS
// either.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "kernels/common.cuh"
#include "kernels/mma.cuh"
#include "kernels/tma.cuh"
#include "probe_cublas.cuh"

namespace {
using namespace specpress::kernels::detail;
constexpr int kTok = 16;

// W [N, K] row-major -> P: uint4 (tile * steps + step) * 256 + kk * 32 + lane (K % 128 == 0; rows past N zero).
__global__ void pack_kernel(const bf16* W, uint4* P, int N, int K) {
  const int tiles = (N + 15) / 16, steps = K / 128;
  const int64_t total = static_cast<int64_t>(tiles) * steps * 256;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int lane = static_cast<int>(idx % 32), kk = static_cast<int>((idx / 32) % 8);
    const int64_t ts = idx / 256;
    const int s = static_cast<int>(ts % steps), tile = static_cast<int>(ts / steps);
    const int g = lane / 4, t = lane % 4, k0 = s * 128 + kk * 16 + 2 * t, r0 = tile * 16 + g, r1 = r0 + 8;
    auto get = [&](int r, int k) -> uint32_t {
      return r < N ? *reinterpret_cast<const uint32_t*>(W + static_cast<int64_t>(r) * K + k) : 0u;
    };
    P[idx] = make_uint4(get(r0, k0), get(r1, k0), get(r0, k0 + 8), get(r1, k0 + 8));
  }
}

struct Args {
  const uint4* P;
  const bf16* X;  // [16, K]
  bf16* Y;        // [16, N]
  float* part;    // [S, tiles, 256]
  unsigned* cnt;  // [tiles], zero
  int N, K, tiles, steps, a, b, S, groups;
};

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(gmem) : "memory");
}

// Tile `tile`'s 16 x 16 results (lane l's mma accumulators: rows g, g + 8 of the tile, tokens 2c, 2c + 1 and + 8) into
// Y [16, N].
__device__ __forceinline__ void store_tile(bf16* Y, int N, int tile, int lane, const float (&v)[8]) {
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int j = 0; j < 2; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int n = tile * 16 + g + (e >= 2 ? 8 : 0), tok = 8 * j + 2 * t + (e & 1);
      if (n < N) Y[static_cast<int64_t>(tok) * N + n] = to_b(v[4 * j + e]);
    }
}

// With S > 1 K splits: this split's partial of the tile into part, and the last split to arrive (a counter a tile)
// adds the S partials in split order and stores the tile, so the result does not depend on the order of arrival.
__device__ __forceinline__ void split_combine(float* part, unsigned* cnt, bf16* Y, int N, int tiles, int S, int z,
                                              int tile, int lane, const float (&acc)[8]) {
  float* mine = part + (static_cast<int64_t>(z) * tiles + tile) * 256 + lane * 8;
  *reinterpret_cast<float4*>(mine) = make_float4(acc[0], acc[1], acc[2], acc[3]);
  *reinterpret_cast<float4*>(mine + 4) = make_float4(acc[4], acc[5], acc[6], acc[7]);
  __threadfence();
  __syncwarp();  // every lane's partial and fence before lane 0's count
  unsigned prev = 0;
  if (lane == 0) prev = atomicAdd(cnt + tile, 1u);
  prev = __shfl_sync(0xffffffffu, prev, 0);
  if (prev != static_cast<unsigned>(S - 1)) return;
  __threadfence();
  float sum[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  for (int zz = 0; zz < S; ++zz) {
    const float* src = part + (static_cast<int64_t>(zz) * tiles + tile) * 256 + lane * 8;
    const float4 lo = __ldcg(reinterpret_cast<const float4*>(src)), hi = __ldcg(reinterpret_cast<const float4*>(src + 4));
    sum[0] += lo.x, sum[1] += lo.y, sum[2] += lo.z, sum[3] += lo.w;
    sum[4] += hi.x, sum[5] += hi.y, sum[6] += hi.z, sum[7] += hi.w;
  }
  store_tile(Y, N, tile, lane, sum);
  if (lane == 0) cnt[tile] = 0u;
}

template <int NW>
__global__ void __launch_bounds__(NW * 32, 1024 / (NW * 32)) m16_kernel(Args p) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int grp = blockIdx.x % p.groups, z = blockIdx.x / p.groups, c = NW / p.a;
  const int tile = grp * p.a + warp % p.a, sub = warp / p.a;
  const int s_beg = z * p.b, s_end = min(p.steps, s_beg + p.b), nb = s_end - s_beg, RS = p.b * 128 + 8;
  const bool live = tile < p.tiles;
  extern __shared__ __align__(16) unsigned char sm[];
  bf16* xs = reinterpret_cast<bf16*>(sm);
  float* red = reinterpret_cast<float*>(sm + sizeof(bf16) * kTok * RS);  // [NW][32][8]
  const uint4* wp = p.P + static_cast<int64_t>(tile) * p.steps * 256 + lane;
  uint4 w[8];
  int s = s_beg + sub;
  if (live && s < s_end) {
#pragma unroll
    for (int kk = 0; kk < 8; ++kk) w[kk] = ld_stream(reinterpret_cast<const bf16*>(wp + (s * 8 + kk) * 32));
  }
  for (int idx = threadIdx.x; idx < kTok * nb * 16; idx += NW * 32) {
    const int tok = idx / (nb * 16), col = idx % (nb * 16);
    cp_async16(xs + tok * RS + col * 8, p.X + static_cast<int64_t>(tok) * p.K + s_beg * 128 + col * 8);
  }
  asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::: "memory");
  __syncthreads();
  float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  const int mi = lane >> 3, mr = lane & 7;  // ldmatrix: matrix mi's row mr
  const bf16* xrow = xs + (mr + 8 * (mi >> 1)) * RS + 8 * (mi & 1);
  if (live) {
    for (; s < s_end; s += c) {
      const bf16* xk = xrow + (s - s_beg) * 128;
#pragma unroll
      for (int kk = 0; kk < 8; ++kk) {
        uint32_t bf[4];
        ldmatrix_x4(bf, xk + kk * 16);
        mma_bf16(acc, w[kk].x, w[kk].y, w[kk].z, w[kk].w, bf[0], bf[1]);
        mma_bf16(acc + 4, w[kk].x, w[kk].y, w[kk].z, w[kk].w, bf[2], bf[3]);
      }
      const int sn = s + c;
      if (sn < s_end) {
#pragma unroll
        for (int kk = 0; kk < 8; ++kk) w[kk] = ld_stream(reinterpret_cast<const bf16*>(wp + (sn * 8 + kk) * 32));
      }
    }
  }
  if (sub > 0) {
#pragma unroll
    for (int e = 0; e < 8; ++e) red[(warp * 32 + lane) * 8 + e] = acc[e];
  }
  __syncthreads();
  if (sub != 0 || !live) return;
  for (int q = 1; q < c; ++q)
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[e] += red[((warp + q * p.a) * 32 + lane) * 8 + e];
  if (p.S == 1)
    store_tile(p.Y, p.N, tile, lane, acc);
  else
    split_combine(p.part, p.cnt, p.Y, p.N, p.tiles, p.S, z, tile, lane, acc);
}

// ---- The TMA-fed variant. W (the same packed layout) streams into shared memory by cp.async.bulk, in slots of kcs
// steps (kcs x 4 KB), C consumer warps a block: either one producer warp fills a ring of `stages` lockstep stages of C
// slots, or (self_fed) each consumer warp has a private ring of `stages` slots that its lane 0 refills. X of the
// block's K split is resident in shared memory (rows padded by 16 bytes, so that ldmatrix's 8 rows fall on distinct
// banks). Block (z, g) of S x G: K split z (sb steps) of tiles [g tiles / G, (g + 1) tiles / G). Its work is nt tiles
// x nch chunks of kcs steps, tile-major, dealt to the consumer warps in contiguous runs of equal length (+-1); a warp
// takes its run's chunks in order. A warp adds its tile sums into a shared fp32 tile buffer when it leaves a tile;
// with nt >= C a tile spans at most two warps, so the two adds are exact in either order (0 + a + b) and the result
// is deterministic. Registers hold no weights, so the bytes in flight an SM are the rings', not 64 registers a
// thread's.
struct TArgs {
  const uint4* P;
  const bf16* X;
  bf16* Y;
  float* part;
  unsigned* cnt;
  int N, K, tiles, steps, S, sb, G, kcs, stages, nt_max;
  int skip_math;  // diagnostic: the consumers only wait and release the stages (the output is wrong)
  int self_fed;   // each consumer warp streams its own chunks (a private ring; its lane 0 issues the copies)
};
constexpr size_t kTmaBarrierBytes = 2048;  // room for 16 x 8 + 1 mbarriers

__host__ __device__ inline size_t tma_xs_offset(const TArgs& p) {
  return kTmaBarrierBytes + static_cast<size_t>(p.nt_max) * 1024;  // after the barriers and the tile sums
}
__host__ __device__ inline int tma_x_stride(const TArgs& p) { return p.sb * 128 + 8; }  // bf16 elements a token row
__host__ __device__ inline size_t tma_ring_offset(const TArgs& p) {
  return (tma_xs_offset(p) + sizeof(bf16) * kTok * tma_x_stride(p) + 127) / 128 * 128;
}
// Shared memory of a block of C consumer warps: barriers, tile sums, X, then the ring (stages x C slots of kcs steps).
size_t tma_smem(int C, const TArgs& p) { return tma_ring_offset(p) + static_cast<size_t>(p.stages) * C * p.kcs * 4096; }

template <int C>
__global__ void __launch_bounds__(32 * (C + 1)) m16_tma_kernel(TArgs p) {
  extern __shared__ __align__(128) unsigned char tsm[];
  // mbarriers: shared ring full[stages], empty[stages]; self-fed full[C][stages]; then x_ready
  uint64_t* full = reinterpret_cast<uint64_t*>(tsm);
  uint64_t* empty = full + p.stages;
  uint64_t* x_ready = full + (p.self_fed ? C * p.stages : 2 * p.stages);
  float* tacc = reinterpret_cast<float*>(tsm + kTmaBarrierBytes);
  bf16* xs = reinterpret_cast<bf16*>(tsm + tma_xs_offset(p));
  unsigned char* ring = tsm + tma_ring_offset(p);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int z = blockIdx.x / p.G, g = blockIdx.x % p.G;
  const int s_beg = z * p.sb, nb = min(p.steps, s_beg + p.sb) - s_beg;
  const int t_beg = static_cast<int>(static_cast<int64_t>(g) * p.tiles / p.G);
  const int nt = static_cast<int>(static_cast<int64_t>(g + 1) * p.tiles / p.G) - t_beg;
  const int nch = (nb + p.kcs - 1) / p.kcs, units = nt * nch, T = (units + C - 1) / C;
  const size_t slot_bytes = static_cast<size_t>(p.kcs) * 4096;
  auto run_beg = [&](int w) { return static_cast<int>(static_cast<int64_t>(w) * units / C); };
  // unit u's chunk of W: its source and bytes
  auto chunk_src = [&](int u) {
    return p.P + (static_cast<int64_t>(t_beg + u / nch) * p.steps + s_beg + (u % nch) * p.kcs) * 256;
  };
  auto chunk_bytes = [&](int u) { return static_cast<unsigned>(min(p.kcs, nb - (u % nch) * p.kcs) * 4096); };
  if (threadIdx.x == 0) {
    const int n_full = p.self_fed ? C * p.stages : p.stages;
    for (int s = 0; s < n_full; ++s) mbar_init(&full[s], 1);
    if (!p.self_fed)
      for (int s = 0; s < p.stages; ++s) mbar_init(&empty[s], C);
    mbar_init(x_ready, 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  const int RS = tma_x_stride(p);
  if (warp == C) {  // the producer: X's split first (lane t copies token row t), then lane w consumer w's chunks
    if (lane == 0) mbar_expect_tx(x_ready, static_cast<unsigned>(kTok * nb * 256));
    __syncwarp();
    if (lane < kTok)
      bulk_copy(xs + lane * RS, p.X + static_cast<int64_t>(lane) * p.K + s_beg * 128, static_cast<unsigned>(nb * 256),
                x_ready);
    if (p.self_fed) return;
    const int u0 = lane < C ? run_beg(lane) : 0, u1 = lane < C ? run_beg(lane + 1) : 0;
    for (int t = 0; t < T; ++t) {
      const int st = t % p.stages, round = t / p.stages;
      if (round > 0) mbar_wait(&empty[st], (round - 1) & 1);
      const int u = u0 + t;
      const bool live = lane < C && u < u1;
      int bytes = live ? static_cast<int>(chunk_bytes(u)) : 0;
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) bytes += __shfl_xor_sync(0xffffffffu, bytes, o);
      if (lane == 0) mbar_expect_tx(&full[st], static_cast<unsigned>(bytes));
      __syncwarp();
      if (live)
        bulk_copy(ring + (static_cast<size_t>(st) * C + lane) * slot_bytes, chunk_src(u), chunk_bytes(u), &full[st]);
    }
    return;
  }
  const int u0 = run_beg(warp), u1 = run_beg(warp + 1);
  // self-fed: this warp's ring of `stages` slots, refilled by its lane 0 as it frees them
  uint64_t* my_full = full + warp * p.stages;
  unsigned char* my_ring = ring + static_cast<size_t>(warp) * p.stages * slot_bytes;
  auto issue = [&](int t) {  // unit u0 + t into slot t % stages
    const int u = u0 + t, slot = t % p.stages;
    mbar_expect_tx(&my_full[slot], chunk_bytes(u));
    bulk_copy(my_ring + slot * slot_bytes, chunk_src(u), chunk_bytes(u), &my_full[slot]);
  };
  if (p.self_fed && lane == 0)
    for (int t = 0; t < p.stages && u0 + t < u1; ++t) issue(t);
  // consumers: the tile buffer zeroed while X arrives
  for (int i = threadIdx.x; i < nt * 256; i += 32 * C) tacc[i] = 0.f;
  consumers_sync<C>();
  mbar_wait(x_ready, 0);
  const int mi = lane >> 3, mr = lane & 7;  // ldmatrix: matrix mi's row mr
  const bf16* xrow = xs + (mr + 8 * (mi >> 1)) * RS + 8 * (mi & 1);
  float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  int cur = -1;
  auto flush = [&] {
    if (cur < 0) return;
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      atomicAdd(&tacc[cur * 256 + lane * 8 + e], acc[e]);
      acc[e] = 0.f;
    }
  };
  auto compute = [&](int u, const unsigned char* slot) {
    const int tl = u / nch, ch = u % nch, ns = min(p.kcs, nb - ch * p.kcs);
    if (tl != cur) {
      flush();
      cur = tl;
    }
    const uint4* w = reinterpret_cast<const uint4*>(slot) + lane;
    for (int s = 0; s < ns; ++s) {
      const bf16* xk = xrow + (ch * p.kcs + s) * 128;
#pragma unroll
      for (int kk = 0; kk < 8; ++kk) {
        const uint4 a = w[(s * 8 + kk) * 32];
        uint32_t bf[4];
        ldmatrix_x4(bf, xk + kk * 16);
        mma_bf16(acc, a.x, a.y, a.z, a.w, bf[0], bf[1]);
        mma_bf16(acc + 4, a.x, a.y, a.z, a.w, bf[2], bf[3]);
      }
    }
  };
  if (p.self_fed) {
    for (int t = 0; u0 + t < u1; ++t) {
      const int slot = t % p.stages;
      mbar_wait(&my_full[slot], (t / p.stages) & 1);
      if (!p.skip_math) compute(u0 + t, my_ring + slot * slot_bytes);
      __syncwarp();  // every lane done with the slot before it is refilled
      if (lane == 0 && u0 + t + p.stages < u1) issue(t + p.stages);
    }
  } else {
    for (int t = 0; t < T; ++t) {
      const int st = t % p.stages, round = t / p.stages, u = u0 + t;
      mbar_wait(&full[st], round & 1);
      if (u < u1 && !p.skip_math) compute(u, ring + (static_cast<size_t>(st) * C + warp) * slot_bytes);
      __syncwarp();
      if (lane == 0) mbar_arrive(&empty[st]);
    }
  }
  flush();
  consumers_sync<C>();
  for (int tl = warp; tl < nt; tl += C) {
    float v[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) v[e] = tacc[tl * 256 + lane * 8 + e];
    if (p.S == 1)
      store_tile(p.Y, p.N, t_beg + tl, lane, v);
    else
      split_combine(p.part, p.cnt, p.Y, p.N, p.tiles, p.S, z, t_beg + tl, lane, v);
  }
}

// The kernel of C = 4, 8 or 16 consumer warps (main raises each one's shared-memory limit to the device's once).
using TmaKernel = void (*)(TArgs);
TmaKernel tma_kernel_of(int C) { return C == 4 ? m16_tma_kernel<4> : C == 8 ? m16_tma_kernel<8> : m16_tma_kernel<16>; }
cudaError_t launch_tma(int C, const TArgs& p, cudaStream_t stream) {
  tma_kernel_of(C)<<<p.S * p.G, 32 * (C + 1), tma_smem(C, p), stream>>>(p);
  return cudaGetLastError();
}


template <int NW> cudaError_t launch(const Args& p, cudaStream_t stream) {
  const size_t smem = sizeof(bf16) * kTok * (p.b * 128 + 8) + sizeof(float) * NW * 32 * 8;
  static size_t configured = 0;
  if (smem > configured) {
    cudaError_t e = cudaFuncSetAttribute(m16_kernel<NW>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    if (e != cudaSuccess) return e;
    configured = smem;
  }
  m16_kernel<NW><<<p.groups * p.S, NW * 32, smem, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = parse_rounds(argc, argv);
  const auto [stream, handle] = open_cublas_stream();
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const double copy_gbps = probe_copy_gbps(stream, sms, rounds);
  std::printf("copy bandwidth %.0f GB/s (read + write), %d SMs\n", copy_gbps, sms);
  const std::vector<Shape> shapes = qwen3_verify_shapes();
  int status = 0;
  for (const Shape& sh : shapes) {
    const size_t w_elems = static_cast<size_t>(sh.N) * sh.K, w_bytes = w_elems * sizeof(bf16);
    const int copies = static_cast<int>(std::max<size_t>(2, (size_t(400) << 20) / w_bytes + 1));
    const int tiles = (sh.N + 15) / 16, steps = sh.K / 128;
    bf16 *W = nullptr, *X = nullptr, *Y = nullptr, *Yref = nullptr;
    uint4* P = nullptr;
    float* part = nullptr;
    unsigned* cnt = nullptr;
    CK(cudaMalloc(&W, w_bytes));
    CK(cudaMalloc(&P, static_cast<size_t>(tiles) * steps * 4096 * copies));
    CK(cudaMalloc(&X, sizeof(bf16) * kTok * sh.K));
    CK(cudaMalloc(&Y, sizeof(bf16) * kTok * sh.N));
    CK(cudaMalloc(&Yref, sizeof(bf16) * kTok * sh.N));
    CK(cudaMalloc(&part, sizeof(float) * 64 * tiles * 256));
    CK(cudaMalloc(&cnt, sizeof(unsigned) * tiles));
    CK(cudaMemset(cnt, 0, sizeof(unsigned) * tiles));
    const size_t packed_u4 = static_cast<size_t>(tiles) * steps * 256;
    for (int i = 0; i < copies; ++i) {  // each copy its own values, packed from W
      fill_kernel<<<1024, 256, 0, stream>>>(W, w_elems, 12345u + i, 0.05f);
      pack_kernel<<<2048, 256, 0, stream>>>(W, P + i * packed_u4, sh.N, sh.K);
    }
    fill_kernel<<<64, 256, 0, stream>>>(X, static_cast<size_t>(kTok) * sh.K, 777u, 1.f);
    CK(cudaGetLastError());
    // W now holds the last copy's values: the reference for the check
    const float one = 1.f, zero = 0.f;
    CB(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, sh.N, kTok, sh.K, &one, W, CUDA_R_16BF, sh.K, X, CUDA_R_16BF, sh.K,
                    &zero, Yref, CUDA_R_16BF, sh.N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    std::vector<bf16> ref(static_cast<size_t>(kTok) * sh.N), got(ref.size());
    CK(cudaMemcpyAsync(ref.data(), Yref, sizeof(bf16) * ref.size(), cudaMemcpyDeviceToHost, stream));
    CK(cudaStreamSynchronize(stream));
    CK(cudaFree(W));
    W = nullptr;
    // cuBLAS timed on row-major copies: re-create them (one buffer of `copies` weights)
    CK(cudaMalloc(&W, w_bytes * copies));
    fill_kernel<<<1024, 256, 0, stream>>>(W, w_elems * copies, 999u, 0.05f);
    CK(cudaGetLastError());
    const double cublas_us = time_graph(stream, 4 * copies, rounds, [&](int i) {
      CB(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, sh.N, kTok, sh.K, &one, W + static_cast<size_t>(i % copies) * w_elems,
                      CUDA_R_16BF, sh.K, X, CUDA_R_16BF, sh.K, &zero, Y, CUDA_R_16BF, sh.N, CUBLAS_COMPUTE_32F,
                      CUBLAS_GEMM_DEFAULT));
    });
    auto pct = [&](double us) { return 100.0 * static_cast<double>(w_bytes) / (us * 1e-6) / (copy_gbps * 1e9); };
    std::printf("%-10s N %6d K %5d (%5.1f MB): cuBLAS %7.2f us %5.1f%%\n", sh.name, sh.N, sh.K, w_bytes / 1e6, cublas_us,
                pct(cublas_us));
    struct Result {
      char what[96];
      double us;
      double err;
      int cfg;  // the TMA kinds: index into tma_cfgs
    };
    std::vector<Result> reg_results, ring_results, self_results;
    // Times `run` (launch i reads copy i % copies of W), then checks it on the reference's copy, into a Y of NaN
    // (0xFFFF), so that an unwritten output fails.
    auto measure = [&](std::vector<Result>& into, int cfg, auto run, const char* fmt, auto... args) {
      Result r{};
      r.cfg = cfg;
      std::snprintf(r.what, sizeof(r.what), fmt, args...);
      if (std::strlen(r.what) + 1 >= sizeof(r.what)) probe_die(__FILE__, __LINE__, "measure", "label too long");
      r.us = time_graph(stream, 4 * copies, rounds, run);
      CK(cudaMemsetAsync(Y, 0xFF, sizeof(bf16) * kTok * sh.N, stream));
      run(copies - 1);
      CK(cudaMemcpyAsync(got.data(), Y, sizeof(bf16) * got.size(), cudaMemcpyDeviceToHost, stream));
      CK(cudaStreamSynchronize(stream));
      double max_ref = 0, max_diff = 0;
      for (size_t i = 0; i < ref.size(); ++i) {
        const double rv = __bfloat162float(ref[i]), gv = __bfloat162float(got[i]);
        max_ref = std::max(max_ref, std::fabs(rv));
        max_diff = std::max(max_diff, std::isfinite(gv) ? std::fabs(gv - rv) : 1e30);
      }
      r.err = max_diff / std::max(max_ref, 1e-30);
      if (r.err > 2e-2) status = 3;
      into.push_back(r);
    };
    for (int NW : {8, 16}) {
      for (int a : {1, 2, 4, 8, 16}) {
        if (a > NW) continue;
        const int c = NW / a;
        for (int S : {1, 2, 3, 4, 6, 8, 12, 16, 24, 32}) {
          const int b = (steps + S - 1) / S;
          if (b < c || (S - 1) * b >= steps) continue;  // every warp a step; no empty split
          Args p{nullptr, X, Y, part, cnt, sh.N, sh.K, tiles, steps, a, b, S, (tiles + a - 1) / a};
          const int blocks = p.groups * S;
          if (blocks < sms / 2 || blocks > 16 * sms) continue;
          if (sizeof(bf16) * kTok * (b * 128 + 8) + sizeof(float) * NW * 256 > 200 * 1024) continue;
          auto run = [&](int i) {
            Args q = p;
            q.P = P + static_cast<size_t>(i % copies) * packed_u4;
            CK(NW == 8 ? launch<8>(q, stream) : launch<16>(q, stream));
          };
          measure(reg_results, -1, run, "NW %2d a %2d S %2d (b %3d steps, %5d blocks)", NW, a, S, b, blocks);
        }
      }
    }
    // the TMA-fed kernel: one or two blocks an SM, 2 .. 8 ring stages; then the best configuration again with the
    // consumers' math skipped (a diagnostic: the weight stream alone; its output is not checked)
    int smem_max = 0;
    CK(cudaDeviceGetAttribute(&smem_max, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
    for (int C : {4, 8, 16})
      CK(cudaFuncSetAttribute(tma_kernel_of(C), cudaFuncAttributeMaxDynamicSharedMemorySize, smem_max));
    std::vector<TArgs> tma_cfgs;
    std::vector<int> tma_c;
    for (int self_fed : {0, 1}) {
      for (int C : {4, 8, 16}) {
        if (C == 16 && !self_fed) continue;  // the shared ring's producer copies with C lanes of one warp
        for (int bps : {1, 2}) {
          for (int S : {1, 2, 3, 4, 6, 8, 12}) {
            const int sb = (steps + S - 1) / S;
            if ((S - 1) * sb >= steps) continue;  // no empty split
            const int G = std::min(bps * sms / S, tiles / C);  // at least C tiles a block (determinism, above)
            if (G < 1 || G * S < sms / 2) continue;
            for (int kcs : {1, 2}) {
              for (int stages : {2, 3, 4, 6, 8}) {
                TArgs p{nullptr, X, Y, part, cnt, sh.N, sh.K, tiles, steps, S, sb, G, kcs, stages, (tiles + G - 1) / G, 0,
                        self_fed};
                const size_t smem = tma_smem(C, p);
                if (smem > static_cast<size_t>(smem_max)) continue;
                int resident = 0;  // blocks an SM at this shared memory
                CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, tma_kernel_of(C), 32 * (C + 1), smem));
                if (resident < bps) continue;
                auto run = [&, p, C](int i) {
                  TArgs q = p;
                  q.P = P + static_cast<size_t>(i % copies) * packed_u4;
                  CK(launch_tma(C, q, stream));
                };
                measure(self_fed ? self_results : ring_results, static_cast<int>(tma_cfgs.size()), run,
                        "tma %s C %2d S %2d (%2d st) kcs %d x%d, %3d blk #%zu", self_fed ? "self" : "ring", C, S, sb,
                        kcs, stages, G * S, tma_cfgs.size());
                tma_cfgs.push_back(p);
                tma_c.push_back(C);
              }
            }
          }
        }
      }
    }
    for (auto* rs : {&reg_results, &ring_results, &self_results}) {
      std::sort(rs->begin(), rs->end(), [](const Result& x, const Result& y) { return x.us < y.us; });
      for (size_t i = 0; i < rs->size() && i < 3; ++i) {
        const Result& r = (*rs)[i];
        std::printf("    m16 %-50s: %7.2f us %5.1f%% (%+5.1f%% vs cuBLAS) err %.1e%s\n", r.what, r.us, pct(r.us),
                    100.0 * (r.us / cublas_us - 1.0), r.err, r.err > 2e-2 ? " WRONG" : "");
      }
      for (const Result& r : *rs)
        if (r.err > 2e-2) std::printf("    m16 %-50s: WRONG (err %.1e)\n", r.what, r.err);
      if (rs == &reg_results || rs->empty()) continue;
      // the best configuration again, its math skipped: the weight stream alone
      const size_t best = static_cast<size_t>((*rs)[0].cfg);
      TArgs p = tma_cfgs[best];
      p.skip_math = 1;
      const int C = tma_c[best];
      const double us = time_graph(stream, 4 * copies, rounds, [&](int i) {
        TArgs q = p;
        q.P = P + static_cast<size_t>(i % copies) * packed_u4;
        CK(launch_tma(C, q, stream));
      });
      std::printf("    m16 #%zu without its math (the stream alone)%*s: %7.2f us %5.1f%%\n", best, 12, "", us, pct(us));
    }
    probe_free({W, P, X, Y, Yref, part, cnt});
  }
  CB(cublasDestroy(handle));
  return status;
}
