// params.h — trainable weights: fresh initialisation (HF Qwen3's normal(0, 0.02) for matrices, ones for
// norms, drawn from a seeded CPU generator so every device starts identically), the checkpoint names
// of each tensor (HF Qwen3 names for the LM, z-lab names for the DFlash draft), and the config.json
// each format carries.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "model/dflash_draft.h"
#include "model/qwen3.h"

namespace specpress::train {

// Name -> tensor; the tensors alias the weights they were taken from.
using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

model::Qwen3Weights init_qwen3_weights(const model::Qwen3Config& config, uint64_t seed);
model::DFlashWeights init_dflash_weights(const model::DFlashConfig& config, uint64_t seed);

// HF names (model.embed_tokens.weight, model.layers.{i}.*, model.norm.weight, lm_head.weight unless tied).
NamedTensors qwen3_named(const model::Qwen3Weights& weights, const model::Qwen3Config& config);
// z-lab names (fc.weight, hidden_norm.weight, norm.weight, layers.{i}.*).
NamedTensors dflash_named(const model::DFlashWeights& weights);

// Replaces every tensor of `named` by a float32 leaf on `device` that requires grad; rebuild the model
// struct with *_from_named afterwards so both share storage.
void make_trainable(NamedTensors& named, at::Device device);
// The weights struct over the tensors of `named` (by name; a tied lm_head is the embedding).
model::Qwen3Weights qwen3_from_named(const NamedTensors& named, const model::Qwen3Config& config);
model::DFlashWeights dflash_from_named(const NamedTensors& named, const model::DFlashConfig& config);

// config.json in the transformers 4.x Qwen3 format, and the z-lab DFlash draft format.
nlohmann::ordered_json qwen3_config_json(const model::Qwen3Config& config, const std::string& dtype_name);
nlohmann::ordered_json dflash_config_json(const model::DFlashConfig& config, const std::string& dtype_name);

// Copies of `named` as `dtype` on the CPU, ready for io::save_safetensors.
NamedTensors to_cpu(const NamedTensors& named, at::ScalarType dtype);

}  // namespace specpress::train
