// decode_step.cu — see decode_step.h.
#include <cooperative_groups.h>

#include <cfloat>

#include "kernels/argmax.cuh"
#include "kernels/common.cuh"
#include "kernels/decode_step.h"

namespace specpress::kernels {
namespace {
using namespace detail;
namespace cg = cooperative_groups;

__global__ void embedding_kernel(const bf16* table, const int64_t* ids, bf16* out, int rows, int H) {
  pdl_begin();
  const int row = blockIdx.x;
  const int64_t id = ids[row];
  for (int c = threadIdx.x * 8; c < H; c += blockDim.x * 8)
    *reinterpret_cast<uint4*>(out + static_cast<int64_t>(row) * H + c) =
        *reinterpret_cast<const uint4*>(table + id * H + c);
}

// Combines one (value, index) per thread of the block into every thread of warp 0 (the block's first maximum).
__device__ __forceinline__ void block_argmax(float& bv, int& bi) {
  __shared__ float best_v[32];
  __shared__ int best_i[32];
  warp_argmax(bv, bi);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    best_v[warp] = bv;
    best_i[warp] = bi;
  }
  __syncthreads();
  if (warp == 0) {
    const bool present = lane < static_cast<int>(blockDim.x >> 5);
    bv = present ? best_v[lane] : -INFINITY;
    bi = present ? best_i[lane] : kNoIndex;
    warp_argmax(bv, bi);
  }
}

// One block a row: the SPECPRESS_ARGMAX_SPLIT=0 kernel (and the one before the split version).
constexpr int kArgmaxThreads = 1024;
__global__ void __launch_bounds__(kArgmaxThreads) argmax_kernel(const bf16* logits, int64_t ld, int V, int64_t* out) {
  pdl_begin();
  const bf16* row = logits + static_cast<int64_t>(blockIdx.x) * ld;
  float bv = -INFINITY;
  int bi = kNoIndex;
  for (int v = threadIdx.x; v < V; v += kArgmaxThreads) {
    const float x = to_f(row[v]);
    if (replaces(x, bv, bi)) {  // strided ascending scan: the first maximum of this thread's subset
      bv = x;
      bi = v;
    }
  }
  block_argmax(bv, bi);
  if (threadIdx.x == 0) out[blockIdx.x] = bi == kNoIndex ? 0 : bi;  // all-NaN row: 0, as no valid max exists
}

// A cluster of kArgmaxSplits blocks a row, each scanning one contiguous slice of it (16-byte loads where the row
// allows), then block rank 0 folds the slices' maxima through distributed shared memory. A row of 151936 logits
// is 300 KB: one block a row reads it at one SM's rate (the verify step's argmax took 17 us after its LM head,
// docs/PERF.md, twelfth pass), a cluster at eight SMs'. The same rule as argmax_kernel: the maximum, the lowest
// index among equal maxima, NaN never a maximum.
constexpr int kArgmaxSplits = 8, kArgmaxSplitThreads = 512;
__global__ void __cluster_dims__(kArgmaxSplits, 1, 1) __launch_bounds__(kArgmaxSplitThreads)
    argmax_split_kernel(const bf16* logits, int64_t ld, int V, int64_t* out, bool vectors) {
  pdl_begin();
  const bf16* row = logits + static_cast<int64_t>(blockIdx.y) * ld;
  const int slice = ((V + kArgmaxSplits - 1) / kArgmaxSplits + 7) / 8 * 8;  // whole 8-logit chunks
  const int begin = min(V, static_cast<int>(blockIdx.x) * slice), end = min(V, begin + slice);
  float bv = -INFINITY;
  int bi = kNoIndex;
  if (vectors) {  // V % 8 == 0 and 16-byte aligned rows: every slice is whole chunks
    const uint4* chunks = reinterpret_cast<const uint4*>(row);
    for (int c = begin / 8 + static_cast<int>(threadIdx.x); c < end / 8; c += kArgmaxSplitThreads) {
      const uint4 u = chunks[c];
      const bf16* x = reinterpret_cast<const bf16*>(&u);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float f = to_f(x[j]);
        if (replaces(f, bv, bi)) {  // ascending within the chunk and over this thread's chunks
          bv = f;
          bi = c * 8 + j;
        }
      }
    }
  } else {
    for (int v = begin + static_cast<int>(threadIdx.x); v < end; v += kArgmaxSplitThreads) {
      const float f = to_f(row[v]);
      if (replaces(f, bv, bi)) {
        bv = f;
        bi = v;
      }
    }
  }
  block_argmax(bv, bi);
  __shared__ float slice_v;
  __shared__ int slice_i;
  if (threadIdx.x == 0) {
    slice_v = bv;
    slice_i = bi;
  }
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();
  if (cluster.block_rank() == 0 && threadIdx.x < 32) {
    const int lane = static_cast<int>(threadIdx.x);
    float v = -INFINITY;
    int i = kNoIndex;
    if (lane < kArgmaxSplits) {
      v = *cluster.map_shared_rank(&slice_v, lane);
      i = *cluster.map_shared_rank(&slice_i, lane);
    }
    warp_argmax(v, i);
    if (lane == 0) out[blockIdx.y] = i == kNoIndex ? 0 : i;
  }
  cluster.sync();  // the other blocks' shared memory stays until rank 0 has read it
}

__global__ void accept_kernel(int64_t* block_ids, const int64_t* posterior, int B, int64_t mask_id, int* start,
                              int* ctx_start, int64_t* record, int64_t* host_record) {
  pdl_begin();
  int a = 0;
  while (a < B - 1 && block_ids[a + 1] == posterior[a]) ++a;
  for (int i = 0; i < B; ++i) {
    record[i] = block_ids[i];
    record[B + i] = posterior[i];
  }
  record[2 * B] = a;
  if (host_record != nullptr) {
    for (int i = 0; i < 2 * B + 1; ++i) host_record[i] = record[i];
    __threadfence_system();
  }
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

cudaError_t argmax_rows(const __nv_bfloat16* logits, int64_t ld, int rows, int V, int64_t* out, bool split,
                        cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  if (V <= 0) return cudaErrorInvalidValue;
  const LcSkipScope lc(kLcArgmax);
  // the split kernel's rows are its grid's y dimension (at most 65535); the one-block kernel's are x
  if (!split || rows > 65535) return launch_kernel(argmax_kernel, rows, kArgmaxThreads, 0, stream, logits, ld, V, out);
  const bool vectors = V % 8 == 0 && ld % 8 == 0 && reinterpret_cast<uintptr_t>(logits) % 16 == 0;
  return launch_kernel(argmax_split_kernel, dim3(kArgmaxSplits, static_cast<unsigned>(rows)), kArgmaxSplitThreads, 0,
                       stream, logits, ld, V, out, vectors);
}

cudaError_t dflash_accept(int64_t* block_ids, const int64_t* posterior, int B, int64_t mask_id, int* start,
                          int* ctx_start, int64_t* record, cudaStream_t stream, int64_t* host_record) {
  if (B < 2) return cudaErrorInvalidValue;
  return launch_kernel(accept_kernel, 1, 1, 0, stream, block_ids, posterior, B, mask_id, start, ctx_start, record,
                       host_record);
}

cudaError_t advance_counter(int* counter, int inc, cudaStream_t stream) {
  return launch_kernel(advance_kernel, 1, 1, 0, stream, counter, inc);
}

}  // namespace specpress::kernels
