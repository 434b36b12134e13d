// model_fixtures.h — writes small random Qwen3 targets and DFlash drafts as HF directories
// (config.json + safetensors), for loader error tests and end-to-end tool tests.
#pragma once
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "io/checkpoint.h"

namespace specpress::test {

struct TinyShape {
  int64_t vocab = 64, hidden = 32, intermediate = 48, layers = 2, heads = 4, kv_heads = 2, head_dim = 8;
};

inline nlohmann::json qwen3_config_json(const TinyShape& s, bool tied) {
  return {{"architectures", {"Qwen3ForCausalLM"}}, {"model_type", "qwen3"}, {"vocab_size", s.vocab},
          {"hidden_size", s.hidden}, {"intermediate_size", s.intermediate}, {"num_hidden_layers", s.layers},
          {"num_attention_heads", s.heads}, {"num_key_value_heads", s.kv_heads}, {"head_dim", s.head_dim},
          {"rms_norm_eps", 1e-6}, {"rope_theta", 1000000.0}, {"max_position_embeddings", 512},
          {"tie_word_embeddings", tied}, {"torch_dtype", "float32"}, {"eos_token_id", s.vocab - 1},
          {"hidden_act", "silu"}, {"attention_bias", false}};
}

inline std::vector<std::pair<std::string, at::Tensor>> decoder_layer_tensors(const std::string& prefix,
                                                                             const TinyShape& s) {
  const int64_t q = s.heads * s.head_dim, kv = s.kv_heads * s.head_dim;
  auto r = [](std::vector<int64_t> shape, double scale) { return at::randn(shape) * scale; };
  auto norm = [](int64_t n) { return 1.0 + 0.1 * at::randn({n}); };
  return {{prefix + "input_layernorm.weight", norm(s.hidden)},
          {prefix + "self_attn.q_proj.weight", r({q, s.hidden}, 0.2)},
          {prefix + "self_attn.k_proj.weight", r({kv, s.hidden}, 0.2)},
          {prefix + "self_attn.v_proj.weight", r({kv, s.hidden}, 0.2)},
          {prefix + "self_attn.o_proj.weight", r({s.hidden, q}, 0.2)},
          {prefix + "self_attn.q_norm.weight", norm(s.head_dim)},
          {prefix + "self_attn.k_norm.weight", norm(s.head_dim)},
          {prefix + "post_attention_layernorm.weight", norm(s.hidden)},
          {prefix + "mlp.gate_proj.weight", r({s.intermediate, s.hidden}, 0.2)},
          {prefix + "mlp.up_proj.weight", r({s.intermediate, s.hidden}, 0.2)},
          {prefix + "mlp.down_proj.weight", r({s.hidden, s.intermediate}, 0.2)}};
}

inline std::vector<std::pair<std::string, at::Tensor>> qwen3_tensors(const TinyShape& s, bool tied) {
  std::vector<std::pair<std::string, at::Tensor>> t = {{"model.embed_tokens.weight", at::randn({s.vocab, s.hidden})},
                                                       {"model.norm.weight", 1.0 + 0.1 * at::randn({s.hidden})}};
  for (int64_t i = 0; i < s.layers; ++i)
    for (auto& kv : decoder_layer_tensors("model.layers." + std::to_string(i) + ".", s)) t.push_back(kv);
  if (!tied) t.push_back({"lm_head.weight", at::randn({s.vocab, s.hidden})});
  return t;
}

inline void write_json(const std::filesystem::path& p, const nlohmann::json& j) {
  std::ofstream out(p);
  out << j.dump(2);
}

// A random tiny Qwen3 target in `dir` (created); returns its tensors for tests to edit and rewrite.
inline void write_random_qwen3(const std::string& dir, const TinyShape& s = {}, bool tied = false, uint64_t seed = 1) {
  at::manual_seed(seed);
  std::filesystem::create_directories(dir);
  write_json(std::filesystem::path(dir) / "config.json", qwen3_config_json(s, tied));
  io::save_safetensors((std::filesystem::path(dir) / "model.safetensors").string(), qwen3_tensors(s, tied));
}

// A tiny Qwen3 whose final norm holds one NaN: it loads (NaN is a valid value) and every logit it computes is NaN.
inline void write_qwen3_with_a_nan_weight(const std::string& dir) {
  write_random_qwen3(dir);
  auto t = qwen3_tensors(TinyShape{}, false);
  for (auto& [name, tensor] : t)
    if (name == "model.norm.weight") tensor.view(-1)[3] = std::numeric_limits<float>::quiet_NaN();
  io::save_safetensors((std::filesystem::path(dir) / "model.safetensors").string(), t);
}

inline nlohmann::json dflash_config_json(const TinyShape& s, int64_t draft_layers, int64_t block, int64_t target_layers,
                                         std::vector<int64_t> taps, int64_t mask) {
  nlohmann::json j = qwen3_config_json(s, false);
  j["architectures"] = {"DFlashDraftModel"};
  j["num_hidden_layers"] = draft_layers;
  j["block_size"] = block;
  j["num_target_layers"] = target_layers;
  j["dflash_config"] = {{"target_layer_ids", taps}, {"mask_token_id", mask}};
  return j;
}

inline void write_random_dflash(const std::string& dir, const TinyShape& s, int64_t draft_layers, int64_t block,
                                int64_t target_layers, std::vector<int64_t> taps, int64_t mask, uint64_t seed = 2) {
  at::manual_seed(seed);
  std::filesystem::create_directories(dir);
  write_json(std::filesystem::path(dir) / "config.json",
             dflash_config_json(s, draft_layers, block, target_layers, taps, mask));
  std::vector<std::pair<std::string, at::Tensor>> t = {
      {"fc.weight", at::randn({s.hidden, static_cast<int64_t>(taps.size()) * s.hidden}) * 0.2},
      {"hidden_norm.weight", at::ones({s.hidden})},
      {"norm.weight", at::ones({s.hidden})}};
  for (int64_t i = 0; i < draft_layers; ++i)
    for (auto& kv : decoder_layer_tensors("layers." + std::to_string(i) + ".", s)) t.push_back(kv);
  io::save_safetensors((std::filesystem::path(dir) / "model.safetensors").string(), t);
}

}  // namespace specpress::test
