// argmax.cuh — the greedy argmax's rule, shared by the argmax kernels (decode_step.cu) and the wgmma LM head's fused
// argmax (gemm_wg16.cu), so that both give the same token: the largest value, the lowest index among equal maxima,
// NaN never a maximum (-inf can be one), and no index (kNoIndex, written as 0) for a row of NaN only. Reference twin:
// argmax(-1) of the logits with NaN read as below -inf (tests/gpu, Kernels.Argmax* and Kernels.Wg16Argmax*).
#pragma once
#include <cuda_runtime.h>

namespace specpress::kernels::detail {

// No index yet: the row's values seen so far were all NaN (or there were none).
constexpr int kNoIndex = 0x7fffffff;

// Whether logit f at a later index than the current best (bv, bi) replaces it, in an ascending scan: a greater value,
// or the first value that is not NaN (so that -inf can be a maximum). NaN never is.
__device__ __forceinline__ bool replaces(float f, float bv, int bi) { return f > bv || (bi == kNoIndex && f == f); }

// Whether candidate (ov, oi) beats (bv, bi), both the first maxima of their own index sets (any order): a greater
// value, or an equal one at a lower index (a set with no index carries -inf and kNoIndex, and so loses every tie).
__device__ __forceinline__ bool beats(float ov, int oi, float bv, int bi) { return ov > bv || (ov == bv && oi < bi); }

// (bv, bi) becomes (ov, oi) where that beats it.
__device__ __forceinline__ void keep_best(float ov, int oi, float& bv, int& bi) {
  if (beats(ov, oi, bv, bi)) {
    bv = ov;
    bi = oi;
  }
}

// The first maximum over the lanes that differ from this one in the bits of Offsets (xor shuffles, in the order
// given), into each of them; every lane of the warp takes part.
template <int... Offsets>
__device__ __forceinline__ void lanes_argmax(float& bv, int& bi) {
  (keep_best(__shfl_xor_sync(0xffffffffu, bv, Offsets), __shfl_xor_sync(0xffffffffu, bi, Offsets), bv, bi), ...);
}

// Warp-wide (max value, lowest index among equals) into every lane.
__device__ __forceinline__ void warp_argmax(float& bv, int& bi) { lanes_argmax<16, 8, 4, 2, 1>(bv, bi); }

}  // namespace specpress::kernels::detail
