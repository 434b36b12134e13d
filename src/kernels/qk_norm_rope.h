// qk_norm_rope.h — per-head q/k RMSNorm + RoPE (NeoX rotate-half) + KV-cache write, from the output of
// the fused QKV projection (bf16, torch-free). Positions are `*pos_base + t`, read from device memory,
// so one captured CUDA graph serves every step. Reference twin: ops::rms_norm on each head, then
// ops::apply_rope with the fp32 table cast to bf16, then the cache copy of Qwen3Model::forward.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace specpress::kernels {

struct QkNormRopeArgs {
  const __nv_bfloat16* qkv = nullptr;  // [T, ld]: nq q heads, then nkv k heads, then nkv v heads, each head_dim wide
  int64_t ld = 0;
  int T = 0, nq = 0, nkv = 0, head_dim = 0;  // nq may be 0 (context K/V only); head_dim even, <= 256
  const __nv_bfloat16* q_norm = nullptr;     // [head_dim] (unused when nq == 0)
  const __nv_bfloat16* k_norm = nullptr;     // [head_dim]
  const float* cos = nullptr;                // [max_positions, head_dim] fp32 (ops::RopeTable)
  const float* sin = nullptr;
  const int* pos_base = nullptr;             // device scalar: position of row 0
  __nv_bfloat16* q_out = nullptr;            // [T, nq, head_dim]
  __nv_bfloat16* k_cache = nullptr;          // [nkv, cache_capacity, head_dim] of this layer
  __nv_bfloat16* v_cache = nullptr;
  int64_t cache_capacity = 0;
  float eps = 1e-6f;
  // optional fp32 [T]: row t's q, k and v are bf16(qkv[t] * row_scale[t]) (a folded RMSNorm's factor,
  // rmsnorm.h: row_rms); v is written to the cache scaled
  const float* row_scale = nullptr;
  // Several layers in one launch (the draft's context K/V of all its layers: nq == 0): layer i reads its heads at
  // column qkv + i * qkv_layer_stride, its k_norm at k_norm + i * k_norm_layer_stride, and writes the caches at
  // + i * cache_layer_stride elements.
  int layers = 1;
  int64_t qkv_layer_stride = 0, k_norm_layer_stride = 0, cache_layer_stride = 0;
};

cudaError_t qk_norm_rope(const QkNormRopeArgs& a, cudaStream_t stream);

}  // namespace specpress::kernels
