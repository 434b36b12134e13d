// params.cpp — see params.h.
#include "train/params.h"

#include <map>

#include <ATen/CPUGeneratorImpl.h>

#include "core/error.h"

namespace specpress::train {
namespace {

constexpr double kInitStd = 0.02;  // transformers' Qwen3 initializer_range

// The 11 tensors of a decoder layer under their HF suffixes, with their shapes.
struct LayerField {
  const char* name;
  at::Tensor model::DecoderLayerWeights::*member;
};
constexpr LayerField kLayerFields[] = {
    {"input_layernorm.weight", &model::DecoderLayerWeights::input_norm},
    {"self_attn.q_proj.weight", &model::DecoderLayerWeights::q_proj},
    {"self_attn.k_proj.weight", &model::DecoderLayerWeights::k_proj},
    {"self_attn.v_proj.weight", &model::DecoderLayerWeights::v_proj},
    {"self_attn.o_proj.weight", &model::DecoderLayerWeights::o_proj},
    {"self_attn.q_norm.weight", &model::DecoderLayerWeights::q_norm},
    {"self_attn.k_norm.weight", &model::DecoderLayerWeights::k_norm},
    {"post_attention_layernorm.weight", &model::DecoderLayerWeights::post_norm},
    {"mlp.gate_proj.weight", &model::DecoderLayerWeights::gate_proj},
    {"mlp.up_proj.weight", &model::DecoderLayerWeights::up_proj},
    {"mlp.down_proj.weight", &model::DecoderLayerWeights::down_proj},
};

at::Tensor normal(std::vector<int64_t> shape, at::Generator& gen) {
  return at::empty(shape, at::kFloat).normal_(0.0, kInitStd, gen);
}

model::DecoderLayerWeights init_layer(const model::Qwen3Config& c, at::Generator& gen) {
  const int64_t H = c.hidden_size, hd = c.head_dim, q = c.num_heads * hd, kv = c.num_kv_heads * hd;
  model::DecoderLayerWeights w;
  w.input_norm = at::ones({H});
  w.q_proj = normal({q, H}, gen);
  w.k_proj = normal({kv, H}, gen);
  w.v_proj = normal({kv, H}, gen);
  w.o_proj = normal({H, q}, gen);
  w.q_norm = at::ones({hd});
  w.k_norm = at::ones({hd});
  w.post_norm = at::ones({H});
  w.gate_proj = normal({c.intermediate_size, H}, gen);
  w.up_proj = normal({c.intermediate_size, H}, gen);
  w.down_proj = normal({H, c.intermediate_size}, gen);
  return w;
}

void add_layer(NamedTensors& out, const std::string& prefix, const model::DecoderLayerWeights& w) {
  for (const LayerField& f : kLayerFields) out.emplace_back(prefix + f.name, w.*f.member);
}

using NameMap = std::map<std::string, at::Tensor>;

NameMap to_map(const NamedTensors& named) { return NameMap(named.begin(), named.end()); }

at::Tensor lookup(const NameMap& map, const std::string& name) {
  auto it = map.find(name);
  if (it == map.end()) fail("internal: parameter '{}' missing", name);
  return it->second;
}

model::DecoderLayerWeights layer_from(const NameMap& map, const std::string& prefix) {
  model::DecoderLayerWeights w;
  for (const LayerField& f : kLayerFields) w.*f.member = lookup(map, prefix + f.name);
  return w;
}

// Shared fields of both config formats (transformers 4.x Qwen3Config).
nlohmann::ordered_json qwen3_fields(const model::Qwen3Config& c, const std::string& dtype_name) {
  nlohmann::ordered_json j;
  j["architectures"] = {"Qwen3ForCausalLM"};
  j["model_type"] = "qwen3";
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.num_layers;
  j["num_attention_heads"] = c.num_heads;
  j["num_key_value_heads"] = c.num_kv_heads;
  j["head_dim"] = c.head_dim;
  j["hidden_act"] = "silu";
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["initializer_range"] = kInitStd;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["rope_theta"] = c.rope_theta;
  j["rope_scaling"] = nullptr;
  j["attention_bias"] = false;
  j["attention_dropout"] = 0.0;
  j["use_cache"] = true;
  j["use_sliding_window"] = false;
  j["sliding_window"] = nullptr;
  j["max_window_layers"] = c.num_layers;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["torch_dtype"] = dtype_name;
  if (!c.eos_token_ids.empty()) {
    if (c.eos_token_ids.size() == 1)
      j["eos_token_id"] = c.eos_token_ids[0];
    else
      j["eos_token_id"] = c.eos_token_ids;
  }
  j["transformers_version"] = "4.51.0";
  return j;
}

}  // namespace

model::Qwen3Weights init_qwen3_weights(const model::Qwen3Config& c, uint64_t seed) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  model::Qwen3Weights w;
  w.embed_tokens = normal({c.vocab_size, c.hidden_size}, gen);
  for (int64_t i = 0; i < c.num_layers; ++i) w.layers.push_back(init_layer(c, gen));
  w.final_norm = at::ones({c.hidden_size});
  w.lm_head = c.tie_word_embeddings ? w.embed_tokens : normal({c.vocab_size, c.hidden_size}, gen);
  return w;
}

