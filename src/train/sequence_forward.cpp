// sequence_forward.cpp — see sequence_forward.h.
#include "train/sequence_forward.h"

#include <algorithm>

#include "core/error.h"
#include "ops/attention.h"
#include "ops/rmsnorm.h"
#include "ops/swiglu.h"

namespace specpress::train {

at::Tensor project_heads(const at::Tensor& h, const at::Tensor& proj, int64_t n_heads, int64_t head_dim,
                         const at::Tensor& norm, double eps) {
  std::vector<int64_t> shape = h.sizes().vec();
  shape.back() = n_heads;
  shape.push_back(head_dim);  // [..., T, n, hd]
  at::Tensor x = at::linear(h, proj).view(shape);
  if (norm.defined()) x = ops::rms_norm(x, norm, eps);
  return x.transpose(-3, -2);
}

at::Tensor mlp_residual(const at::Tensor& x, const model::DecoderLayerWeights& w, double eps) {
  return x + ops::swiglu_mlp(ops::rms_norm(x, w.post_norm, eps), w.gate_proj, w.up_proj, w.down_proj);
}

SequenceOutput sequence_forward(const model::Qwen3Config& c, const model::Qwen3Weights& weights,
                                const ops::RopeTable& rope, const at::Tensor& ids,
                                const std::vector<int64_t>& tap_layers, bool final_norm) {
  const int64_t T = ids.size(1), hd = c.head_dim;
  if (T > rope.max_positions())
    fail("training sequence of {} tokens exceeds max_position_embeddings {}", T, rope.max_positions());
  for (int64_t layer : tap_layers)
    if (layer < 0 || layer >= c.num_layers) fail("tap layer {} outside the target's 0..{}", layer, c.num_layers - 1);
  const int64_t last_layer =
      final_norm ? c.num_layers - 1 : (tap_layers.empty() ? -1 : *std::max_element(tap_layers.begin(), tap_layers.end()));

  at::Tensor positions = at::arange(T, at::TensorOptions().dtype(at::kLong).device(ids.device()));
  at::Tensor allowed = at::ones({T, T}, at::TensorOptions().dtype(at::kBool).device(ids.device())).tril();
  at::Tensor x = at::embedding(weights.embed_tokens, ids);  // [batch, T, H]
  std::vector<at::Tensor> taps(tap_layers.size());
  for (int64_t l = 0; l <= last_layer; ++l) {
    const model::DecoderLayerWeights& w = weights.layers[l];
    at::Tensor h = ops::rms_norm(x, w.input_norm, c.rms_norm_eps);
    at::Tensor q = ops::apply_rope(project_heads(h, w.q_proj, c.num_heads, hd, w.q_norm, c.rms_norm_eps), rope, positions);
    at::Tensor k = ops::apply_rope(project_heads(h, w.k_proj, c.num_kv_heads, hd, w.k_norm, c.rms_norm_eps), rope, positions);
    at::Tensor v = project_heads(h, w.v_proj, c.num_kv_heads, hd, at::Tensor(), c.rms_norm_eps);
    x = x + at::linear(ops::attention_masked(q, k, v, allowed), w.o_proj);
    x = mlp_residual(x, w, c.rms_norm_eps);
    for (size_t i = 0; i < tap_layers.size(); ++i)
      if (tap_layers[i] == l) taps[i] = x;
  }
  SequenceOutput out;
  if (final_norm) out.hidden = ops::rms_norm(x, weights.final_norm, c.rms_norm_eps);
  if (!taps.empty()) out.taps = at::cat(taps, -1);
  return out;
}

VocabLoss vocab_cross_entropy(const at::Tensor& hidden, const at::Tensor& lm_head, const at::Tensor& labels,
                              const at::Tensor& weights, int64_t chunk) {
  const int64_t N = hidden.size(0);
  const double norm = weights.defined() ? weights.sum().item<double>() : static_cast<double>(N);
  at::Tensor h = hidden.detach().requires_grad_(true);
  VocabLoss out;
  std::vector<at::Tensor> correct;
  for (int64_t r0 = 0; r0 < N; r0 += chunk) {
    const int64_t n = std::min(chunk, N - r0);
    at::Tensor logits = at::linear(h.narrow(0, r0, n), lm_head).to(at::kFloat);
    at::Tensor chunk_labels = labels.narrow(0, r0, n);
    at::Tensor nll = at::nll_loss(at::log_softmax(logits, -1), chunk_labels, {}, at::Reduction::None);
    if (weights.defined()) nll = nll * weights.narrow(0, r0, n);
    at::Tensor loss = nll.sum() / norm;
    loss.backward();
    out.loss += loss.item<double>();
    correct.push_back(logits.detach().argmax(-1).eq(chunk_labels));
  }
  out.grad_hidden = h.grad();
  out.correct = at::cat(correct);
  return out;
}

double lm_forward_backward(const model::Qwen3Config& config, const model::Qwen3Weights& weights,
                           const ops::RopeTable& rope, const at::Tensor& ids) {
  const int64_t T = ids.size(1) - 1;
  at::Tensor hidden = sequence_forward(config, weights, rope, ids.narrow(1, 0, T), {}, true).hidden.reshape({-1, config.hidden_size});
  VocabLoss vl = vocab_cross_entropy(hidden, weights.lm_head, ids.narrow(1, 1, T).reshape({-1}), at::Tensor());
  hidden.backward(vl.grad_hidden);
  return vl.loss;
}

}  // namespace specpress::train
