// mma.cuh — the warp-level tensor-core pieces the kernels share (sm_80+ PTX, run on sm_90): the bf16
// m16n8k16 (and m16n8k8) MMA with fp32 accumulators, ldmatrix loads of 8x8 bf16 tiles from shared memory,
// and the word and packing helpers that build fragments.
//
// Fragment layouts (lane = 4 g + c): A (16 x 16, row-major) a0 = A[g][2c, 2c+1], a1 = A[g+8][2c..],
// a2 = A[g][2c+8..], a3 = A[g+8][2c+8..]; B (16 x 8, "col") b0 = B[2c, 2c+1][g], b1 = B[2c+8, 2c+9][g];
// C/D (16 x 8) d0, d1 = D[g][2c, 2c+1], d2, d3 = D[g+8][2c, 2c+1].
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

namespace specpress::kernels::detail {

// d += A · B (16x16 · 16x8, bf16 in, fp32 accumulate).
__device__ __forceinline__ void mma_bf16(float* d, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// d += A · B (16x8 · 8x8, bf16 in, fp32 accumulate): m16n8k8, A fragment a0 = A[g][2c, 2c+1], a1 = A[g+8][2c..],
// B fragment b0 = B[2c, 2c+1][g].
__device__ __forceinline__ void mma_bf16_k8(float* d, uint32_t a0, uint32_t a1, uint32_t b0) {
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a0), "r"(a1), "r"(b0));
}

// Four 8x8 bf16 tiles from shared memory; lanes 8i .. 8i+7 give the 16-byte row addresses of tile i, and
// r[i] receives tile i as lane (g, c) = (lane / 4, lane % 4) holds row g, columns 2c, 2c+1 (x4), or, with
// .trans, the transposed tile: rows 2c, 2c+1 of column g (x4_trans).
__device__ __forceinline__ void ldmatrix_x4(uint32_t* r, const void* row_addr) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(row_addr));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t* r, const void* row_addr) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(row_addr));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

// 32-bit word i (0..3) of a 16-byte load: a fragment register of a bf16 pair.
__device__ __forceinline__ uint32_t word(const uint4& v, int i) {
  return i == 0 ? v.x : (i == 1 ? v.y : (i == 2 ? v.z : v.w));
}

// Two floats as a bf16 pair (lo in the low half), rounded to nearest.
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

}  // namespace specpress::kernels::detail
