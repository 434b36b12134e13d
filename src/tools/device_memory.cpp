// device_memory.cpp — see device_memory.h. The CUDA allocator's statistics exist only in a CUDA LibTorch, which is
// what builds with SPECPRESS_FAST_PATH link.
#include "tools/device_memory.h"

#ifdef SPECPRESS_FAST_PATH
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace specpress::tools {

PeakDeviceMemory::PeakDeviceMemory(at::Device device) {
#ifdef SPECPRESS_FAST_PATH
  if (!device.is_cuda()) return;
  cuda_index_ = device.has_index() ? device.index() : at::DeviceIndex{0};
  c10::cuda::CUDACachingAllocator::resetPeakStats(*cuda_index_);
#else
  (void)device;
#endif
}

std::optional<int64_t> PeakDeviceMemory::peak_bytes() const {
#ifdef SPECPRESS_FAST_PATH
  if (!cuda_index_) return std::nullopt;
  // index 0: StatType::AGGREGATE, over the small and large pools (the enum's namespace moved between versions)
  return c10::cuda::CUDACachingAllocator::getDeviceStats(*cuda_index_).allocated_bytes[0].peak;
#else
  return std::nullopt;
#endif
}

}  // namespace specpress::tools
