// gemv_math.cuh — the GEMV's per-chunk arithmetic (bf16 pairs to floats, the 8-element dot product, the sum of
// squares of a folded norm) and its epilogues' roundings, used by the one-op GEMVs (gemv.cu) and the fused o + gate/up
// GEMV (gemv_o_gate_up.cu); the persistent decode kernel (decode_layers.cu) takes the sum of squares from here for its
// folded norms.
#pragma once
#include <cstdint>

#include "kernels/common.cuh"

namespace specpress::kernels::detail {

// bf16 pair in a 32-bit word -> two floats (bf16 is the top half of an fp32).
__device__ __forceinline__ float lo_f(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float hi_f(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }

__device__ __forceinline__ float dot8(const uint4& w, const float* x, float acc) {
  acc = fmaf(lo_f(w.x), x[0], acc);
  acc = fmaf(hi_f(w.x), x[1], acc);
  acc = fmaf(lo_f(w.y), x[2], acc);
  acc = fmaf(hi_f(w.y), x[3], acc);
  acc = fmaf(lo_f(w.z), x[4], acc);
  acc = fmaf(hi_f(w.z), x[5], acc);
  acc = fmaf(lo_f(w.w), x[6], acc);
  acc = fmaf(hi_f(w.w), x[7], acc);
  return acc;
}

// x's sum of squares over one 16-byte chunk (a pair's squares, then their sum into ss): the folded norm's order, and
// the NORM prologue's for its first kNormHeld * 128 chunks (past them it adds one square at a time).
__device__ __forceinline__ float sumsq8(const uint4& x8, float ss) {
  const uint32_t xd[4] = {x8.x, x8.y, x8.z, x8.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) ss += lo_f(xd[j]) * lo_f(xd[j]) + hi_f(xd[j]) * hi_f(xd[j]);
  return ss;
}

// One step's weight chunks of a unit of ROWS rows (row_of(r): row r's first element): chunks c0, c0 + 32, .., c0 +
// 32 (U - 1) of each row into wv[u][r], zero past the row's nvec chunks. Every lane of a warp calls it with its own c0.
template <int ROWS, int U, typename RowOf>
__device__ __forceinline__ void load_unit_step(const RowOf& row_of, int c0, int nvec, uint4 (&wv)[U][ROWS]) {
  const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    const bf16* row = row_of(r);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = c0 + 32 * u;
      wv[u][r] = c < nvec ? ld_stream(row + static_cast<int64_t>(c) * 8) : zero;
    }
  }
}

// The epilogues' roundings, as the unfused ops round. SwiGLU (gemv + silu_mul): both products rounded to bf16, silu
// rounded, the product rounded on store. Residual (gemv + ATen's bf16 add): the product rounded, then the sum.
__device__ __forceinline__ bf16 swiglu_value(float gate_sum, float up_sum) {
  const float g = round_b(gate_sum), u = round_b(up_sum);
  return to_b(round_b(g / (1.f + expf(-g))) * u);
}
__device__ __forceinline__ bf16 residual_value(bf16 residual, float sum) { return to_b(to_f(residual) + round_b(sum)); }

}  // namespace specpress::kernels::detail
