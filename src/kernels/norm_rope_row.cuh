// norm_rope_row.cuh — the q/k head transform of Qwen3 for one head row, by one warp: RMSNorm over the head
// (weight w, eps), then NeoX rotate-half RoPE at one position, rounded to bf16 where the ATen reference
// rounds. Shared by the q/k-norm + RoPE kernel (qk_norm_rope.cu) and the small-T attention kernel, which
// transforms its own query rows and new keys (attention.cu), so both write bitwise the same values.
#pragma once
#include "kernels/common.cuh"

namespace specpress::kernels::detail {

constexpr int kNormRopeMaxPairsPerLane = 4;  // head_dim <= 2 * 32 * 4

// A head row's inputs as one lane holds them: the rotation pairs (i, i + hd/2) for i = lane, lane + 32, ...
// (so a pair's partner is in the same thread); zero past hd/2. Loading apart from the arithmetic lets a
// warp issue the loads of several rows before it waits for any (attention.cu).
struct NormRopeIn {
  float lo[kNormRopeMaxPairsPerLane], hi[kNormRopeMaxPairsPerLane];
};
__device__ __forceinline__ NormRopeIn norm_rope_load(const bf16* src, int hd, int lane) {
  const int half = hd / 2;
  NormRopeIn in;
#pragma unroll
  for (int j = 0; j < kNormRopeMaxPairsPerLane; ++j) {
    const int i = lane + 32 * j;
    in.lo[j] = i < half ? to_f(src[i]) : 0.f;
    in.hi[j] = i < half ? to_f(src[i + half]) : 0.f;
  }
  return in;
}

// rope(rmsnorm(row) * w) at the position whose table rows are cs / sn ([hd] fp32), for the row `in`:
// store(j, out_lo, out_hi) receives the outputs at i = lane + 32 j and i + hd/2. Every lane of the warp
// must call it (warp reduction).
template <typename Store>
__device__ __forceinline__ void norm_rope_finish(const NormRopeIn& in, const bf16* w, const float* cs, const float* sn,
                                                 int hd, float eps, int lane, Store&& store) {
  const int half = hd / 2;
  float ss = 0.f;
#pragma unroll
  for (int j = 0; j < kNormRopeMaxPairsPerLane; ++j)
    if (lane + 32 * j < half) ss += in.lo[j] * in.lo[j] + in.hi[j] * in.hi[j];
  ss = warp_sum(ss);
  const float rs = rsqrtf(ss / static_cast<float>(hd) + eps);
#pragma unroll
  for (int j = 0; j < kNormRopeMaxPairsPerLane; ++j) {
    const int i = lane + 32 * j;
    if (i < half) {
      // normed = bf16(w * bf16(x * rs)); out = bf16(bf16(n * cos) + bf16(rotate_half(n) * sin))
      const float n_lo = round_b(to_f(w[i]) * round_b(in.lo[j] * rs));
      const float n_hi = round_b(to_f(w[i + half]) * round_b(in.hi[j] * rs));
      const float c_lo = round_b(cs[i]), s_lo = round_b(sn[i]);
      const float c_hi = round_b(cs[i + half]), s_hi = round_b(sn[i + half]);
      store(j, to_b(round_b(n_lo * c_lo) + round_b(-n_hi * s_lo)), to_b(round_b(n_hi * c_hi) + round_b(n_lo * s_hi)));
    }
  }
}

// dst[0 .. hd) = rope(rmsnorm(src[0 .. hd)) * w), the two steps above for one row.
__device__ __forceinline__ void norm_rope_row(const bf16* src, const bf16* w, const float* cs, const float* sn,
                                              int hd, float eps, int lane, bf16* dst) {
  const int half = hd / 2;
  norm_rope_finish(norm_rope_load(src, hd, lane), w, cs, sn, hd, eps, lane, [&](int j, bf16 lo, bf16 hi) {
    dst[lane + 32 * j] = lo;
    dst[lane + 32 * j + half] = hi;
  });
}

}  // namespace specpress::kernels::detail
