// attention.cpp — see attention.h.
#include "ops/attention.h"

#include <cmath>

namespace specpress::ops {

at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, AttentionMask mask,
                     const AttentionExtras* extras) {
  const int64_t n_heads = q.size(0), T = q.size(1), head_dim = q.size(2);
  const int64_t n_kv = k.size(0), S = k.size(1);
  const int64_t group = n_heads / n_kv;
  // [Hkv, S, hd] -> [Hkv*group, S, hd], kv head j serving query heads j*group .. j*group+group-1
  at::Tensor kk = group == 1 ? k : k.unsqueeze(1).expand({n_kv, group, S, head_dim}).reshape({n_heads, S, head_dim});
  at::Tensor vv = group == 1 ? v : v.unsqueeze(1).expand({n_kv, group, S, head_dim}).reshape({n_heads, S, head_dim});
  at::Tensor scores = at::matmul(q, kk.transpose(1, 2)) * (1.0 / std::sqrt(static_cast<double>(head_dim)));
  if (mask == AttentionMask::kCausalBottomRight && T > 1) {
    // query i sits at key index S - T + i and sees keys 0 .. S - T + i
    at::Tensor allowed = at::ones({T, S}, at::TensorOptions().dtype(at::kBool).device(q.device())).tril(S - T);
    scores = scores.masked_fill(allowed.logical_not().unsqueeze(0), -std::numeric_limits<double>::infinity());
  }
  if (extras != nullptr && extras->key_bias.defined()) {
    // [Hkv, S] -> [Hq, 1, S], kv head j biasing its group of query heads
    at::Tensor bias = extras->key_bias.unsqueeze(1).expand({n_kv, group, S}).reshape({n_heads, 1, S});
    scores = scores + bias.to(scores.scalar_type());
  }
  at::Tensor probs_f32 = at::softmax(scores, -1, at::kFloat);
  if (extras != nullptr && extras->received_mass.defined())
    extras->received_mass.add_(probs_f32.sum(1).view({n_kv, group, S}).sum(1));
  at::Tensor probs = probs_f32.to(q.scalar_type());
  at::Tensor out = at::matmul(probs, vv);  // [Hq, T, hd]
  return out.transpose(0, 1).reshape({T, n_heads * head_dim});
}

}  // namespace specpress::ops
