// draft_trainer.h — `specpress train-draft`: trains a DFlash draft for a frozen Qwen3 target (the
// recipe of dflash-spec.md §5.4, see dflash_forward.h) on token data and/or the target's own greedy
// generations for given prompts (on-policy), evaluates tau with the real speculative loop
// (decode::generate_dflash) and writes the draft in the z-lab format (config.json with block_size,
// num_target_layers, dflash_config; fc / hidden_norm / norm / layers.* tensors).
#pragma once
#include <string>
#include <vector>

#include "train/data.h"
#include "train/loop.h"

namespace specpress::train {

struct DraftOptions : CommonOptions {
  std::string target_dir;
  int64_t draft_layers = 1;
  int64_t block_size = 16;
  std::vector<int64_t> target_layer_ids;  // empty = z-lab's default for the target's depth
  int64_t mask_token_id = -1;             // -1 = 151669 for the Qwen3 vocabulary, else the last id
  double gamma = 0;                       // loss decay; 0 = 7 / 5 / 4 for block 16 / 10 / 8, else (B-1)/2
  int64_t anchors = 32;                   // blocks per sequence and step
  std::vector<std::string> on_policy_prompts;
  int64_t gen_tokens = 128;               // new tokens per on-policy generation
  std::vector<std::string> eval_prompts;
  int64_t eval_every = 0;                 // 0 = only at the end
  int64_t eval_samples = 8;
  int64_t eval_tokens = 64;
};

// Reports the on-policy generation and training (progress on stderr); the summary holds the losses and
// each evaluation's tau.
TrainSummary train_draft(const DraftOptions& options, const TextCodec& codec);

// The default decay of the loss weights for block size B.
double default_gamma(int64_t block_size);

}  // namespace specpress::train
