// beacon_layout.cpp — see beacon_layout.h. The mask is built from three per-row vectors: f (forward of
// each token), e_k (forward from which each token's unit is replaced, "never" = INT64_MAX) and e (forward
// of each latent), with broadcast comparisons.
#include "train/beacon_layout.h"

#include <c10/core/GradMode.h>

#include <algorithm>
#include <limits>

#include "train/sequence_forward.h"

namespace specpress::train {

BeaconLayout make_beacon_layout(const compress::CompressionPlan& plan, at::Device device) {
  const int64_t T = static_cast<int64_t>(plan.forward_of.size());
  const int64_t E = static_cast<int64_t>(plan.events.size());
  constexpr int64_t kNever = std::numeric_limits<int64_t>::max();
  std::vector<int64_t> replaced_at(T, kNever), event_forward(E), positions(T + E);
  for (int64_t j = 0; j < E; ++j) {
    const compress::CompressionEvent& ev = plan.events[j];
    event_forward[j] = ev.forward;
    for (int64_t p = ev.unit.begin; p < ev.unit.end; ++p) replaced_at[p] = ev.forward;
    positions[T + j] = ev.unit.end - 1;
  }
  for (int64_t p = 0; p < T; ++p) positions[p] = p;
  at::Tensor f = at::tensor(plan.forward_of, at::kLong);
  at::Tensor ek = at::tensor(replaced_at, at::kLong);
  at::Tensor e = at::tensor(event_forward, at::kLong);

  at::Tensor allowed = at::zeros({T + E, T + E}, at::kBool);
  // token -> token: causal, minus units replaced by the query's forward
  allowed.narrow(0, 0, T).narrow(1, 0, T).copy_(at::ones({T, T}, at::kBool).tril().logical_and(ek.unsqueeze(0).gt(f.unsqueeze(1))));
  if (E > 0) {
    allowed.narrow(0, 0, T).narrow(1, T, E).copy_(e.unsqueeze(0).le(f.unsqueeze(1)));  // token -> latent
    allowed.narrow(0, T, E).narrow(1, 0, T).copy_(                                       // latent -> token
        f.unsqueeze(0).lt(e.unsqueeze(1)).logical_and(ek.unsqueeze(0).ge(e.unsqueeze(1))));
    at::Tensor same = e.unsqueeze(0).eq(e.unsqueeze(1)).logical_and(at::ones({E, E}, at::kBool).tril());
    allowed.narrow(0, T, E).narrow(1, T, E).copy_(e.unsqueeze(0).lt(e.unsqueeze(1)).logical_or(same));  // latent -> latent
  }
  BeaconLayout layout;
  layout.tokens = T;
  layout.events = plan.events;
  layout.positions = at::tensor(positions, at::kLong).to(device);
  layout.allowed = allowed.to(device);
  const int64_t first = E > 0 ? e.min().item<int64_t>() : kNever;
  layout.loss_rows = at::nonzero(f.ge(first)).view({-1}).to(device);
  int64_t n_max = 1;
  for (const auto& ev : plan.events) n_max = std::max(n_max, ev.unit.size());
  std::vector<int64_t> rows(E * n_max, 0), lengths;
  for (int64_t j = 0; j < E; ++j) {
    const compress::Unit& u = plan.events[j].unit;
    for (int64_t i = 0; i < u.size(); ++i) rows[j * n_max + i] = u.begin + i;
    lengths.push_back(u.size());
  }
  layout.unit_rows = at::tensor(rows, at::kLong).view({E, n_max}).to(device);
  layout.unit_lengths = at::tensor(lengths, at::kLong).to(device);
  return layout;
}

at::Tensor layout_latents(const compress::BeaconConfig& config, const compress::BeaconWeights& weights,
                          const model::Qwen3Model& target, const BeaconLayout& layout, const at::Tensor& ids,
                          const at::Tensor& features) {
  return compress::beacon_embed_rows(config, weights, target, features, ids, layout.unit_rows, layout.unit_lengths);
}

LayoutOutput layout_forward(const model::Qwen3Model& target, const BeaconLayout& layout, const at::Tensor& ids,
                            const at::Tensor& latents, const std::vector<int64_t>& tap_layers, bool final_norm) {
  at::Tensor tokens = at::embedding(target.weights().embed_tokens, ids);
  at::Tensor x = at::cat({tokens, latents.to(tokens.scalar_type())}, 0);
  SequenceOutput out = masked_sequence_forward(target.config(), target.weights(), target.rope(), x, layout.positions,
                                               layout.allowed, tap_layers, final_norm);
  return {out.hidden, out.taps};
}

at::Tensor refine_features(const compress::BeaconConfig& config, const compress::BeaconWeights& weights,
                           const model::Qwen3Model& target, const BeaconLayout& layout, const at::Tensor& ids,
                           at::Tensor features, int64_t passes) {
  c10::NoGradGuard no_grad;
  for (int64_t k = 0; k < passes && !layout.events.empty(); ++k) {
    at::Tensor latents = layout_latents(config, weights, target, layout, ids, features);
    features = layout_forward(target, layout, ids, latents, config.feature_layers, false).taps.narrow(0, 0, layout.tokens);
  }
  return features;
}

}  // namespace specpress::train
