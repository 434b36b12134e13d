// device_memory.h — measured peak device memory around one generation, as torch.cuda.max_memory_allocated reports
// it: what LibTorch's CUDA caching allocator held at most (weights included), so that a run with a compressed KV
// cache can be compared with one without on the same card (compression-design.md §7.7 item 1). CUDA builds only;
// on the CPU, or in a build without CUDA, there is nothing to measure and the peak is empty.
#pragma once
#include <ATen/ATen.h>

#include <cstdint>
#include <optional>

namespace specpress::tools {

class PeakDeviceMemory {
 public:
  // Starts a measurement on `device`: the allocator's peak is reset to what it holds now.
  explicit PeakDeviceMemory(at::Device device);
  // Bytes allocated at most since the start (none on the CPU).
  std::optional<int64_t> peak_bytes() const;

 private:
  std::optional<at::DeviceIndex> cuda_index_;
};

}  // namespace specpress::tools
