// beacon.h — the learned one-latent "beacon" compressor (compression-design.md §7.2, B1). A unit of n
// committed tokens becomes one input embedding e for the frozen target:
//   features  = the span's tapped target states (the layers DFlash already taps), RMS-normalised per
//               layer and projected to `width`;
//   z         = [attention pool (one learned query), mean pool], then SiLU(W_in z + b + len_emb[n]);
//   e         = RMS-match(mean of the span's token embeddings + rms_E * (base + gate * W_out u)),
// scaled to the RMS of the target's token embeddings. The target re-encodes e as one extra position
// (the span's last position) inside the next forward, attending to the raw span before it is freed
// (model::LatentRows), so the latent's K/V are the target's own. The mean-embedding term makes an
// untrained compressor start as "the span's average token, reading the span".
// Checkpoint: DIR/compressor.json + DIR/compressor.safetensors.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "compress/policy.h"
#include "model/qwen3.h"

namespace specpress::compress {

struct BeaconConfig {
  std::vector<int64_t> feature_layers;  // target layers whose raw outputs are the span features
  int64_t target_hidden = 0;            // H of the target
  int64_t target_layers = 0;            // depth of the target it was trained for
  int64_t target_vocab = 0;
  int64_t width = 256;                  // internal width W
  int64_t max_span = 64;                // rows of the length embedding (longer units use the last row)
  double embed_rms = 1.0;               // RMS of the target's token embeddings
  Policy policy;                        // the policy it was trained with (window, sinks, merge)
  int64_t feature_dim() const { return static_cast<int64_t>(feature_layers.size()) * target_hidden; }
};

struct BeaconWeights {
  at::Tensor proj_in;       // [W, D]
  at::Tensor pool_query;    // [W]
  at::Tensor mlp_in;        // [W, 2W]
  at::Tensor mlp_in_bias;   // [W]
  at::Tensor length_embed;  // [max_span, W]
  at::Tensor mlp_out;       // [H, W]
  at::Tensor base;          // [H]
  at::Tensor gate;          // [1]
};

// Fresh weights (float32, seeded CPU generator).
BeaconWeights init_beacon_weights(const BeaconConfig& config, uint64_t seed);
// Checkpoint names ("proj_in.weight", ...) and back.
std::vector<std::pair<std::string, at::Tensor>> beacon_named(const BeaconWeights& weights);
BeaconWeights beacon_from_named(const std::vector<std::pair<std::string, at::Tensor>>& named);

// The latent embeddings of E units: features [E, n_max, D], token_embeds [E, n_max, H], lengths [E]
// (int64, 1..n_max; rows past a unit's length are padding). Computes and returns [E, H] in the weights'
// dtype (float32: the compressor is small, and bf16 RMS statistics would differ from training).
// Differentiable in the weights (the trainer) and used as is at inference.
at::Tensor beacon_embed(const BeaconConfig& config, const BeaconWeights& weights, const at::Tensor& features,
                        const at::Tensor& token_embeds, const at::Tensor& lengths);
// The same from per-position rows, as both the online compressor and the trainer hold them:
// `feature_rows` [P, D] and `ids` (int64 [P]) indexed by `unit_rows` (int64 [E, n_max]; padding
// entries may be any valid index), `lengths` (int64 [E]).
at::Tensor beacon_embed_rows(const BeaconConfig& config, const BeaconWeights& weights, const model::Qwen3Model& target,
                             const at::Tensor& feature_rows, const at::Tensor& ids, const at::Tensor& unit_rows,
                             const at::Tensor& lengths);

nlohmann::ordered_json beacon_config_json(const BeaconConfig& config);

class BeaconCompressor {
 public:
  // Reads DIR/compressor.json and DIR/compressor.safetensors and checks them against `target`: errors
  // name the file and the field or tensor, and what was expected.
  static std::shared_ptr<const BeaconCompressor> load(const std::string& dir, const model::Qwen3Model& target);
  BeaconCompressor(BeaconConfig config, BeaconWeights weights) : config_(std::move(config)), weights_(std::move(weights)) {}
  const BeaconConfig& config() const { return config_; }
  const BeaconWeights& weights() const { return weights_; }

 private:
  BeaconConfig config_;
  BeaconWeights weights_;
};

// Writes DIR/compressor.json and DIR/compressor.safetensors (in `dtype`; load() reads any into float32), each
// atomically.
void save_beacon(const std::string& dir, const BeaconConfig& config, const BeaconWeights& weights,
                 at::ScalarType dtype = at::kFloat);

// The value of --compress: a training-free method name, or a directory holding a beacon checkpoint
// (its method becomes kBeacon). `policy` keeps the window/sinks/merge the user gave (Policy::given); a beacon gives
// its trained values to those not given.
Policy resolve_compress(const std::string& value, const std::string& flag, Policy policy, const model::Qwen3Model& target);
// What resolve_compress can check without the model: the value names a method or an existing path, and the knobs
// given are in range (a server checks them before it binds its port).
void check_compress_flags(const std::string& value, const std::string& flag, Policy policy);

// RMS of the rows of `embed_tokens` (the beacon's output scale).
double embedding_rms(const at::Tensor& embed_tokens);

}  // namespace specpress::compress
