// dflash_draft.h — the DFlash block-diffusion draft (z-lab format): config, weights (fc, hidden_norm,
// norm, layers.*; no embedding or LM head, the target's are used), a static context K/V cache and the
// reference forward of dflash-spec.md §3.9: new context features -> fc -> hidden_norm -> per-layer
// context K/V appended at their absolute positions; the block [bonus, MASK x B-1] attends non-causally
// to all cached context plus the whole block.
#pragma once
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "model/qwen3.h"

namespace specpress::model {

struct DFlashConfig {
  Qwen3Config arch;                      // the draft's own Qwen3 widths (num_layers = draft layers)
  int64_t block_size = 16;
  int64_t num_target_layers = 0;
  std::vector<int64_t> target_layer_ids;  // ascending order as configured; fc input slices follow it
  int64_t mask_token_id = -1;
};

// z-lab's build_target_layer_ids: [N_t/2] for one draft layer, else round(1 + i*(N_t-4)/(n_d-1)).
std::vector<int64_t> default_target_layer_ids(int64_t num_target_layers, int64_t num_draft_layers);
DFlashConfig parse_dflash_config(const std::string& config_path);
// The config of the draft in `dir`, checked against its target's: hidden and vocabulary sizes, layer count, taps, mask
// token (each mismatch named). DFlashDraft::load starts with it; tools that only read the draft's taps use it alone.
DFlashConfig draft_config_for(const std::string& dir, const Qwen3Config& target);
// The same from the two directories' configs alone: the tools call it before the target's weights load (minutes for
// an 8B), so that a bad draft config or a mismatched pair is reported at once.
DFlashConfig draft_config_for_dirs(const std::string& draft_dir, const std::string& target_dir);

struct DFlashWeights {
  at::Tensor fc;           // [H, n_taps*H]
  at::Tensor hidden_norm;  // [H]
  at::Tensor final_norm;   // [H]
  std::vector<DecoderLayerWeights> layers;
};

// Context K/V of the draft: [L, n_kv, capacity, hd]; length = number of context positions cached.
using DraftCache = KVCache;

class DFlashDraft {
 public:
  // Loads a draft directory and validates it against `target` (hidden size, vocab, mask id, tap ids).
  static DFlashDraft load(const std::string& dir, const Qwen3Model& target, at::ScalarType dtype, at::Device device);
  DFlashDraft(DFlashConfig config, DFlashWeights weights, const Qwen3Model& target);

  // Appends context features `ctx_features` ([n, n_taps*H], positions cache.length .. start-1 where
  // start = cache.length + n) and runs the block `block_ids` (int64 [Bq]) at positions start .. start+Bq-1.
  // Returns the draft's final-norm hidden states [Bq, H]. The cache keeps only context K/V afterwards.
  at::Tensor forward(const at::Tensor& ctx_features, const at::Tensor& block_ids, DraftCache& cache) const;

  DraftCache make_cache(int64_t capacity) const;
  const DFlashConfig& config() const { return config_; }
  const DFlashWeights& weights() const { return weights_; }
  const ops::RopeTable& rope() const { return rope_; }  // its positions' rotations (the target's table where equal)

 private:
  DFlashConfig config_;
  DFlashWeights weights_;
  const Qwen3Model* target_;
  ops::RopeTable rope_;  // the draft's theta and positions: the target's table where they are the target's
};

}  // namespace specpress::model
