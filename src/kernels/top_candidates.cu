// top_candidates.cu — see top_candidates.h.
#include "kernels/common.cuh"
#include "kernels/temperature_draw.h"
#include "kernels/top_candidates.h"

namespace specpress::kernels {
namespace {
using namespace detail;

constexpr int kThreads = 256;      // the histogram and gather blocks
constexpr int kWarps = kThreads / 32;
constexpr int kSortThreads = 1024;
constexpr int kBinShift = 21;      // a bin: the order key's top 11 bits (sign, exponent, two mantissa bits)
constexpr int kBinsPerThread = kTopCandidatesBins / kThreads;
static_assert(kTopCandidatesBins == (1 << (32 - kBinShift)) && kBinsPerThread * kThreads == kTopCandidatesBins);
static_assert(kTopCandidatesKeys == 4096, "the sort's shared keys");

// A float's order key: larger scores give larger keys; every NaN the largest key, -0 that of +0.
__device__ __forceinline__ unsigned order_key(float f) {
  if (f != f) return 0xFFFFFFFFu;
  unsigned u = __float_as_uint(f);
  if (u == 0x80000000u) u = 0u;
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ float score_of(unsigned key) {
  if (key == 0xFFFFFFFFu) return __uint_as_float(0x7FC00000u);
  return __uint_as_float((key & 0x80000000u) ? (key & 0x7FFFFFFFu) : ~key);
}
// The 64-bit key of token `id`: the order key, then the id reversed (equal scores: the lower id is the larger key).
// Never 0 (the smallest order key is -inf's, 0x007FFFFF), so 0 pads the sort.
__device__ __forceinline__ unsigned long long full_key(unsigned key, int id) {
  return (static_cast<unsigned long long>(key) << 32) | (0xFFFFFFFFu - static_cast<unsigned>(id));
}

// Block (s, r): the order keys of slice s of row r into the row's histogram.
__global__ void __launch_bounds__(kThreads) histogram_kernel(TopCandidatesArgs a, int splits) {
  pdl_begin();
  __shared__ unsigned bins[kTopCandidatesBins];
  for (int b = threadIdx.x; b < kTopCandidatesBins; b += kThreads) bins[b] = 0;
  __syncthreads();
  const int row = blockIdx.y, width = slice_width(a.vocab, splits);
  const int lo = blockIdx.x * width, hi = min(a.vocab, lo + width);
  const float* x = a.scores + static_cast<long long>(row) * a.row_stride;
  for (int i = lo + threadIdx.x; i < hi; i += kThreads) atomicAdd(&bins[order_key(x[i]) >> kBinShift], 1u);
  __syncthreads();
  unsigned* h = a.histogram + static_cast<long long>(row) * kTopCandidatesBins;
  for (int b = threadIdx.x; b < kTopCandidatesBins; b += kThreads)
    if (bins[b] != 0) atomicAdd(&h[b], bins[b]);
}

// The bin where row `row`'s count from the top reaches `count` (thread t adds the bins 8t .. 8t + 7 from the top).
__device__ int boundary_bin(const unsigned* h, int count) {
  __shared__ unsigned warp_sums[kWarps];
  __shared__ int found;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int top = kTopCandidatesBins - 1 - kBinsPerThread * static_cast<int>(threadIdx.x);
  unsigned mine = 0;
#pragma unroll
  for (int k = 0; k < kBinsPerThread; ++k) mine += h[top - k];
  unsigned inclusive = mine;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const unsigned up = __shfl_up_sync(0xffffffffu, inclusive, o);
    if (lane >= o) inclusive += up;
  }
  if (lane == 31) warp_sums[warp] = inclusive;
  if (threadIdx.x == 0) found = -1;
  __syncthreads();
  unsigned above = inclusive - mine;
  for (int w = 0; w < warp; ++w) above += warp_sums[w];
  const unsigned c = static_cast<unsigned>(count);
  if (above < c && above + mine >= c) {
    for (int k = 0; k < kBinsPerThread; ++k) {
      above += h[top - k];
      if (above >= c) {
        found = top - k;
        break;
      }
    }
  }
  __syncthreads();
  return found;
}

// Block (s, r): finds row r's boundary bin and gathers slice s's keys above it and in it.
__global__ void __launch_bounds__(kThreads) gather_kernel(TopCandidatesArgs a, int splits) {
  pdl_begin();
  const int row = blockIdx.y;
  const int bin = boundary_bin(a.histogram + static_cast<long long>(row) * kTopCandidatesBins, a.count);
  const int width = slice_width(a.vocab, splits);
  const int lo = blockIdx.x * width, hi = min(a.vocab, lo + width);
  const float* x = a.scores + static_cast<long long>(row) * a.row_stride;
  unsigned* counters = a.counters + 2LL * row;
  unsigned long long* keys = a.keys + static_cast<long long>(row) * kTopCandidatesKeys;
  for (int i = lo + threadIdx.x; i < hi; i += kThreads) {
    const unsigned key = order_key(x[i]);
    const int b = static_cast<int>(key >> kBinShift);
    if (b > bin) {
      const unsigned slot = atomicAdd(&counters[0], 1u);  // fewer than count of them (the check: a guard)
      if (slot < kTopCandidatesMaxCount) keys[slot] = full_key(key, i);
    } else if (b == bin) {
      const unsigned slot = atomicAdd(&counters[1], 1u);
      if (slot < kTopCandidatesBoundaryCap) keys[kTopCandidatesMaxCount + slot] = full_key(key, i);
    }
  }
}

// Block r: sorts row r's gathered keys, writes the first `count` and clears the row's scratch.
__global__ void __launch_bounds__(kSortThreads) sort_kernel(TopCandidatesArgs a) {
  pdl_begin();
  __shared__ unsigned long long s[kTopCandidatesKeys];
  const int row = blockIdx.x;
  unsigned* counters = a.counters + 2LL * row;
  const unsigned above = counters[0], boundary = counters[1];
  const unsigned long long* keys = a.keys + static_cast<long long>(row) * kTopCandidatesKeys;
  double* out = a.out + static_cast<long long>(row) * 2 * a.count;
  // too many to sort: the sampler's fallback; and, as a guard, counts no boundary bin of this row gives (a histogram
  // not the row's): `count` or more above it, or fewer than `count` in all
  const unsigned count = static_cast<unsigned>(a.count);
  if (boundary > static_cast<unsigned>(kTopCandidatesBoundaryCap) || above >= count || above + boundary < count) {
    for (int j = threadIdx.x; j < a.count; j += kSortThreads) out[j] = NAN, out[a.count + j] = -1.0;
  } else {
    const int n = static_cast<int>(above + boundary);
    int size = 1;
    while (size < n) size <<= 1;
    for (int i = threadIdx.x; i < size; i += kSortThreads)
      s[i] = i < static_cast<int>(above) ? keys[i]
             : i < n                     ? keys[kTopCandidatesMaxCount + (i - static_cast<int>(above))]
                                         : 0ull;
    __syncthreads();
    // bitonic, descending
    for (int k = 2; k <= size; k <<= 1) {
      for (int j = k >> 1; j > 0; j >>= 1) {
        for (int i = threadIdx.x; i < size; i += kSortThreads) {
          const int l = i ^ j;
          if (l > i) {
            const unsigned long long x = s[i], y = s[l];
            if ((i & k) == 0 ? x < y : x > y) s[i] = y, s[l] = x;
          }
        }
        __syncthreads();
      }
    }
    for (int j = threadIdx.x; j < a.count; j += kSortThreads) {
      const unsigned long long key = s[j];
      out[j] = static_cast<double>(score_of(static_cast<unsigned>(key >> 32)));
      out[a.count + j] = static_cast<double>(0xFFFFFFFFu - static_cast<unsigned>(key & 0xFFFFFFFFu));
    }
  }
  __syncthreads();  // every thread has read the counters
  unsigned* h = a.histogram + static_cast<long long>(row) * kTopCandidatesBins;
  for (int b = threadIdx.x; b < kTopCandidatesBins; b += kSortThreads) h[b] = 0;
  if (threadIdx.x == 0) counters[0] = 0, counters[1] = 0;
}

}  // namespace

cudaError_t top_candidates(const TopCandidatesArgs& a, cudaStream_t stream) {
  if (a.rows <= 0) return cudaSuccess;
  if (a.scores == nullptr || a.histogram == nullptr || a.counters == nullptr || a.keys == nullptr ||
      a.out == nullptr || a.vocab <= 0 || a.row_stride < a.vocab || a.count < 1 || a.count > a.vocab ||
      a.count > kTopCandidatesMaxCount)
    return cudaErrorInvalidValue;
  const int splits = temperature_draw_splits(a.vocab);  // the same slices as the draw's
  const dim3 grid(static_cast<unsigned>(splits), static_cast<unsigned>(a.rows));
  cudaError_t e = launch_kernel(histogram_kernel, grid, dim3(kThreads), 0, stream, a, splits);
  if (e == cudaSuccess) e = launch_kernel(gather_kernel, grid, dim3(kThreads), 0, stream, a, splits);
  if (e == cudaSuccess)
    e = launch_kernel(sort_kernel, dim3(static_cast<unsigned>(a.rows)), dim3(kSortThreads), 0, stream, a);
  return e;
}

}  // namespace specpress::kernels
