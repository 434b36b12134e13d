// temperature_draw.cu — see temperature_draw.h. fp64 throughout, as the sampler's host-side and ATen transforms.
#include <climits>
#include <cmath>

#include "kernels/common.cuh"
#include "kernels/temperature_draw.h"

namespace specpress::kernels {
namespace {
using namespace detail;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr double kInf = INFINITY;

struct MaxOf {
  __device__ double operator()(double a, double b) const { return fmax(a, b); }
};
struct SumOf {
  __device__ double operator()(double a, double b) const { return a + b; }
};
struct MinOf {
  __device__ int operator()(int a, int b) const { return min(a, b); }
};
// A reduction by `op` (identity `init`) over the block's kThreads threads, every thread getting the result: xor
// shuffles within each warp, then the warps' values in warp order. `scratch` holds kWarps values.
template <typename T, typename Op>
__device__ T block_reduce(T v, T init, Op op, T* scratch) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  __syncthreads();  // scratch may still be read from a previous call
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = v;
  __syncthreads();
  T t = init;
  for (int w = 0; w < kWarps; ++w) t = op(t, scratch[w]);
  return t;
}
// The sum of v over the threads before this one (block order); `scratch` holds kWarps doubles.
__device__ double block_exclusive_sum_d(double v, double* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  double inclusive = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const double up = __shfl_up_sync(0xffffffffu, inclusive, o);
    if (lane >= o) inclusive += up;
  }
  __syncthreads();
  if (lane == 31) scratch[warp] = inclusive;
  __syncthreads();
  double before = 0.0;
  for (int w = 0; w < warp; ++w) before += scratch[w];
  return before + inclusive - v;
}
__device__ int block_min_i(int v, int* scratch) { return block_reduce(v, INT_MAX, MinOf{}, scratch); }
__device__ int block_max_i(int v, int* scratch) { return -block_min_i(-v, scratch); }

// Block (s, r): slice s of row r -> partials (the slice's maximum of x = logit / T, its sum of exp(x - maximum)),
// both NaN where the slice holds a NaN. A slice of -inf only has (-inf, 0); one with +inf has (+inf, 0).
__global__ void __launch_bounds__(kThreads) slice_partials_kernel(TemperatureDrawArgs a, int splits) {
  pdl_begin();
  __shared__ double scratch[kWarps];
  const int row = blockIdx.y, s = blockIdx.x;
  const int width = slice_width(a.vocab, splits);
  const int lo = s * width, hi = min(a.vocab, lo + width);
  const float* x = a.logits + static_cast<long long>(row) * a.row_stride;
  double m = -kInf;
  int nan = 0;
  for (int i = lo + threadIdx.x; i < hi; i += kThreads) {
    const double v = static_cast<double>(x[i]) / a.temperature;
    if (v != v) nan = 1;
    else m = fmax(m, v);
  }
  nan = __syncthreads_or(nan);
  m = block_reduce(m, -kInf, MaxOf{}, scratch);
  double sum = 0.0;
  if (!nan && m > -kInf && m < kInf)
    for (int i = lo + threadIdx.x; i < hi; i += kThreads) sum += exp(static_cast<double>(x[i]) / a.temperature - m);
  sum = block_reduce(sum, 0.0, SumOf{}, scratch);
  if (threadIdx.x == 0) {
    double* p = a.partials + (static_cast<long long>(row) * kTemperatureDrawMaxSplits + s) * 2;
    p[0] = nan ? NAN : m;
    p[1] = nan ? NAN : sum;
  }
}

