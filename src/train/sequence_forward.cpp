// sequence_forward.cpp — see sequence_forward.h.
#include "train/sequence_forward.h"

#include <c10/core/GradMode.h>

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
  const int64_t T = ids.size(1);
  at::Tensor positions = at::arange(T, at::TensorOptions().dtype(at::kLong).device(ids.device()));
  at::Tensor allowed = at::ones({T, T}, at::TensorOptions().dtype(at::kBool).device(ids.device())).tril();
  return masked_sequence_forward(c, weights, rope, at::embedding(weights.embed_tokens, ids), positions, allowed,
                                 tap_layers, final_norm);
}

SequenceOutput masked_sequence_forward(const model::Qwen3Config& c, const model::Qwen3Weights& weights,
                                       const ops::RopeTable& rope, at::Tensor x, const at::Tensor& positions,
                                       const at::Tensor& allowed, const std::vector<int64_t>& tap_layers,
                                       bool final_norm) {
  const int64_t hd = c.head_dim;
  const int64_t max_position = positions.numel() > 0 ? positions.max().item<int64_t>() : 0;
  if (max_position >= rope.max_positions())
    fail("training sequence reaches position {}, beyond max_position_embeddings {}", max_position, rope.max_positions());
  for (int64_t layer : tap_layers)
    if (layer < 0 || layer >= c.num_layers) fail("tap layer {} outside the target's 0..{}", layer, c.num_layers - 1);
  const int64_t last_layer =
      final_norm ? c.num_layers - 1 : (tap_layers.empty() ? -1 : *std::max_element(tap_layers.begin(), tap_layers.end()));
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

VocabKL vocab_kl(const at::Tensor& student, const at::Tensor& teacher, const at::Tensor& lm_head, const at::Tensor& labels,
                 double ce_weight, int64_t chunk) {
  const int64_t N = student.size(0);
  at::Tensor h = student.detach().requires_grad_(true);
  VocabKL out;
  int64_t agree = 0;
  for (int64_t r0 = 0; r0 < N; r0 += chunk) {
    const int64_t n = std::min(chunk, N - r0);
    at::Tensor t_logp;
    {
      c10::NoGradGuard no_grad;
      t_logp = at::log_softmax(at::linear(teacher.narrow(0, r0, n), lm_head).to(at::kFloat), -1);
    }
    at::Tensor s_logp = at::log_softmax(at::linear(h.narrow(0, r0, n), lm_head).to(at::kFloat), -1);
    at::Tensor kl = (t_logp.exp() * (t_logp - s_logp)).sum(-1).sum() / static_cast<double>(N);
    at::Tensor loss = kl;
    if (ce_weight > 0 && labels.defined()) {
      at::Tensor chunk_labels = labels.narrow(0, r0, n);
      at::Tensor has = chunk_labels.ge(0);
      at::Tensor nll = at::nll_loss(s_logp, chunk_labels.clamp_min(0), {}, at::Reduction::None) * has.to(at::kFloat);
      loss = loss + ce_weight * nll.sum() / static_cast<double>(N);
    }
    loss.backward();
    out.kl += kl.item<double>();
    out.loss += loss.item<double>();
    agree += s_logp.detach().argmax(-1).eq(t_logp.argmax(-1)).sum().item<int64_t>();
  }
  out.top1 = N > 0 ? static_cast<double>(agree) / static_cast<double>(N) : 0.0;
  // both are >= 0; float rounding leaves -1e-9 where the student already matches, which would log as -0.0000
  out.kl = std::max(out.kl, 0.0);
  out.loss = std::max(out.loss, 0.0);
  out.grad_hidden = h.grad();
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