model::DFlashWeights init_dflash_weights(const model::DFlashConfig& c, uint64_t seed) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  const int64_t H = c.arch.hidden_size;
  model::DFlashWeights w;
  w.fc = normal({H, static_cast<int64_t>(c.target_layer_ids.size()) * H}, gen);
  w.hidden_norm = at::ones({H});
  w.final_norm = at::ones({H});
  for (int64_t i = 0; i < c.arch.num_layers; ++i) w.layers.push_back(init_layer(c.arch, gen));
  return w;
}

NamedTensors qwen3_named(const model::Qwen3Weights& w, const model::Qwen3Config& c) {
  NamedTensors out = {{"model.embed_tokens.weight", w.embed_tokens}};
  for (size_t i = 0; i < w.layers.size(); ++i) add_layer(out, fmt::format("model.layers.{}.", i), w.layers[i]);
  out.emplace_back("model.norm.weight", w.final_norm);
  if (!c.tie_word_embeddings) out.emplace_back("lm_head.weight", w.lm_head);
  return out;
}

NamedTensors dflash_named(const model::DFlashWeights& w) {
  NamedTensors out = {{"fc.weight", w.fc}, {"hidden_norm.weight", w.hidden_norm}, {"norm.weight", w.final_norm}};
  for (size_t i = 0; i < w.layers.size(); ++i) add_layer(out, fmt::format("layers.{}.", i), w.layers[i]);
  return out;
}

void make_trainable(NamedTensors& named, at::Device device) {
  for (auto& [name, t] : named) t = t.detach().to(device, at::kFloat).clone().requires_grad_(true);
}

model::Qwen3Weights qwen3_from_named(const NamedTensors& named, const model::Qwen3Config& c) {
  NameMap map = to_map(named);
  model::Qwen3Weights w;
  w.embed_tokens = lookup(map, "model.embed_tokens.weight");
  for (int64_t i = 0; i < c.num_layers; ++i) w.layers.push_back(layer_from(map, fmt::format("model.layers.{}.", i)));
  w.final_norm = lookup(map, "model.norm.weight");
  w.lm_head = c.tie_word_embeddings ? w.embed_tokens : lookup(map, "lm_head.weight");
  return w;
}

model::DFlashWeights dflash_from_named(const NamedTensors& named, const model::DFlashConfig& c) {
  NameMap map = to_map(named);
  model::DFlashWeights w;
  w.fc = lookup(map, "fc.weight");
  w.hidden_norm = lookup(map, "hidden_norm.weight");
  w.final_norm = lookup(map, "norm.weight");
  for (int64_t i = 0; i < c.arch.num_layers; ++i) w.layers.push_back(layer_from(map, fmt::format("layers.{}.", i)));
  return w;
}

nlohmann::ordered_json qwen3_config_json(const model::Qwen3Config& c, const std::string& dtype_name) {
  return qwen3_fields(c, dtype_name);
}

nlohmann::ordered_json dflash_config_json(const model::DFlashConfig& c, const std::string& dtype_name) {
  nlohmann::ordered_json j = qwen3_fields(c.arch, dtype_name);
  j["architectures"] = {"DFlashDraftModel"};
  j["auto_map"] = {{"AutoModel", "dflash.DFlashDraftModel"}};
  j["layer_types"] = std::vector<std::string>(c.arch.num_layers, "full_attention");
  j["block_size"] = c.block_size;
  j["num_target_layers"] = c.num_target_layers;
  j["dflash_config"] = {{"target_layer_ids", c.target_layer_ids}, {"mask_token_id", c.mask_token_id}};
  return j;
}

NamedTensors to_cpu(const NamedTensors& named, at::ScalarType dtype) {
  NamedTensors out;
  for (const auto& [name, t] : named) out.emplace_back(name, t.detach().to(at::kCPU, dtype).contiguous());
  return out;
}

}  // namespace specpress::train
