// common.cuh — helpers shared by the torch-free CUDA kernels: bf16 conversions, warp reductions and
// vector loads. Every kernel of src/kernels works on bf16 activations with fp32 arithmetic and rounds
// to bf16 exactly where the ATen reference (src/ops) rounds, so results match it to bf16 precision.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/launch.h"
#include "kernels/step_trace.h"

namespace specpress::kernels::detail {

using bf16 = __nv_bfloat16;

__device__ __forceinline__ float to_f(bf16 x) { return __bfloat162float(x); }
__device__ __forceinline__ bf16 to_b(float x) { return __float2bfloat16_rn(x); }
// Rounds a float through bf16, as an ATen op with a bf16 result does.
__device__ __forceinline__ float round_b(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

// Programmatic dependent launch (see launch.h); both are no-ops for a kernel launched without PDL.
// pdl_wait: wait until the previous kernel of the stream has completed and its writes are visible (before
// any read of earlier results or any write). pdl_trigger: let the next kernel of the stream be scheduled
// (its blocks take free SM slots and run up to their own pdl_wait).
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
// The small kernels' wait, before anything else they do (the fused attention: after its loads of data the
// previous kernel does not write), then letting the next kernel be scheduled at once (a small grid leaves
// SM slots free, where the next kernel, a GEMV say, can already pull its weights into L2).
__device__ __forceinline__ void pdl_begin() {
  pdl_wait();
  pdl_trigger();
}

// The decode step's diagnostic stamps (step_trace.h), by thread 0 unless named: %globaltimer into field f of this
// block's row; by lane 0 of every warp, into field f + the warp's index; a value; %smid. Callers compile them only into
// their traced instances (a TRACE template parameter), so that the kernels the engine runs are unchanged.
__device__ __forceinline__ size_t step_row() {
  return blockIdx.x + static_cast<size_t>(gridDim.x) * (blockIdx.y + static_cast<size_t>(gridDim.y) * blockIdx.z);
}
__device__ __forceinline__ unsigned long long globaltimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ void step_stamp(unsigned long long* trace, int f) {
  if (threadIdx.x == 0) trace[step_row() * kStepTraceFields + f] = globaltimer();
}
__device__ __forceinline__ void step_stamp_warp(unsigned long long* trace, int f) {
  if ((threadIdx.x & 31) == 0) trace[step_row() * kStepTraceFields + f + (threadIdx.x >> 5)] = globaltimer();
}
__device__ __forceinline__ void step_stamp_value(unsigned long long* trace, int f, unsigned long long v) {
  if (threadIdx.x == 0) trace[step_row() * kStepTraceFields + f] = v;
}
__device__ __forceinline__ void step_stamp_sm(unsigned long long* trace) {
  unsigned s;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
  step_stamp_value(trace, kStSm, s);
}

// Memory-order operations on a global word at GPU scope, for the grid-wide waits of the persistent decode kernel
// (decode_layers.cu), the fused o + gate/up GEMV's grid barrier (gemv_o_gate_up.cu) and the fused MLP's ordered sum
// (gemv_mlp.cu).
__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ unsigned ld_relaxed(const unsigned* p) {
  unsigned v;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void red_add_release(unsigned* p, unsigned v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}

// A streamed weight chunk (GEMV, small-M GEMM): read once, so no L1 allocation; the L2 prefetches the
// following 256 bytes. volatile: never speculated out of the bounds check around it (a chunk past K may be
// past W's end).
__device__ __forceinline__ uint4 ld_stream(const bf16* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}
// The width of each of the `splits` slices a row of `vocab` entries is cut into (the last one may be shorter):
// ceil(vocab / splits) without overflow near INT_MAX, the sampling kernels' (temperature_draw.cu, top_candidates.cu)
// one rule.
__device__ __forceinline__ int slice_width(int vocab, int splits) { return vocab / splits + (vocab % splits != 0); }

__device__ __forceinline__ void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p)); }

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over a block of at most 1024 threads; `scratch` holds 32 floats. All threads get the result.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read from a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float t = lane < nwarps ? scratch[lane] : 0.f;
  return warp_sum(t);
}

// 8 bf16 <-> 8 floats through one 16-byte access.
__device__ __forceinline__ void load8(const bf16* p, float* f) {
  uint4 u = *reinterpret_cast<const uint4*>(p);
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    float2 t = __bfloat1622float2(h[i]);
    f[2 * i] = t.x;
    f[2 * i + 1] = t.y;
  }
}
__device__ __forceinline__ void store8(bf16* p, const float* f) {
  uint4 u;
  __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&u);
#pragma unroll
  for (int i = 0; i < 4; ++i) h[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
  *reinterpret_cast<uint4*>(p) = u;
}

}  // namespace specpress::kernels::detail
