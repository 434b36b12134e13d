// attention.cpp — see attention.h.
#include "ops/attention.h"

#include <cmath>
#include <limits>

namespace specpress::ops {
namespace {

// [..., Hkv, S, hd] -> [..., Hkv*group, S, hd], kv head j serving query heads j*group .. j*group+group-1
at::Tensor expand_kv(const at::Tensor& kv, int64_t group) {
  if (group == 1) return kv;
  std::vector<int64_t> expanded = kv.sizes().vec();
  expanded.insert(expanded.end() - 2, group);  // [..., Hkv, group, S, hd]
  std::vector<int64_t> merged = kv.sizes().vec();
  merged[merged.size() - 3] *= group;
  return kv.unsqueeze(-3).expand(expanded).reshape(merged);
}

}  // namespace

at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, AttentionMask mask,
                     const AttentionExtras* extras) {
  const int64_t n_heads = q.size(0), T = q.size(1), head_dim = q.size(2);
  const int64_t n_kv = k.size(0), S = k.size(1);
  const int64_t group = n_heads / n_kv;
  // [Hkv, S, hd] -> [Hkv*group, S, hd], kv head j serving query heads j*group .. j*group+group-1
  at::Tensor kk = group == 1 ? k : k.unsqueeze(1).expand({n_kv, group, S, head_dim}).reshape({n_heads, S, head_dim});
  at::Tensor vv = group == 1 ? v : v.unsqueeze(1).expand({n_kv, group, S, head_dim}).reshape({n_heads, S, head_dim});
  at::Tensor scores = at::matmul(q, kk.transpose(1, 2)) * (1.0 / std::sqrt(static_cast<double>(head_dim)));
  if (extras != nullptr && extras->allowed.defined()) {
    scores = scores.masked_fill(extras->allowed.logical_not().unsqueeze(0), -std::numeric_limits<double>::infinity());
  } else if (mask == AttentionMask::kCausalBottomRight && T > 1) {
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
  if (extras != nullptr && (extras->received_mass.defined() || extras->received_mass_by_row.defined())) {
    at::Tensor by_row = probs_f32.view({n_kv, group, T, S}).sum(1);  // [Hkv, T, S]
    if (extras->received_mass.defined()) extras->received_mass.add_(by_row.sum(1));
    if (extras->received_mass_by_row.defined())
      extras->received_mass_by_row.copy_(by_row.narrow(1, 0, extras->received_mass_by_row.size(1)));
  }
  at::Tensor probs = probs_f32.to(q.scalar_type());
  at::Tensor out = at::matmul(probs, vv);  // [Hq, T, hd]
  return out.transpose(0, 1).reshape({T, n_heads * head_dim});
}

at::Tensor attention_masked(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& allowed) {
  const int64_t n_heads = q.size(-3), T = q.size(-2), head_dim = q.size(-1);
  const int64_t group = n_heads / k.size(-3);
  at::Tensor scores = at::matmul(q, expand_kv(k, group).transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(head_dim)));
  scores = scores.masked_fill(allowed.logical_not(), -std::numeric_limits<double>::infinity());
  at::Tensor probs = at::softmax(scores, -1, at::kFloat).to(q.scalar_type());
  at::Tensor out = at::matmul(probs, expand_kv(v, group));  // [..., Hq, T, hd]
  std::vector<int64_t> shape(q.sizes().begin(), q.sizes().end() - 3);
  shape.push_back(T);
  shape.push_back(n_heads * head_dim);
  return out.transpose(-3, -2).reshape(shape);
}

}  // namespace specpress::ops
