// timing_events.h — a start/stop pair of CUDA events for timing graph replays on a stream, destroyed however the
// timing ends (an error thrown by check_cuda included). Used by the cuBLASLt plan tuning (lt_linear.cpp) and the fast
// engine's timings (model/qwen3_fast.cpp: the capture-time choice of the multi-row products, kernel_class_ms).
#pragma once
#include <cuda_runtime.h>

#include "kernels/aten_ops.h"

namespace specpress::kernels {

struct TimingEvents {
  cudaEvent_t start = nullptr, stop = nullptr;
  TimingEvents() {
    check_cuda(cudaEventCreate(&start), "cudaEventCreate");
    try {
      check_cuda(cudaEventCreate(&stop), "cudaEventCreate");
    } catch (...) {
      cudaEventDestroy(start);
      throw;
    }
  }
  ~TimingEvents() {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
  TimingEvents(const TimingEvents&) = delete;
  TimingEvents& operator=(const TimingEvents&) = delete;

  // ms between the two records, after waiting for the stop event
  float elapsed_ms() const {
    check_cuda(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0.f;
    check_cuda(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    return ms;
  }
};

}  // namespace specpress::kernels