// Block r: merges row r's slices in order, finds the slice whose cumulative mass first exceeds u * total and the
// token in it. Where rounding leaves no such token, the last token with mass (the whole-vocabulary path's edge).
__global__ void __launch_bounds__(kThreads) pick_kernel(TemperatureDrawArgs a, int splits) {
  pdl_begin();
  __shared__ double scratch[kWarps];
  __shared__ int iscratch[kWarps];
  __shared__ double row_max, before_slice, target;
  __shared__ int slice, bad;
  const int row = blockIdx.x;
  if (threadIdx.x == 0) {
    const double* p = a.partials + static_cast<long long>(row) * kTemperatureDrawMaxSplits * 2;
    double m = -kInf;
    int b = 0;
    for (int s = 0; s < splits; ++s) {
      if (p[2 * s] != p[2 * s]) b = 1;
      else m = fmax(m, p[2 * s]);
    }
    b = b || !(m > -kInf && m < kInf);
    double total = 0.0;
    for (int s = 0; s < splits && !b; ++s) total += p[2 * s + 1] * exp(p[2 * s] - m);
    const double t = a.uniforms[row] * total;
    // the first slice whose cumulative mass exceeds t, else the last with mass
    int found = -1, last = -1;
    double cum = 0.0, cum_found = 0.0, cum_last = 0.0;
    for (int s = 0; s < splits && !b; ++s) {
      const double c = p[2 * s + 1] * exp(p[2 * s] - m);
      if (c > 0.0) last = s, cum_last = cum;
      if (found < 0 && cum + c > t) found = s, cum_found = cum;
      cum += c;
    }
    bad = b;
    row_max = m;
    target = found >= 0 ? t : kInf;  // +inf: take the slice's last token with mass
    slice = found >= 0 ? found : last;
    before_slice = found >= 0 ? cum_found : cum_last;
  }
  __syncthreads();
  if (bad) {
    if (threadIdx.x == 0) a.picks[row] = -1;
    return;
  }
  const int width = slice_width(a.vocab, splits);
  const int lo = slice * width, hi = min(a.vocab, lo + width);
  const int per = (hi - lo + kThreads - 1) / kThreads;
  const int mine_lo = min(hi, lo + static_cast<int>(threadIdx.x) * per), mine_hi = min(hi, mine_lo + per);
  const float* x = a.logits + static_cast<long long>(row) * a.row_stride;
  const double m = row_max, t = target;
  double w = 0.0;
  int last_with_mass = -1;
  for (int i = mine_lo; i < mine_hi; ++i) {
    const double e = exp(static_cast<double>(x[i]) / a.temperature - m);
    w += e;
    if (e > 0.0) last_with_mass = i;
  }
  const double start = before_slice + block_exclusive_sum_d(w, scratch);
  // only a thread or token with mass may cross: the scan's rounding must not land on a banned token (-inf)
  const int crosser = block_min_i(w > 0.0 && start + w > t ? static_cast<int>(threadIdx.x) : kThreads, iscratch);
  const int slice_last = block_max_i(last_with_mass, iscratch);
  if (crosser == kThreads) {
    if (threadIdx.x == 0) a.picks[row] = slice_last;
    return;
  }
  if (static_cast<int>(threadIdx.x) != crosser) return;
  double c = start;
  for (int i = mine_lo; i < mine_hi; ++i) {
    const double e = exp(static_cast<double>(x[i]) / a.temperature - m);
    c += e;
    if (e > 0.0 && c > t) {
      a.picks[row] = i;
      return;
    }
  }
  a.picks[row] = last_with_mass >= 0 ? last_with_mass : slice_last;  // rounding: the running sum fell short
}

// Thread r: row r's sum of exp(x - max) over its slices in order (row_max and total as in pick_kernel).
__global__ void row_sums_kernel(TemperatureDrawArgs a, int splits, double* sums) {
  pdl_begin();
  const int row = blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= a.rows) return;
  const double* p = a.partials + static_cast<long long>(row) * kTemperatureDrawMaxSplits * 2;
  double m = -kInf;
  bool bad = false;
  for (int s = 0; s < splits; ++s) {
    if (p[2 * s] != p[2 * s]) bad = true;
    else m = fmax(m, p[2 * s]);
  }
  double total = 0.0;
  for (int s = 0; s < splits; ++s) total += p[2 * s + 1] * exp(p[2 * s] - m);
  sums[row] = bad || !(m > -kInf && m < kInf) ? NAN : total;
}

bool valid_partials_args(const TemperatureDrawArgs& a) {
  return a.vocab > 0 && a.row_stride >= a.vocab && a.temperature > 0.0 && a.logits != nullptr && a.partials != nullptr;
}

cudaError_t launch_partials(const TemperatureDrawArgs& a, int splits, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(splits), static_cast<unsigned>(a.rows));
  return launch_kernel(slice_partials_kernel, grid, dim3(kThreads), 0, stream, a, splits);
}

}  // namespace

int temperature_draw_splits(int vocab) {
  const int splits = vocab / 2048 + (vocab % 2048 != 0);
  return splits < 1 ? 1 : (splits > kTemperatureDrawMaxSplits ? kTemperatureDrawMaxSplits : splits);
}

cudaError_t temperature_draw(const TemperatureDrawArgs& a, cudaStream_t stream) {
  if (a.rows <= 0) return cudaSuccess;
  if (!valid_partials_args(a) || a.uniforms == nullptr || a.picks == nullptr) return cudaErrorInvalidValue;
  const int splits = temperature_draw_splits(a.vocab);
  const cudaError_t e = launch_partials(a, splits, stream);
  if (e != cudaSuccess) return e;
  return launch_kernel(pick_kernel, dim3(static_cast<unsigned>(a.rows)), dim3(kThreads), 0, stream, a, splits);
}

cudaError_t temperature_row_sums(const TemperatureDrawArgs& a, double* sums, cudaStream_t stream) {
  if (a.rows <= 0) return cudaSuccess;
  if (!valid_partials_args(a) || sums == nullptr) return cudaErrorInvalidValue;
  const int splits = temperature_draw_splits(a.vocab);
  const cudaError_t e = launch_partials(a, splits, stream);
  if (e != cudaSuccess) return e;
  return launch_kernel(row_sums_kernel, dim3(static_cast<unsigned>((a.rows + 31) / 32)), dim3(32), 0, stream, a, splits,
                       sums);
}

}  // namespace specpress::kernels
