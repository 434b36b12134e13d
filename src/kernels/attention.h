// attention.h — attention of T query rows over a layer's KV cache (bf16, torch-free), GQA, with the key
// count read from device memory: S = *kv_len_base + kv_len_add. Causal (bottom-right: query t sees keys
// 0 .. S-T+t; target decode, verify and prefill) or non-causal (DFlash draft block over context + its
// own block, whose K/V the caller wrote into the cache right after the context). Split-K over the keys
// ("flash-decoding") with the combine done by the last block of each head group, so a step is one
// launch. T <= 16 (decode, verify, draft) runs a tensor-core kernel built for few rows: every K/V tile is
// read once per kv head for all the group's rows (up to 16 rows per block, the M of an MMA), and only
// ceil(S / 64) splits (at most `splits`) do work, so the fixed grid of a captured graph follows the live
// length. Larger T (prefill)
// runs a 64-row tiled kernel. Reference twin: ops::attention on the cache narrowed to S keys (fp32
// softmax; scores are not rounded to bf16 here, and the small-T kernel rounds probabilities to bf16 only
// as the P·V operand, so results agree to bf16 precision, not bitwise).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace specpress::kernels {

struct AttentionArgs {
  const __nv_bfloat16* q = nullptr;        // [T, nq, head_dim]
  const __nv_bfloat16* k_cache = nullptr;  // [nkv, cache_capacity, head_dim]
  const __nv_bfloat16* v_cache = nullptr;
  __nv_bfloat16* out = nullptr;            // [T, nq * head_dim]
  const int* kv_len_base = nullptr;        // device scalar
  int kv_len_add = 0;
  int T = 0, nq = 0, nkv = 0, head_dim = 0;  // head_dim in {32, 64, 128}; nq % nkv == 0, nq / nkv <= 64
  int64_t cache_capacity = 0;
  bool causal = true;
  int splits = 1;                          // most key splits (grid dimension; fixed for a captured graph), <= 64
  void* workspace = nullptr;               // attention_workspace_bytes(...) bytes when splits > 1
  unsigned int* counters = nullptr;        // attention_counter_count(...) zeroed uints when splits > 1; left zeroed
  float scale = 0.f;                       // 0 = 1/sqrt(head_dim)
  int min_split_keys = 0;                  // T <= 16: fewest keys a split takes (0: 128)
  int block_warps = 0;                     // T <= 16: warps a block, 4 or 8 (0: 8)
  // Fused q/k-norm + RoPE (T <= kAttentionSmallT only): with qkv set, `q` is unused; the kernel applies the
  // per-head RMSNorm and RoPE of qk_norm_rope.h itself (bitwise the same values) to its query rows and to
  // the T new keys at positions *kv_len_base + t (kv_len_add must be T), takes those keys from qkv rather
  // than the cache, and writes the new K/V into k_cache_out / v_cache_out (the same caches). Fused, the kernel
  // reads *kv_len_base and the cache rows before the new keys ahead of its PDL wait (launch.h), so those
  // must not be written by any kernel that may still run then: the kernel launched just before it (in the engine
  // the qkv projection) and, where that one let it launch before its own wait, the kernels before it (the engine's
  // products and norms: none writes them).
  const __nv_bfloat16* qkv = nullptr;  // [T, ld_qkv]: nq q heads, nkv k heads, nkv v heads
  int64_t ld_qkv = 0;
  const __nv_bfloat16* q_norm = nullptr;
  const __nv_bfloat16* k_norm = nullptr;  // [head_dim] each
  const float* rope_cos = nullptr;        // [max_positions, head_dim] fp32 (ops::RopeTable)
  const float* rope_sin = nullptr;
  float eps = 1e-6f;
  __nv_bfloat16* k_cache_out = nullptr;
  __nv_bfloat16* v_cache_out = nullptr;
  // Fused only, optional fp32 [T]: row t of qkv is taken as bf16(qkv[t] * qkv_row_scale[t]) (a folded RMSNorm's
  // factor, rmsnorm.h: row_rms), as qk_norm_rope.h's row_scale; read after the PDL wait.
  const float* qkv_row_scale = nullptr;
  // Diagnostic (T <= kAttentionSmallT only; step_trace.h): the blocks' stamps, kStepTraceFields a block of the grid
  // (at most nkv * ceil(T * nq / nkv / 16) * splits blocks); nullptr: off.
  unsigned long long* trace = nullptr;
};
constexpr int kAttentionSmallT = 16;  // T up to this runs the small-T kernel (and may fuse q/k-norm + RoPE)

size_t attention_workspace_bytes(int T, int nq, int head_dim, int splits);
size_t attention_counter_count(int T, int nq, int nkv);
// Splits for a cache of `capacity` positions and T query rows: enough blocks to cover the GPU on long
// contexts (T <= 16: one per 32 positions of capacity for T = 1, per 64 for more rows, at most 32: half the
// kernel's default minimum split; it runs only as many as the live length needs), 1 for prefill-sized T.
int attention_default_splits(int64_t capacity, int T);

cudaError_t attention(const AttentionArgs& a, cudaStream_t stream);

}  // namespace specpress::kernels
