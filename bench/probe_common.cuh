// probe_common.cuh — what the standalone CUDA probes in bench/ share (lc_library_probe.cu, gemv_tma_probe.cu,
// m16_probe.cu, wg16_probe.cu; each built by hand with nvcc, without the project's libraries): error handling (a
// failed call ends the probe, naming the call and the error), freeing buffers, a deterministic bf16 fill, timing a launch sequence as
// CUDA-graph replays, and the copy bandwidth.
// The two that time against cuBLAS add probe_cublas.cuh.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>

[[noreturn]] inline void probe_die(const char* file, int line, const char* call, const char* error) {
  std::fprintf(stderr, "%s:%d %s: %s\n", file, line, call, error);
  std::exit(1);
}
#define CK(x)                                                                         \
  do {                                                                                \
    cudaError_t e_ = (x);                                                             \
    if (e_ != cudaSuccess) probe_die(__FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
  } while (0)

// Frees a probe's device buffers (cudaFree(nullptr) is a no-op), ending the probe on an error.
inline void probe_free(std::initializer_list<void*> buffers) {
  for (void* p : buffers) CK(cudaFree(p));
}

// p[i] = scale * a hash of (i, seed) in [-1, 1), as bf16 (one definition per probe: each is one translation unit).
__global__ void fill_kernel(__nv_bfloat16* p, size_t n, uint32_t seed, float scale) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    p[i] = __float2bfloat16_rn(scale * ((h & 0xffff) / 32768.f - 1.f));
  }
}

// Best of `rounds` replays (after a warm-up one) of a graph that runs `launch(i)` for i in 0 .. count - 1: us a launch.
template <typename F> double time_graph(cudaStream_t stream, int count, int rounds, F launch) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  for (int i = 0; i < count; ++i) launch(i);
  CK(cudaStreamEndCapture(stream, &graph));
  CK(cudaGraphInstantiate(&exec, graph, 0));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  CK(cudaGraphLaunch(exec, stream));  // warm-up
  double best = 1e30;
  for (int r = 0; r < rounds; ++r) {
    CK(cudaEventRecord(e0, stream));
    CK(cudaGraphLaunch(exec, stream));
    CK(cudaEventRecord(e1, stream));
    CK(cudaEventSynchronize(e1));
    float ms = 0.f;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    best = std::min(best, 1e3 * ms / count);
  }
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  CK(cudaGraphExecDestroy(exec));
  CK(cudaGraphDestroy(graph));
  return best;
}

// The device's copy bandwidth (bytes read + written, GB/s): a kernel copying 1 GiB, `sms` x 8 blocks, best of
// `rounds` graph replays of 4 copies (copy-engine memcpy nodes in a graph measured far slower here).
__global__ void probe_copy_kernel(const uint4* __restrict__ src, uint4* __restrict__ dst, size_t n) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    dst[i] = src[i];
}
inline double probe_copy_gbps(cudaStream_t stream, int sms, int rounds) {
  const size_t bytes = size_t(1) << 30;
  uint4 *s = nullptr, *d = nullptr;
  CK(cudaMalloc(&s, bytes));
  CK(cudaMalloc(&d, bytes));
  const double us = time_graph(stream, 4, rounds, [&](int) {
    probe_copy_kernel<<<sms * 8, 256, 0, stream>>>(s, d, bytes / sizeof(uint4));
    CK(cudaGetLastError());
  });
  CK(cudaFree(s));
  CK(cudaFree(d));
  return 2.0 * bytes / (us * 1e-6) / 1e9;
}

// The probes' one flag, --rounds N (replays timed a measurement, best kept; default 5): exits 2 with the usage line on
// anything else.
inline int parse_rounds(int argc, char** argv) {
  int rounds = 5;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--rounds") == 0 && i + 1 < argc && std::atoi(argv[i + 1]) > 0) {
      rounds = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--rounds N], N > 0\n", argv[0]);
      std::exit(2);
    }
  }
  return rounds;
}
