// decode_step.cu — see decode_step.h.
#include <cfloat>

#include "kernels/common.cuh"
#include "kernels/decode_step.h"

namespace specpress::kernels {
namespace {
using namespace detail;

__global__ void embedding_kernel(const bf16* table, const int64_t* ids, bf16* out, int rows, int H) {
  pdl_begin();
  const int row = blockIdx.x;
  const int64_t id = ids[row];
  for (int c = threadIdx.x * 8; c < H; c += blockDim.x * 8)
    *reinterpret_cast<uint4*>(out + static_cast<int64_t>(row) * H + c) =
        *reinterpret_cast<const uint4*>(table + id * H + c);
}

// Warp-wide (max value, lowest index among equals) into every lane.
__device__ __forceinline__ void warp_argmax(float& bv, int& bi) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
    const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
    if (ov > bv || (ov == bv && oi < bi)) {
      bv = ov;
      bi = oi;
    }
  }
}

constexpr int kArgmaxThreads = 1024;
__global__ void __launch_bounds__(kArgmaxThreads) argmax_kernel(const bf16* logits, int64_t ld, int V, int64_t* out) {
  pdl_begin();
  __shared__ float best_v[32];
  __shared__ int best_i[32];
  const bf16* row = logits + static_cast<int64_t>(blockIdx.x) * ld;
  float bv = -INFINITY;
  int bi = 0x7fffffff;
  for (int v = threadIdx.x; v < V; v += kArgmaxThreads) {
    const float x = to_f(row[v]);
    if (x > bv) {  // strided ascending scan: the first maximum of this thread's subset
      bv = x;
      bi = v;
    }
  }
  warp_argmax(bv, bi);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    best_v[warp] = bv;
    best_i[warp] = bi;
  }
  __syncthreads();
  if (warp == 0) {
    bv = best_v[lane];
    bi = best_i[lane];
    warp_argmax(bv, bi);
    if (lane == 0) out[blockIdx.x] = bi == 0x7fffffff ? 0 : bi;  // all-NaN row: 0, as no valid max exists
  }
}

__global__ void accept_kernel(int64_t* block_ids, const int64_t* posterior, int B, int64_t mask_id, int* start,
                              int* ctx_start, int64_t* record) {
  pdl_begin();
  int a = 0;
  while (a < B - 1 && block_ids[a + 1] == posterior[a]) ++a;
  for (int i = 0; i < B; ++i) {
    record[i] = block_ids[i];
    record[B + i] = posterior[i];
  }
  record[2 * B] = a;
  const int s = *start;
  *ctx_start = s;
  *start = s + a + 1;
  block_ids[0] = posterior[a];
  for (int i = 1; i < B; ++i) block_ids[i] = mask_id;
}

__global__ void advance_kernel(int* counter, int inc) {
  pdl_begin();
  *counter += inc;
}

}  // namespace

cudaError_t embedding_gather(const __nv_bfloat16* table, const int64_t* ids, __nv_bfloat16* out, int rows, int H,
                             cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  if (H <= 0 || H % 8 != 0) return cudaErrorInvalidValue;
  const int threads = H / 8 < 256 ? ((H / 8 + 31) / 32) * 32 : 256;
  return launch_kernel(embedding_kernel, rows, threads, 0, stream, table, ids, out, rows, H);
}

cudaError_t argmax_rows(const __nv_bfloat16* logits, int64_t ld, int rows, int V, int64_t* out, cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  if (V <= 0) return cudaErrorInvalidValue;
  return launch_kernel(argmax_kernel, rows, kArgmaxThreads, 0, stream, logits, ld, V, out);
}

cudaError_t dflash_accept(int64_t* block_ids, const int64_t* posterior, int B, int64_t mask_id, int* start,
                          int* ctx_start, int64_t* record, cudaStream_t stream) {
  if (B < 2) return cudaErrorInvalidValue;
  return launch_kernel(accept_kernel, 1, 1, 0, stream, block_ids, posterior, B, mask_id, start, ctx_start, record);
}

cudaError_t advance_counter(int* counter, int inc, cudaStream_t stream) {
  return launch_kernel(advance_kernel, 1, 1, 0, stream, counter, inc);
}

}  // namespace specpress::kernels
