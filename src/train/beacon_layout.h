// beacon_layout.h — the parallel masked training layout of the beacon compressor
// (compression-design.md §7.6): one forward holds a whole teacher-forced trajectory plus one latent
// row per compression event, with a visibility mask that reproduces, row by row, what each token and
// each latent saw in the online engine (KVCompressor + the loops' fused forwards):
//   token q sees token k <= q unless k's unit was compressed by q's forward (e_unit <= f(q));
//   token q sees latent j once it exists (e_j <= f(q));
//   latent j sees the tokens committed before its forward (f(k) < e_j), except units already replaced
//     by earlier latents (e_i < e_j) — its own raw unit included, as in the fused verify forward;
//   latent j sees latent i when e_i < e_j, or e_i == e_j and i <= j (same fused forward, in order).
// Latent j sits at its unit's last position. Rows 0..T-1 are the tokens, T..T+E-1 the latents.
#pragma once
#include <cstdint>
#include <vector>

#include <ATen/ATen.h>

#include "compress/beacon.h"
#include "compress/span_plan.h"
#include "model/qwen3.h"

namespace specpress::train {

struct BeaconLayout {
  int64_t tokens = 0;                             // T
  std::vector<compress::CompressionEvent> events; // latent rows, in order
  at::Tensor positions;                           // int64 [T + E]
  at::Tensor allowed;                             // bool [T + E, T + E]
  at::Tensor loss_rows;                           // int64: token rows that see at least one latent
  at::Tensor unit_rows;                           // int64 [E, n_max]: positions of each event's unit (padded with 0)
  at::Tensor unit_lengths;                        // int64 [E]
};

// The layout of `plan` (from compress::plan_compression over the same T tokens), on `device`.
BeaconLayout make_beacon_layout(const compress::CompressionPlan& plan, at::Device device);

// The latent embeddings [E, H] of the layout's events from per-position span features [T, D].
at::Tensor layout_latents(const compress::BeaconConfig& config, const compress::BeaconWeights& weights,
                          const model::Qwen3Model& target, const BeaconLayout& layout, const at::Tensor& ids,
                          const at::Tensor& features);

// The layout's forward: token embeddings of `ids` [T] followed by `latents`; returns the final-norm
// hidden states [T + E, H] and, when `tap_layers` is not empty, the taps [T + E, n * H].
struct LayoutOutput {
  at::Tensor hidden, taps;
};
LayoutOutput layout_forward(const model::Qwen3Model& target, const BeaconLayout& layout, const at::Tensor& ids,
                            const at::Tensor& latents, const std::vector<int64_t>& tap_layers, bool final_norm);

// Span features as the online engine computes them. The engine taps each token in its own forward,
// where it already sees the latents of earlier events, so the features of later units depend on
// earlier latents. Starting from `features` (the uncompressed taps), each pass recomputes the latents
// and re-taps the token rows under the layout (no gradients); after k passes every token whose
// context holds latents of fewer than k generations has exactly its online features.
at::Tensor refine_features(const compress::BeaconConfig& config, const compress::BeaconWeights& weights,
                           const model::Qwen3Model& target, const BeaconLayout& layout, const at::Tensor& ids,
                           at::Tensor features, int64_t passes);

}  // namespace specpress::train
