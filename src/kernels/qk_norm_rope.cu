// qk_norm_rope.cu — see qk_norm_rope.h. One warp per (row, head): norm_rope_row (norm_rope_row.cuh) for q
// and k heads, a copy for v heads.
#include "kernels/common.cuh"
#include "kernels/norm_rope_row.cuh"
#include "kernels/qk_norm_rope.h"

namespace specpress::kernels {
namespace {
using namespace detail;
constexpr int kWarps = 4;

__global__ void __launch_bounds__(kWarps * 32) qk_norm_rope_kernel(QkNormRopeArgs a) {
  pdl_begin();
  const int lane = threadIdx.x & 31;
  const int head = blockIdx.y * kWarps + (threadIdx.x >> 5);
  const int t = blockIdx.x;
  const int n_heads = a.nq + 2 * a.nkv;
  if (head >= n_heads) return;
  const int hd = a.head_dim;
  const int pos = *a.pos_base + t;
  const int64_t layer = blockIdx.z;
  const bf16* src = a.qkv + static_cast<int64_t>(t) * a.ld + layer * a.qkv_layer_stride + static_cast<int64_t>(head) * hd;
  bf16* const k_cache = a.k_cache + layer * a.cache_layer_stride;
  bf16* const v_cache = a.v_cache + layer * a.cache_layer_stride;
  const bf16* const k_norm = a.k_norm + layer * a.k_norm_layer_stride;
  const float scale = a.row_scale != nullptr ? a.row_scale[t] : 1.f;

  if (head >= a.nq + a.nkv) {  // v head: plain copy into the cache
    const int kvh = head - a.nq - a.nkv;
    bf16* dst = v_cache + (static_cast<int64_t>(kvh) * a.cache_capacity + pos) * hd;
    for (int i = lane; i < hd; i += 32) dst[i] = to_b(to_f(src[i]) * scale);
    return;
  }
  const bool is_q = head < a.nq;
  bf16* dst = is_q ? a.q_out + (static_cast<int64_t>(t) * a.nq + head) * hd
                   : k_cache + (static_cast<int64_t>(head - a.nq) * a.cache_capacity + pos) * hd;
  norm_rope_row(src, is_q ? a.q_norm : k_norm, a.cos + static_cast<int64_t>(pos) * hd,
                a.sin + static_cast<int64_t>(pos) * hd, hd, a.eps, lane, dst, scale);
}

}  // namespace

cudaError_t qk_norm_rope(const QkNormRopeArgs& a, cudaStream_t stream) {
  if (a.T <= 0) return cudaSuccess;
  if (a.head_dim <= 0 || a.head_dim % 2 != 0 || a.head_dim > 64 * kNormRopeMaxPairsPerLane || a.nkv <= 0 || a.nq < 0 ||
      (a.nq > 0 && (a.q_out == nullptr || a.q_norm == nullptr)) || a.k_norm == nullptr || a.pos_base == nullptr ||
      a.k_cache == nullptr || a.v_cache == nullptr || a.cos == nullptr || a.sin == nullptr || a.layers < 1 ||
      (a.layers > 1 && a.nq != 0))
    return cudaErrorInvalidValue;
  const int n_heads = a.nq + 2 * a.nkv;
  dim3 grid(a.T, (n_heads + kWarps - 1) / kWarps, a.layers);
  return launch_kernel(qk_norm_rope_kernel, grid, kWarps * 32, 0, stream, a);
}

}  // namespace specpress::kernels
