// qk_norm_rope.cu — see qk_norm_rope.h. One warp per (row, head); lane l owns the rotation pairs
// (i, i + head_dim/2) for i = l, l + 32, ..., so the rotate-half partner is in the same thread.
#include "kernels/common.cuh"
#include "kernels/qk_norm_rope.h"

namespace specpress::kernels {
namespace {
using namespace detail;
constexpr int kWarps = 4, kMaxPairsPerLane = 4;  // head_dim <= 2 * 32 * 4

__global__ void __launch_bounds__(kWarps * 32) qk_norm_rope_kernel(QkNormRopeArgs a) {
  pdl_begin();
  const int lane = threadIdx.x & 31;
  const int head = blockIdx.y * kWarps + (threadIdx.x >> 5);
  const int t = blockIdx.x;
  const int n_heads = a.nq + 2 * a.nkv;
  if (head >= n_heads) return;
  const int hd = a.head_dim, half = hd / 2;
  const int pos = *a.pos_base + t;
  const bf16* src = a.qkv + static_cast<int64_t>(t) * a.ld + static_cast<int64_t>(head) * hd;

  if (head >= a.nq + a.nkv) {  // v head: plain copy into the cache
    const int kvh = head - a.nq - a.nkv;
    bf16* dst = a.v_cache + (static_cast<int64_t>(kvh) * a.cache_capacity + pos) * hd;
    for (int i = lane; i < hd; i += 32) dst[i] = src[i];
    return;
  }
  const bool is_q = head < a.nq;
  const bf16* w = is_q ? a.q_norm : a.k_norm;
  float lo[kMaxPairsPerLane], hi[kMaxPairsPerLane];
  float ss = 0.f;
#pragma unroll
  for (int j = 0; j < kMaxPairsPerLane; ++j) {
    const int i = lane + 32 * j;
    lo[j] = hi[j] = 0.f;
    if (i < half) {
      lo[j] = to_f(src[i]);
      hi[j] = to_f(src[i + half]);
      ss += lo[j] * lo[j] + hi[j] * hi[j];
    }
  }
  ss = warp_sum(ss);
  const float rs = rsqrtf(ss / static_cast<float>(hd) + a.eps);
  bf16* dst = is_q ? a.q_out + (static_cast<int64_t>(t) * a.nq + head) * hd
                   : a.k_cache + (static_cast<int64_t>(head - a.nq) * a.cache_capacity + pos) * hd;
  const float* cs = a.cos + static_cast<int64_t>(pos) * hd;
  const float* sn = a.sin + static_cast<int64_t>(pos) * hd;
#pragma unroll
  for (int j = 0; j < kMaxPairsPerLane; ++j) {
    const int i = lane + 32 * j;
    if (i < half) {
      // normed = bf16(w * bf16(x * rs)); out = bf16(bf16(n * cos) + bf16(rotate_half(n) * sin))
      const float n_lo = round_b(to_f(w[i]) * round_b(lo[j] * rs));
      const float n_hi = round_b(to_f(w[i + half]) * round_b(hi[j] * rs));
      const float c_lo = round_b(cs[i]), s_lo = round_b(sn[i]);
      const float c_hi = round_b(cs[i + half]), s_hi = round_b(sn[i + half]);
      dst[i] = to_b(round_b(n_lo * c_lo) + round_b(-n_hi * s_lo));
      dst[i + half] = to_b(round_b(n_hi * c_hi) + round_b(n_lo * s_hi));
    }
  }
}

}  // namespace

cudaError_t qk_norm_rope(const QkNormRopeArgs& a, cudaStream_t stream) {
  if (a.T <= 0) return cudaSuccess;
  if (a.head_dim <= 0 || a.head_dim % 2 != 0 || a.head_dim > 64 * kMaxPairsPerLane || a.nkv <= 0 || a.nq < 0 ||
      (a.nq > 0 && (a.q_out == nullptr || a.q_norm == nullptr)) || a.k_norm == nullptr || a.pos_base == nullptr ||
      a.k_cache == nullptr || a.v_cache == nullptr || a.cos == nullptr || a.sin == nullptr)
    return cudaErrorInvalidValue;
  const int n_heads = a.nq + 2 * a.nkv;
  dim3 grid(a.T, (n_heads + kWarps - 1) / kWarps);
  return launch_kernel(qk_norm_rope_kernel, grid, kWarps * 32, 0, stream, a);
}

}  // namespace specpress::kernels
