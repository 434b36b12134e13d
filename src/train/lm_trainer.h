// lm_trainer.h — `specpress train-lm`: a Qwen3-architecture language model trained from scratch on
// token data (next-token cross-entropy on random windows of the concatenated documents), written as an
// HF Qwen3 checkpoint (config.json in the transformers 4.x format, model.safetensors, tokenizer files
// copied from --tokenizer) that model::Qwen3Model::load and transformers both read.
#pragma once
#include <string>

#include "train/data.h"
#include "train/loop.h"

namespace specpress::train {

struct LmOptions : CommonOptions {
  std::string config_path;    // Qwen3 config.json fields (vocab_size, hidden_size, ...)
  std::string tokenizer_dir;  // optional: tokenizer files to copy into OUT (and to encode text data)
};

TrainSummary train_lm(const LmOptions& options, const TextCodec& codec);

// Copies the tokenizer files an HF model directory carries (tokenizer.json, tokenizer_config.json,
// vocab.json, merges.txt, chat_template.jinja, special_tokens_map.json) from `from` to `to`.
void copy_tokenizer_files(const std::string& from, const std::string& to);

}  // namespace specpress::train
