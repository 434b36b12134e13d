// norm_rope_row.cuh — the q/k head transform of Qwen3 for one head row, by one warp: RMSNorm over the head
// (weight w, eps), then NeoX rotate-half RoPE at one position, rounded to bf16 where the ATen reference
// rounds. Shared by the q/k-norm + RoPE kernel (qk_norm_rope.cu) and the small-T attention kernel, which
// transforms its own query rows and new keys (attention.cu), so both write bitwise the same values.
#pragma once
#include "kernels/common.cuh"

namespace specpress::kernels::detail {

constexpr int kNormRopeMaxPairsPerLane = 4;  // head_dim <= 2 * 32 * 4

// A head row's inputs as one lane holds them: the rotation pairs (i, i + hd/2) for i = lane, lane + 32, ...
// (so a pair's partner is in the same thread), with the RoPE table values at the row's position (cs / sn,
// [hd] fp32); zero past hd/2. The norm weight is loaded apart (it is the same for every row of a head type).
// Loading apart from the arithmetic lets a warp issue the loads of several rows before it waits for any
// (attention.cu).
struct NormRopeIn {
  float lo[kNormRopeMaxPairsPerLane], hi[kNormRopeMaxPairsPerLane];
  float c_lo[kNormRopeMaxPairsPerLane], c_hi[kNormRopeMaxPairsPerLane];
  float s_lo[kNormRopeMaxPairsPerLane], s_hi[kNormRopeMaxPairsPerLane];
};
struct NormRopeWeight {
  float lo[kNormRopeMaxPairsPerLane], hi[kNormRopeMaxPairsPerLane];
};
// scale: the row's inputs are bf16(src * scale) (a folded RMSNorm's row factor; 1 leaves them as they are).
__device__ __forceinline__ NormRopeIn norm_rope_load(const bf16* src, const float* cs, const float* sn, int hd,
                                                     int lane, float scale = 1.f) {
  const int half = hd / 2;
  NormRopeIn in;
#pragma unroll
  for (int j = 0; j < kNormRopeMaxPairsPerLane; ++j) {
    const int i = lane + 32 * j;
    const bool ok = i < half;
    in.lo[j] = ok ? round_b(to_f(src[i]) * scale) : 0.f;
    in.hi[j] = ok ? round_b(to_f(src[i + half]) * scale) : 0.f;
    in.c_lo[j] = ok ? cs[i] : 0.f;
    in.c_hi[j] = ok ? cs[i + half] : 0.f;
    in.s_lo[j] = ok ? sn[i] : 0.f;
    in.s_hi[j] = ok ? sn[i + half] : 0.f;
  }
  return in;
}
__device__ __forceinline__ NormRopeWeight norm_rope_weight(const bf16* w, int hd, int lane) {
  const int half = hd / 2;
  NormRopeWeight nw;
#pragma unroll
  for (int j = 0; j < kNormRopeMaxPairsPerLane; ++j) {
    const int i = lane + 32 * j;
    nw.lo[j] = i < half ? to_f(w[i]) : 0.f;
    nw.hi[j] = i < half ? to_f(w[i + half]) : 0.f;
  }
  return nw;
}

// rope(rmsnorm(row) * w) for the row `in` (no memory access): store(j, out_lo, out_hi) receives the outputs
// at i = lane + 32 j and i + hd/2. Every lane of the warp must call it (warp reduction).
template <typename Store>
__device__ __forceinline__ void norm_rope_finish(const NormRopeIn& in, const NormRopeWeight& w, int hd, float eps,
                                                 int lane, Store&& store) {
  const int half = hd / 2;
  float ss = 0.f;
#pragma unroll
  for (int j = 0; j < kNormRopeMaxPairsPerLane; ++j)
    if (lane + 32 * j < half) ss += in.lo[j] * in.lo[j] + in.hi[j] * in.hi[j];
  ss = warp_sum(ss);
  const float rs = rsqrtf(ss / static_cast<float>(hd) + eps);
#pragma unroll
  for (int j = 0; j < kNormRopeMaxPairsPerLane; ++j) {
    if (lane + 32 * j < half) {
      // normed = bf16(w * bf16(x * rs)); out = bf16(bf16(n * cos) + bf16(rotate_half(n) * sin))
      const float n_lo = round_b(w.lo[j] * round_b(in.lo[j] * rs));
      const float n_hi = round_b(w.hi[j] * round_b(in.hi[j] * rs));
      const float c_lo = round_b(in.c_lo[j]), s_lo = round_b(in.s_lo[j]);
      const float c_hi = round_b(in.c_hi[j]), s_hi = round_b(in.s_hi[j]);
      store(j, to_b(round_b(n_lo * c_lo) + round_b(-n_hi * s_lo)), to_b(round_b(n_hi * c_hi) + round_b(n_lo * s_hi)));
    }
  }
}

// dst[0 .. hd) = rope(rmsnorm(src[0 .. hd)) * w) at the position whose table rows are cs / sn: the steps above
// for one row.
__device__ __forceinline__ void norm_rope_row(const bf16* src, const bf16* w, const float* cs, const float* sn,
                                              int hd, float eps, int lane, bf16* dst, float scale = 1.f) {
  const int half = hd / 2;
  norm_rope_finish(norm_rope_load(src, cs, sn, hd, lane, scale), norm_rope_weight(w, hd, lane), hd, eps, lane,
                   [&](int j, bf16 lo, bf16 hi) {
                     dst[lane + 32 * j] = lo;
                     dst[lane + 32 * j + half] = hi;
                   });
}

}  // namespace specpress::kernels::detail
