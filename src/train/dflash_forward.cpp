// dflash_forward.cpp — see dflash_forward.h.
#include "train/dflash_forward.h"

#include <c10/core/GradMode.h>
#include <cmath>

#include "core/error.h"
#include "ops/attention.h"
#include "ops/rmsnorm.h"
#include "train/sequence_forward.h"

namespace specpress::train {

DraftBlocks DraftBlocks::to(at::Device device) const {
  return DraftBlocks{block_ids.to(device), positions.to(device), allowed.to(device),
                     labels.to(device),    weights.to(device),   block_size};
}

DraftBlocks make_blocks(const std::vector<std::vector<int64_t>>& rows, const std::vector<std::vector<int64_t>>& anchors,
                        int64_t T, int64_t B, int64_t mask_token_id, double gamma) {
  const int64_t batch = static_cast<int64_t>(rows.size());
  int64_t n = 1;
  for (const auto& a : anchors) n = std::max<int64_t>(n, static_cast<int64_t>(a.size()));
  const int64_t Q = n * B;
  at::Tensor block_ids = at::full({batch, Q}, mask_token_id, at::kLong);
  at::Tensor positions = at::zeros({batch, Q}, at::kLong);
  at::Tensor labels = at::zeros({batch, Q}, at::kLong);
  at::Tensor weights = at::zeros({batch, Q}, at::kFloat);
  at::Tensor anchor_of_query = at::zeros({batch, Q}, at::kLong);  // context keys visible: p < anchor
  auto ids_a = block_ids.accessor<int64_t, 2>();
  auto pos_a = positions.accessor<int64_t, 2>();
  auto lab_a = labels.accessor<int64_t, 2>();
  auto w_a = weights.accessor<float, 2>();
  auto anc_a = anchor_of_query.accessor<int64_t, 2>();
  for (int64_t r = 0; r < batch; ++r) {
    const auto& ids = rows[r];
    const int64_t len = static_cast<int64_t>(ids.size());
    for (int64_t j = 0; j < n; ++j) {
      const bool real = j < static_cast<int64_t>(anchors[r].size());
      const int64_t a = real ? anchors[r][j] : 0;
      if (real && (a < 0 || a + 1 >= len)) fail("internal: anchor {} outside 0..{} of a {}-token row", a, len - 2, len);
      for (int64_t k = 0; k < B; ++k) {
        const int64_t q = j * B + k;
        pos_a[r][q] = a + k;
        anc_a[r][q] = real ? a : 0;
        if (k == 0) ids_a[r][q] = real ? ids[a] : mask_token_id;
        if (real && k >= 1 && a + k < len) {
          lab_a[r][q] = ids[a + k];
          w_a[r][q] = static_cast<float>(std::exp(-static_cast<double>(k - 1) / gamma));
        }
      }
    }
  }
  at::Tensor ctx_allowed = at::arange(T, at::kLong).view({1, 1, T}) < anchor_of_query.unsqueeze(-1);  // [batch, Q, T]
  at::Tensor block_of = at::arange(Q, at::kLong).div(B, "floor");
  at::Tensor blk_allowed = (block_of.unsqueeze(1) == block_of.unsqueeze(0)).unsqueeze(0).expand({batch, Q, Q});
  at::Tensor allowed = at::cat({ctx_allowed, blk_allowed}, -1).unsqueeze(1);
  return DraftBlocks{block_ids, positions, allowed, labels, weights, B};
}

at::Tensor draft_hidden(const model::DFlashConfig& dc, const model::DFlashWeights& w, const ops::RopeTable& rope,
                        const at::Tensor& embed_tokens, const at::Tensor& taps, const DraftBlocks& b) {
  const model::Qwen3Config& a = dc.arch;
  const int64_t T = taps.size(1), hd = a.head_dim;
  const int64_t last_position = b.positions.numel() > 0 ? b.positions.max().item<int64_t>() : 0;
  if (last_position >= rope.max_positions())
    fail("draft block positions reach {}, beyond the draft's max_position_embeddings {}", last_position, rope.max_positions());
  at::Tensor ctx_pos = at::arange(T, at::TensorOptions().dtype(at::kLong).device(taps.device()));
  at::Tensor ctx = ops::rms_norm(at::linear(taps, w.fc), w.hidden_norm, a.rms_norm_eps);  // [batch, T, H]
  at::Tensor x = at::embedding(embed_tokens, b.block_ids);                                // [batch, Q, H]
  for (int64_t l = 0; l < a.num_layers; ++l) {
    const model::DecoderLayerWeights& lw = w.layers[l];
    at::Tensor kc = ops::apply_rope(project_heads(ctx, lw.k_proj, a.num_kv_heads, hd, lw.k_norm, a.rms_norm_eps), rope, ctx_pos);
    at::Tensor vc = project_heads(ctx, lw.v_proj, a.num_kv_heads, hd, at::Tensor(), a.rms_norm_eps);
    at::Tensor h = ops::rms_norm(x, lw.input_norm, a.rms_norm_eps);
    at::Tensor q = ops::apply_rope(project_heads(h, lw.q_proj, a.num_heads, hd, lw.q_norm, a.rms_norm_eps), rope, b.positions);
    at::Tensor kb = ops::apply_rope(project_heads(h, lw.k_proj, a.num_kv_heads, hd, lw.k_norm, a.rms_norm_eps), rope, b.positions);
    at::Tensor vb = project_heads(h, lw.v_proj, a.num_kv_heads, hd, at::Tensor(), a.rms_norm_eps);
    at::Tensor attn = ops::attention_masked(q, at::cat({kc, kb}, -2), at::cat({vc, vb}, -2), b.allowed);
    x = x + at::linear(attn, lw.o_proj);
    x = mlp_residual(x, lw, a.rms_norm_eps);
  }
  return ops::rms_norm(x, w.final_norm, a.rms_norm_eps);
}

double draft_forward_backward(const model::DFlashConfig& dc, const model::DFlashWeights& w, const ops::RopeTable& rope,
                              const at::Tensor& embed_tokens, const at::Tensor& lm_head, const at::Tensor& taps,
                              const DraftBlocks& b, DraftMetrics* metrics) {
  at::Tensor hidden = draft_hidden(dc, w, rope, embed_tokens, taps, b);
  // Only labelled rows reach the (vocabulary-wide) LM head.
  at::Tensor flat_w = b.weights.reshape({-1});
  at::Tensor rows = flat_w.gt(0).nonzero().squeeze(-1);
  if (rows.numel() == 0) fail("draft batch has no labelled block position (sequences too short for block size {})", b.block_size);
  at::Tensor h_rows = hidden.reshape({-1, hidden.size(-1)}).index_select(0, rows);
  VocabLoss vl = vocab_cross_entropy(h_rows, lm_head, b.labels.reshape({-1}).index_select(0, rows), flat_w.index_select(0, rows));
  h_rows.backward(vl.grad_hidden);

  if (metrics != nullptr) {
    c10::NoGradGuard no_grad;
    at::Tensor correct_rows = vl.correct.to(at::kFloat);
    metrics->top1 = correct_rows.mean().item<double>();
    // Teacher-forced acceptance: per block, the run of correct positions from k = 1 (unlabelled = stop).
    at::Tensor correct = at::zeros({flat_w.numel()}, correct_rows.options()).index_put_({rows}, correct_rows);
    const int64_t B = b.block_size, n_blocks = flat_w.numel() / B;
    at::Tensor per_block = correct.view({n_blocks, B}).narrow(1, 1, B - 1);
    at::Tensor labelled_block = flat_w.view({n_blocks, B}).narrow(1, 1, 1).squeeze(1).gt(0);
    at::Tensor run = per_block.cumprod(1).sum(1);
    metrics->accepted_length =
        labelled_block.any().item<bool>() ? 1.0 + run.masked_select(labelled_block).mean().item<double>() : 1.0;
  }
  return vl.loss;
}

}  // namespace specpress::train
