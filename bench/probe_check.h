// probe_check.h — error handling for the standalone CUDA probes in bench/ (lc_library_probe.cu, gemv_tma_probe.cu),
// which are built by hand with nvcc, without the project's libraries: a failed call ends the probe, naming the call
// and the error.
#pragma once
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

[[noreturn]] inline void probe_die(const char* file, int line, const char* call, const char* error) {
  std::fprintf(stderr, "%s:%d %s: %s\n", file, line, call, error);
  std::exit(1);
}
#define CK(x)                                                                         \
  do {                                                                                \
    cudaError_t e_ = (x);                                                             \
    if (e_ != cudaSuccess) probe_die(__FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
  } while (0)
