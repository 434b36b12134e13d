// l2_prefetch.cu — see l2_prefetch.h. A thread a row slice, grid-strided; slices longer than kMaxBulk bytes are
// issued in pieces.
#include "kernels/l2_prefetch.h"

namespace specpress::kernels {
namespace {

constexpr int64_t kMaxBulk = int64_t{1} << 20;
constexpr int kThreads = 256, kMaxBlocks = 16;

__global__ void __launch_bounds__(kThreads) l2_prefetch_kernel(const char* base, int64_t rows, int64_t stride,
                                                               int64_t offset, int64_t bytes) {
  for (int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; r < rows;
       r += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const char* p = base + r * stride + offset;
    for (int64_t done = 0; done < bytes; done += kMaxBulk) {
      const int64_t n = bytes - done < kMaxBulk ? bytes - done : kMaxBulk;
      asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(p + done), "r"(static_cast<unsigned>(n))
                   : "memory");
    }
  }
}

}  // namespace

cudaError_t l2_prefetch_rows(const void* base, int64_t rows, int64_t stride, int64_t offset, int64_t bytes,
                             cudaStream_t stream) {
  if (rows <= 0 || bytes <= 0) return cudaSuccess;
  const auto start = reinterpret_cast<uintptr_t>(base) + static_cast<uintptr_t>(offset);
  if (base == nullptr || offset < 0 || start % 16 != 0 || stride % 16 != 0 || bytes % 16 != 0)
    return cudaErrorInvalidValue;
  const int64_t blocks = (rows + kThreads - 1) / kThreads;
  const char* p = static_cast<const char*>(base);
  void* args[] = {&p, &rows, &stride, &offset, &bytes};
  // a plain launch (no attributes: no PDL), whose status is this launch's alone
  return cudaLaunchKernel(reinterpret_cast<const void*>(&l2_prefetch_kernel),
                          dim3(static_cast<unsigned>(blocks < kMaxBlocks ? blocks : kMaxBlocks)), dim3(kThreads), args, 0,
                          stream);
}

}  // namespace specpress::kernels
