// probe_cublas.cuh — what the probes that time against cuBLAS share (gemv_tma_probe.cu, m16_probe.cu): a failed
// cuBLAS call ends the probe naming the call, a projection shape, and a non-blocking stream with a cuBLAS handle
// bound to it. Built by hand with nvcc and -lcublas, as each probe's header says.
#pragma once
#include <cublas_v2.h>

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
