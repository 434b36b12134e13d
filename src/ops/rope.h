// rope.h — rotary position embedding, NeoX (rotate-half) layout, as transformers' default
// Qwen3RotaryEmbedding: inv_freq and the angle table in fp32, cos/sin cast to the activation dtype.
// The table is built once for all positions the caches can hold; lookups are index_select.
#pragma once
#include <ATen/ATen.h>

namespace specpress::ops {

struct RopeTable {
  at::Tensor cos;  // [max_positions, head_dim] fp32
  at::Tensor sin;
  int64_t max_positions() const { return cos.defined() ? cos.size(0) : 0; }
};

RopeTable make_rope_table(int64_t head_dim, double theta, int64_t max_positions, at::Device device);

// x: [..., heads, T, head_dim]; positions: int64 [..., T] on x's device (leading dims broadcast against
// x's, e.g. [T] for one sequence or [batch, T] for per-row positions). Returns the rotated tensor.
at::Tensor apply_rope(const at::Tensor& x, const RopeTable& table, const at::Tensor& positions);

}  // namespace specpress::ops
