// sequence_forward.h — the differentiable full-sequence Qwen3 forward used for training: no KV cache,
// a batch of equal-length rows [batch, T], causal attention with an explicit mask, the same reference
// ops (RMSNorm, RoPE, SwiGLU, attention arithmetic) as the decoding engine's forward, so a model
// trained here computes at inference exactly what it computed in training. Also the pieces of a
// decoder layer that the DFlash draft trainer shares.
#pragma once
#include <vector>

#include <ATen/ATen.h>

#include "model/qwen3.h"

namespace specpress::train {

// h [..., T, H] -> per-head [..., n_heads, T, head_dim] through `proj`, then the per-head RMSNorm
// `norm` when it is defined (q_norm / k_norm; V has none).
at::Tensor project_heads(const at::Tensor& h, const at::Tensor& proj, int64_t n_heads, int64_t head_dim,
                         const at::Tensor& norm, double eps);

// x + MLP(post_attention_layernorm(x)): the second half of a decoder layer.
at::Tensor mlp_residual(const at::Tensor& x, const model::DecoderLayerWeights& w, double eps);

struct SequenceOutput {
  at::Tensor hidden;  // [batch, T, H] after the final norm (undefined when only taps were asked for)
  at::Tensor taps;    // [batch, T, n_taps*H]: raw outputs of the tap layers, concatenated in order
};

// Runs ids [batch, T] (int64) at positions 0..T-1. `final_norm` = false stops after the last tap layer
// (the frozen target of the draft trainer needs nothing later).
SequenceOutput sequence_forward(const model::Qwen3Config& config, const model::Qwen3Weights& weights,
                                const ops::RopeTable& rope, const at::Tensor& ids,
                                const std::vector<int64_t>& tap_layers, bool final_norm);

// The same forward over given input rows: `x` [..., R, H] (e.g. token embeddings followed by beacon
// latents) at `positions` (int64 [R]) with the visibility `allowed` (bool [R, R], true = may see).
SequenceOutput masked_sequence_forward(const model::Qwen3Config& config, const model::Qwen3Weights& weights,
                                       const ops::RopeTable& rope, at::Tensor x, const at::Tensor& positions,
                                       const at::Tensor& allowed, const std::vector<int64_t>& tap_layers,
                                       bool final_norm);

// Mean forward KL(p_teacher || p_student) over rows, with p = softmax(lm_head · hidden) (the
// compression trainer's distillation loss), plus `ce_weight` times the student's cross-entropy on
// `labels` (int64 [N], -1 = no label). Chunked like vocab_cross_entropy: grad_hidden is the gradient
// of the loss with respect to `student` [N, H].
struct VocabKL {
  double loss = 0, kl = 0, top1 = 0;  // top1: fraction of rows whose argmax agrees with the teacher's
  at::Tensor grad_hidden;
};
VocabKL vocab_kl(const at::Tensor& student, const at::Tensor& teacher, const at::Tensor& lm_head, const at::Tensor& labels,
                 double ce_weight, int64_t chunk = 256);

// Weighted cross-entropy of `hidden` rows [N, H] against `labels` [N] through `lm_head` [V, H],
// normalised by the weight sum (`weights` [N]; undefined = all 1). Runs forward and backward
// `chunk` rows at a time, so no [N, V] logits tensor ever exists: gradients reach lm_head (when it
// requires grad) here, and the caller passes `grad_hidden` on with hidden.backward(grad_hidden).
struct VocabLoss {
  double loss = 0;
  at::Tensor grad_hidden;  // [N, H]
  at::Tensor correct;      // bool [N]: the argmax equals the label
};
VocabLoss vocab_cross_entropy(const at::Tensor& hidden, const at::Tensor& lm_head, const at::Tensor& labels,
                              const at::Tensor& weights, int64_t chunk = 256);

// One training step's forward and backward on ids [batch, T+1] (rows 0..T-1 input, 1..T labels): the
// mean next-token cross-entropy, gradients accumulated into the weights. Returns the loss.
double lm_forward_backward(const model::Qwen3Config& config, const model::Qwen3Weights& weights,
                           const ops::RopeTable& rope, const at::Tensor& ids);

}  // namespace specpress::train
