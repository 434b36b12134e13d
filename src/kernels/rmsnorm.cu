// rmsnorm.cu — see rmsnorm.h. One block per row; the row's work is rmsnorm_row (rmsnorm_row.cuh), which
// the GEMV's norm epilogue shares.
#include "kernels/common.cuh"
#include "kernels/rmsnorm.h"
#include "kernels/rmsnorm_row.cuh"

namespace specpress::kernels {
namespace {
using namespace detail;
constexpr int kThreads = kRmsThreads, kMaxVec = kRmsMaxVec;

__global__ void __launch_bounds__(kThreads) rmsnorm_kernel(RmsNormArgs a) {
  pdl_begin();
  __shared__ float scratch[32];
  rmsnorm_row<false>(a, blockIdx.x, scratch);
}

}  // namespace

cudaError_t rmsnorm(const RmsNormArgs& a, cudaStream_t stream) {
  if (a.rows <= 0) return cudaSuccess;
  if (a.H <= 0 || a.H % 8 != 0 || a.H > kThreads * kMaxVec * 8 || a.x == nullptr || a.weight == nullptr ||
      a.y == nullptr || (a.sum_out2 != nullptr && a.residual == nullptr))
    return cudaErrorInvalidValue;
  return launch_kernel(rmsnorm_kernel, a.rows, kThreads, 0, stream, a);
}

}  // namespace specpress::kernels
