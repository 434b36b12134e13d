// probe_cublas.cuh — what the probes that time against cuBLAS share (gemv_tma_probe.cu, m16_probe.cu, wg16_probe.cu):
// a failed cuBLAS call ends the probe naming the call, a projection shape and the verify products' shapes, and a
// non-blocking stream with a cuBLAS handle bound to it. Built by hand with nvcc and -lcublas, as each probe's header
// says.
#pragma once
#include <cublas_v2.h>

#include <vector>

#include "probe_common.cuh"

#define CB(x)                                                                            \
  do {                                                                                   \
    cublasStatus_t s_ = (x);                                                             \
    if (s_ != CUBLAS_STATUS_SUCCESS) probe_die(__FILE__, __LINE__, #x, "cuBLAS error"); \
  } while (0)

// A weight of N rows (outputs) x K columns, named as the printout shows it ("4B qkv").
struct Shape {
  const char* name;
  int N, K;
};

// The Qwen3-4B and -8B verify products (fused qkv, o, fused gate/up, down), as m16_probe and wg16_probe time them.
inline std::vector<Shape> qwen3_verify_shapes() {
  return {{"4B qkv", 6144, 2560}, {"4B o", 2560, 4096},   {"4B gate/up", 19456, 2560},  {"4B down", 2560, 9728},
          {"8B qkv", 6144, 4096}, {"8B o", 4096, 4096},   {"8B gate/up", 24576, 4096}, {"8B down", 4096, 12288}};
}

struct CublasStream {
  cudaStream_t stream = nullptr;
  cublasHandle_t handle = nullptr;
};
inline CublasStream open_cublas_stream() {
  CublasStream s;
  CK(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking));
  CB(cublasCreate(&s.handle));
  CB(cublasSetStream(s.handle, s.stream));
  return s;
}
