// rope.cpp — see rope.h.
#include "ops/rope.h"

namespace specpress::ops {

RopeTable make_rope_table(int64_t head_dim, double theta, int64_t max_positions, at::Device device) {
  auto f32 = at::TensorOptions().dtype(at::kFloat);
  // transformers: 1 / base ** (arange(0, dim, 2).float() / dim)
  at::Tensor exponent = at::arange(0, head_dim, 2, at::TensorOptions().dtype(at::kLong)).to(at::kFloat) / static_cast<double>(head_dim);
  at::Tensor inv_freq = 1.0 / at::pow(at::scalar_tensor(theta, f32), exponent);
  at::Tensor pos = at::arange(max_positions, at::TensorOptions().dtype(at::kLong)).to(at::kFloat);
  at::Tensor freqs = pos.unsqueeze(1) * inv_freq.unsqueeze(0);  // [P, hd/2]
  at::Tensor emb = at::cat({freqs, freqs}, -1);
  return RopeTable{emb.cos().to(device), emb.sin().to(device)};
}

at::Tensor apply_rope(const at::Tensor& x, const RopeTable& table, const at::Tensor& positions) {
  const int64_t half = x.size(-1) / 2;
  std::vector<int64_t> shape = positions.sizes().vec();
  shape.push_back(x.size(-1));
  at::Tensor flat = positions.reshape({-1});
  // [..., 1, T, hd]: one row per position, broadcast over the heads
  at::Tensor cos = table.cos.index_select(0, flat).view(shape).to(x.scalar_type()).unsqueeze(-3);
  at::Tensor sin = table.sin.index_select(0, flat).view(shape).to(x.scalar_type()).unsqueeze(-3);
  at::Tensor x1 = x.narrow(-1, 0, half);
  at::Tensor x2 = x.narrow(-1, half, half);
  at::Tensor rotated = at::cat({-x2, x1}, -1);
  return x * cos + rotated * sin;
}

}  // namespace specpress::ops
