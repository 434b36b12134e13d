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
#include <cublas_v2.h>
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
#include "probe_common.cuh"

#define CB(x)                                                                            \
  do {                                                                                   \
    cublasStatus_t s_ = (x);                                                             \
    if (s_ != CUBLAS_STATUS_SUCCESS) probe_die(__FILE__, __LINE__, #x, "cuBLAS error"); \
  } while (0)

namespace {
using namespace specpress::kernels::detail;
constexpr int kTok = 16;

__global__ void copy_kernel(const uint4* __restrict__ src, uint4* __restrict__ dst, size_t n) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    dst[i] = src[i];
}

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

__device__ __forceinline__ void store_tile(const Args& p, int tile, int lane, const float (&v)[8]) {
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int j = 0; j < 2; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int n = tile * 16 + g + (e >= 2 ? 8 : 0), tok = 8 * j + 2 * t + (e & 1);
      if (n < p.N) p.Y[static_cast<int64_t>(tok) * p.N + n] = to_b(v[4 * j + e]);
    }
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
  if (p.S == 1) {
    store_tile(p, tile, lane, acc);
    return;
  }
  float* mine = p.part + (static_cast<int64_t>(z) * p.tiles + tile) * 256 + lane * 8;
  *reinterpret_cast<float4*>(mine) = make_float4(acc[0], acc[1], acc[2], acc[3]);
  *reinterpret_cast<float4*>(mine + 4) = make_float4(acc[4], acc[5], acc[6], acc[7]);
  __threadfence();
  __syncwarp();  // every lane's partial and fence before lane 0's count
  unsigned prev = 0;
  if (lane == 0) prev = atomicAdd(p.cnt + tile, 1u);
  prev = __shfl_sync(0xffffffffu, prev, 0);
  if (prev != static_cast<unsigned>(p.S - 1)) return;
  __threadfence();
  float sum[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  for (int zz = 0; zz < p.S; ++zz) {
    const float* src = p.part + (static_cast<int64_t>(zz) * p.tiles + tile) * 256 + lane * 8;
    const float4 lo = __ldcg(reinterpret_cast<const float4*>(src)), hi = __ldcg(reinterpret_cast<const float4*>(src + 4));
    sum[0] += lo.x, sum[1] += lo.y, sum[2] += lo.z, sum[3] += lo.w;
    sum[4] += hi.x, sum[5] += hi.y, sum[6] += hi.z, sum[7] += hi.w;
  }
  store_tile(p, tile, lane, sum);
  if (lane == 0) p.cnt[tile] = 0u;
}

struct Shape {
  const char* name;
  int N, K;
};
struct Config {
  int NW, a, S;
};

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
  cudaStream_t stream;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cublasHandle_t handle;
  CB(cublasCreate(&handle));
  CB(cublasSetStream(handle, stream));
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  // copy bandwidth (bytes read + written) of a 1 GiB device-to-device copy by a kernel (copy-engine memcpy nodes in
  // a graph measured far slower here)
  double copy_gbps = 0;
  {
    const size_t bytes = size_t(1) << 30;
    uint4 *s = nullptr, *d = nullptr;
    CK(cudaMalloc(&s, bytes));
    CK(cudaMalloc(&d, bytes));
    const double us = time_graph(stream, 4, rounds, [&](int) {
      copy_kernel<<<sms * 8, 256, 0, stream>>>(s, d, bytes / sizeof(uint4));
      CK(cudaGetLastError());
    });
    copy_gbps = 2.0 * bytes / (us * 1e-6) / 1e9;
    CK(cudaFree(s));
    CK(cudaFree(d));
  }
  std::printf("copy bandwidth %.0f GB/s (read + write), %d SMs\n", copy_gbps, sms);
  const std::vector<Shape> shapes = {{"4B qkv", 6144, 2560}, {"4B o", 2560, 4096},   {"4B gate/up", 19456, 2560},
                                     {"4B down", 2560, 9728}, {"8B qkv", 6144, 4096}, {"8B o", 4096, 4096},
                                     {"8B gate/up", 24576, 4096}, {"8B down", 4096, 12288}};
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
      Config cfg;
      double us;
      double err;
      int blocks;
    };
    std::vector<Result> results;
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
          const double us = time_graph(stream, 4 * copies, rounds, run);
          // the copy packed from the reference's W, into a Y of NaN (0xFFFF), so that an unwritten output fails
          CK(cudaMemsetAsync(Y, 0xFF, sizeof(bf16) * kTok * sh.N, stream));
          run(copies - 1);
          CK(cudaMemcpyAsync(got.data(), Y, sizeof(bf16) * got.size(), cudaMemcpyDeviceToHost, stream));
          CK(cudaStreamSynchronize(stream));
          double max_ref = 0, max_diff = 0;
          for (size_t i = 0; i < ref.size(); ++i) {
            const double r = __bfloat162float(ref[i]), g = __bfloat162float(got[i]);
            max_ref = std::max(max_ref, std::fabs(r));
            max_diff = std::max(max_diff, std::isfinite(g) ? std::fabs(g - r) : 1e30);
          }
          results.push_back({{NW, a, S}, us, max_diff / std::max(max_ref, 1e-30), blocks});
        }
      }
    }
    std::sort(results.begin(), results.end(), [](const Result& x, const Result& y) { return x.us < y.us; });
    for (size_t i = 0; i < results.size() && i < 4; ++i) {
      const Result& r = results[i];
      std::printf("    m16 NW %2d a %2d S %2d (b %3d steps, %5d blocks): %7.2f us %5.1f%% (%+5.1f%% vs cuBLAS) err %.1e%s\n",
                  r.cfg.NW, r.cfg.a, r.cfg.S, (steps + r.cfg.S - 1) / r.cfg.S, r.blocks, r.us, pct(r.us),
                  100.0 * (r.us / cublas_us - 1.0), r.err, r.err > 2e-2 ? " WRONG" : "");
      if (r.err > 2e-2) status = 3;
    }
    for (const Result& r : results)
      if (r.err > 2e-2) status = 3;
    CK(cudaFree(W));
    CK(cudaFree(P));
    CK(cudaFree(X));
    CK(cudaFree(Y));
    CK(cudaFree(Yref));
    CK(cudaFree(part));
    CK(cudaFree(cnt));
  }
  CB(cublasDestroy(handle));
  return status;
}
