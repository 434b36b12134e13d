// norm_rope_row.cuh — the q/k head transform of Qwen3 for one head row, by one warp: RMSNorm over the head
// (weight w, eps), then NeoX rotate-half RoPE at one position, rounded to bf16 where the ATen reference
// rounds. Shared by the q/k-norm + RoPE kernel (qk_norm_rope.cu) and the small-T attention kernel, which
// transforms its own query rows and new keys (attention.cu), so both write bitwise the same values.
#pragma once
#include "kernels/common.cuh"

namespace specpress::kernels::detail {

constexpr int kNormRopeMaxPairsPerLane = 4;  // head_dim <= 2 * 32 * 4

// dst[0 .. hd) = rope(rmsnorm(src[0 .. hd)) * w) at the position whose table rows are cs / sn ([hd] fp32).
// Lane l owns the rotation pairs (i, i + hd/2) for i = l, l + 32, ..., so the partner is in the same thread.
// Every lane of the warp must call it (warp reduction).
__device__ __forceinline__ void norm_rope_row(const bf16* src, const bf16* w, const float* cs, const float* sn,
                                              int hd, float eps, int lane, bf16* dst) {
  const int half = hd / 2;
  float lo[kNormRopeMaxPairsPerLane], hi[kNormRopeMaxPairsPerLane];
  float ss = 0.f;
#pragma unroll
  for (int j = 0; j < kNormRopeMaxPairsPerLane; ++j) {
    const int i = lane + 32 * j;
    lo[j] = hi[j] = 0.f;
    if (i < half) {
      lo[j] = to_f(src[i]);
      hi[j] = to_f(src[i + half]);
      ss += lo[j] * lo[j] + hi[j] * hi[j];
    }
  }
  ss = warp_sum(ss);
  const float rs = rsqrtf(ss / static_cast<float>(hd) + eps);
#pragma unroll
  for (int j = 0; j < kNormRopeMaxPairsPerLane; ++j) {
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

}  // namespace specpress::kernels::detail
