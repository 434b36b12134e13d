// qwen3.cpp — Qwen3 config parsing, weight loading and the reference forward (see qwen3.h).
#include "model/qwen3.h"

#include <algorithm>
#include <cmath>

#include "core/compat.h"
#include "core/error.h"
#include "io/checkpoint.h"
#include "model/config_json.h"
#include "ops/attention.h"
#include "ops/rmsnorm.h"
#include "ops/swiglu.h"

namespace specpress::model {

Qwen3Config parse_qwen3_config(const std::string& config_path, const char* architecture) {
  nlohmann::json j = ConfigReader::parse_file(config_path);
  ConfigReader r{j, config_path};
  if (architecture != nullptr) r.expect_architecture(architecture);
  Qwen3Config c;
  c.vocab_size = r.integer("vocab_size");
  c.hidden_size = r.integer("hidden_size");
  c.intermediate_size = r.integer("intermediate_size");
  c.num_layers = r.integer("num_hidden_layers");
  c.num_heads = r.integer("num_attention_heads");
  c.num_kv_heads = r.integer_or("num_key_value_heads", c.num_heads);
  if (c.num_heads <= 0) fail("{}: field 'num_attention_heads' must be positive, found {}", config_path, c.num_heads);
  c.head_dim = r.integer_or("head_dim", c.hidden_size / c.num_heads);
  c.rms_norm_eps = r.number_or("rms_norm_eps", 1e-6);
  if (r.has("rope_theta")) {
    c.rope_theta = r.number("rope_theta");
  } else if (r.has("rope_parameters")) {
    const auto& rp = j["rope_parameters"];
    if (!rp.is_object()) fail("{}: field 'rope_parameters' must be an object", config_path);
    ConfigReader rr{rp, config_path + ": rope_parameters"};
    c.rope_theta = rr.number("rope_theta");
    std::string type = rr.string_or("rope_type", "default");
    if (type != "default") fail("{}: rope_parameters.rope_type '{}' is not supported (expected 'default')", config_path, type);
  } else {
    fail("{}: missing field 'rope_theta' (or 'rope_parameters.rope_theta')", config_path);
  }
  if (r.has("rope_scaling")) fail("{}: field 'rope_scaling' is set; RoPE scaling is not supported", config_path);
  const std::string model_type = r.string_or("model_type", "qwen3");
  if (model_type != "qwen3") fail("{}: model_type '{}' is not supported (expected 'qwen3')", config_path, model_type);
  for (auto [name, value] : {std::pair{"vocab_size", c.vocab_size}, {"hidden_size", c.hidden_size},
                             {"intermediate_size", c.intermediate_size}, {"num_hidden_layers", c.num_layers},
                             {"num_key_value_heads", c.num_kv_heads}, {"head_dim", c.head_dim}})
    if (value <= 0) fail("{}: field '{}' must be positive, found {}", config_path, name, value);
  // Every layer attends to the whole context here. As transformers' Qwen3 reads the config, a layer slides only where
  // use_sliding_window is true and sliding_window is set, and it is a sliding_attention entry of layer_types (without
  // them: a layer at or past max_window_layers, 28 by default); such a config is refused, any other runs as full
  // attention, as there. layer_types, where given, has an entry a layer (transformers refuses another length too).
  const bool typed = r.has("layer_types");
  const nlohmann::json no_types = nlohmann::json::array();
  const nlohmann::json& types = typed ? j["layer_types"] : no_types;
  if (typed) {
    if (!types.is_array()) fail("{}: field 'layer_types' must be an array of strings", config_path);
    for (size_t i = 0; i < types.size(); ++i)
      if (types[i] != "full_attention" && types[i] != "sliding_attention")
        fail("{}: layer_types[{}] is {}; expected \"full_attention\" or \"sliding_attention\"", config_path, i,
             types[i].dump());
    if (static_cast<int64_t>(types.size()) != c.num_layers)
      fail("{}: field 'layer_types' has {} entries; expected one a layer, num_hidden_layers {}", config_path,
           types.size(), c.num_layers);
  }
  if (r.boolean_or("use_sliding_window", false) && r.has("sliding_window")) {
    const int64_t window = r.integer("sliding_window");
    const int64_t max_window_layers = r.integer_or("max_window_layers", 28);
    for (int64_t i = 0; i < c.num_layers; ++i)
      if (typed ? types[static_cast<size_t>(i)] == "sliding_attention" : i >= max_window_layers)
        fail("{}: layer {} attends through a sliding window of {} (use_sliding_window true); sliding windows are "
             "not supported", config_path, i, window);
  }
  c.max_position_embeddings = r.integer_or("max_position_embeddings", 40960);
  c.tie_word_embeddings = r.boolean_or("tie_word_embeddings", false);
  c.checkpoint_dtype = r.string_or("torch_dtype", r.string_or("dtype", "float32"));
  c.eos_token_ids = r.integer_list("eos_token_id");
  if (r.boolean_or("attention_bias", false)) fail("{}: attention_bias true is not a Qwen3 configuration", config_path);
  std::string act = r.string_or("hidden_act", "silu");
  if (act != "silu") fail("{}: hidden_act '{}' is not supported (expected 'silu')", config_path, act);
  if (c.num_heads % c.num_kv_heads != 0)
    fail("{}: num_attention_heads {} is not a multiple of num_key_value_heads {}", config_path, c.num_heads, c.num_kv_heads);
  if (c.head_dim % 2 != 0) fail("{}: head_dim {} must be even for RoPE", config_path, c.head_dim);
  // !(x > 0) also catches NaN: a non-positive epsilon or RoPE base gives NaN activations, not an error
  if (!(c.rms_norm_eps > 0) || !std::isfinite(c.rms_norm_eps))
    fail("{}: field 'rms_norm_eps' must be a positive number, found {}", config_path, c.rms_norm_eps);
  if (!(c.rope_theta > 0) || !std::isfinite(c.rope_theta))
    fail("{}: field 'rope_theta' must be a positive number, found {}", config_path, c.rope_theta);
  if (c.max_position_embeddings <= 0)
    fail("{}: field 'max_position_embeddings' must be positive, found {}", config_path, c.max_position_embeddings);
  // the RoPE tables are built for every position at load (a KiB a position at head_dim 128), and float32 positions
  // past 2^24 are no longer exact: 2^22 bounds the tables at 4 GiB (Qwen3 checkpoints state 32768 to 262144)
  if (c.max_position_embeddings > kMaxPositions)
    fail("{}: field 'max_position_embeddings' is {}, more than the {} positions specpress builds its RoPE tables for",
         config_path, c.max_position_embeddings, kMaxPositions);
  for (int64_t id : c.eos_token_ids)
    if (id < 0 || id >= c.vocab_size)
      fail("{}: field 'eos_token_id': {} is outside the vocabulary 0..{}", config_path, id, c.vocab_size - 1);
  return c;
}

DecoderLayerWeights load_decoder_layer(io::TensorStore& store, const std::string& prefix, const Qwen3Config& c,
                                       at::ScalarType dtype, at::Device device) {
  const int64_t H = c.hidden_size, hd = c.head_dim, q_out = c.num_heads * hd, kv_out = c.num_kv_heads * hd;
  auto take = [&](const std::string& name, std::vector<int64_t> shape) {
    return store.take(prefix + name, shape, dtype, device);
  };
  DecoderLayerWeights w;
  w.input_norm = take("input_layernorm.weight", {H});
  w.q_proj = take("self_attn.q_proj.weight", {q_out, H});
  w.k_proj = take("self_attn.k_proj.weight", {kv_out, H});
  w.v_proj = take("self_attn.v_proj.weight", {kv_out, H});
  w.o_proj = take("self_attn.o_proj.weight", {H, q_out});
  w.q_norm = take("self_attn.q_norm.weight", {hd});
  w.k_norm = take("self_attn.k_norm.weight", {hd});
  w.post_norm = take("post_attention_layernorm.weight", {H});
  w.gate_proj = take("mlp.gate_proj.weight", {c.intermediate_size, H});
  w.up_proj = take("mlp.up_proj.weight", {c.intermediate_size, H});
  w.down_proj = take("mlp.down_proj.weight", {H, c.intermediate_size});
  return w;
}

int64_t KVCache::slot_of(int64_t position) const {
  if (slot_positions.empty()) return std::min(position, length);
  return std::lower_bound(slot_positions.begin(), slot_positions.begin() + length, position) - slot_positions.begin();
}

void KVCache::rollback(int64_t position) {
  if (position < 0 || position > next_position())
    fail("KV cache rollback to {} outside the committed range 0..{}", position, next_position());
  length = slot_of(position);
  if (received_mass.defined() && last_rows_mass.defined()) {
    const int64_t rows = last_rows_mass.size(2), first = std::clamp<int64_t>(position - last_rows_position, 0, rows);
    if (first < rows)
      received_mass.narrow(2, 0, last_rows_mass.size(3)).sub_(last_rows_mass.narrow(2, first, rows - first).sum(2));
    last_rows_mass = at::Tensor();
  }
}

KVCache make_kv_cache(int64_t num_layers, int64_t num_kv_heads, int64_t head_dim, int64_t capacity, at::ScalarType dtype,
                      at::Device device) {
  auto opts = at::TensorOptions().dtype(dtype).device(device);
  KVCache cache;
  cache.k = at::zeros({num_layers, num_kv_heads, capacity, head_dim}, opts);
  cache.v = at::zeros({num_layers, num_kv_heads, capacity, head_dim}, opts);
  return cache;
}

Qwen3Model Qwen3Model::load(const std::string& dir, at::ScalarType dtype, at::Device device) {
  const std::string config_path = config_path_in(dir, "an HF model directory");
  Qwen3Config c = parse_qwen3_config(config_path);
  io::TensorStore store = io::TensorStore::open_dir(dir);
  Qwen3Weights w;
  w.embed_tokens = store.take("model.embed_tokens.weight", {c.vocab_size, c.hidden_size}, dtype, device);
  for (int64_t i = 0; i < c.num_layers; ++i)
    w.layers.push_back(load_decoder_layer(store, fmt::format("model.layers.{}.", i), c, dtype, device));
  w.final_norm = store.take("model.norm.weight", {c.hidden_size}, dtype, device);
  if (c.tie_word_embeddings) {
    if (store.has("lm_head.weight")) {
      // Some exports store the tied head anyway; it must then equal the embedding.
      at::Tensor head = store.take("lm_head.weight", {c.vocab_size, c.hidden_size}, dtype, device);
      if (!at::equal(head, w.embed_tokens))
        fail("{}: tie_word_embeddings is true but lm_head.weight differs from model.embed_tokens.weight", dir);
    }
    w.lm_head = w.embed_tokens;
  } else {
    w.lm_head = store.take("lm_head.weight", {c.vocab_size, c.hidden_size}, dtype, device);
  }
  store.check_all_taken();
  return Qwen3Model(std::move(c), std::move(w), dtype, device);
}

Qwen3Model::Qwen3Model(Qwen3Config config, Qwen3Weights weights, at::ScalarType dtype, at::Device device)
    : config_(std::move(config)), weights_(std::move(weights)), dtype_(dtype), device_(device) {
  rope_ = ops::make_rope_table(config_.head_dim, config_.rope_theta, config_.max_position_embeddings, device_);
}

KVCache Qwen3Model::make_cache(int64_t capacity, int64_t extra_slots) const {
  if (capacity > config_.max_position_embeddings)
    fail("context of {} positions exceeds the model's max_position_embeddings {}", capacity,
         config_.max_position_embeddings);
  return make_kv_cache(config_.num_layers, config_.num_kv_heads, config_.head_dim, capacity + extra_slots, dtype_, device_);
}

at::Tensor Qwen3Model::embed(const at::Tensor& ids) const { return at::embedding(weights_.embed_tokens, ids); }

at::Tensor Qwen3Model::lm_head_logits(const at::Tensor& normed_hidden) const {
  return at::linear(normed_hidden, weights_.lm_head).to(at::kFloat);
}

ForwardOutput Qwen3Model::forward(const at::Tensor& ids, int64_t start, KVCache& cache,
                                  const ForwardOptions& options) const {
  const Qwen3Config& c = config_;
  const int64_t T = ids.size(0), hd = c.head_dim;
  if (start < 0 || start > cache.next_position())
    fail("forward at start {} but the KV cache holds {} committed positions", start, cache.next_position());
  const int64_t slot = cache.slot_of(start);  // == start unless the cache was compressed
  const LatentRows* latents = options.latents != nullptr && options.latents->count() > 0 ? options.latents : nullptr;
  const int64_t n_lat = latents != nullptr ? latents->count() : 0, R = T + n_lat;
  if (slot + R > cache.capacity())
    fail("forward of {} tokens{} at {} exceeds the KV cache capacity {}", T,
         n_lat > 0 ? fmt::format(" + {} fused latents", n_lat) : std::string(), start, cache.capacity());
  if (latents != nullptr && cache.slot_positions.empty())
    fail("internal: fused latents need a cache with slot positions (a compressing observer)");
  for (int64_t layer : options.tap_layers)
    if (layer < 0 || layer >= c.num_layers) fail("tap layer {} outside the target's 0..{}", layer, c.num_layers - 1);

  at::Tensor positions = at::arange(start, start + T, at::TensorOptions().dtype(at::kLong).device(device_));
  at::Tensor x = embed(ids);  // [T, H]
  ops::AttentionExtras mask_extras;  // a fused-latent forward's visibility mask (see LatentRows)
  if (latents != nullptr) {
    if (latents->embeds.dim() != 2 || latents->embeds.size(0) != n_lat || latents->embeds.size(1) != c.hidden_size)
      fail("internal: fused latents need embeds [{}, {}]", n_lat, c.hidden_size);
    positions = at::cat({positions, at::tensor(latents->positions, at::kLong).to(device_)});
    x = at::cat({x, latents->embeds.to(x.scalar_type())});
    at::Tensor allowed = at::ones({R, slot + R}, at::TensorOptions().dtype(at::kBool));
    allowed.narrow(0, 0, T).narrow(1, slot, R).copy_(at::ones({T, R}, at::kBool).tril(0));  // tokens: causal, all latents
    allowed.narrow(0, 0, T).narrow(1, slot + T, n_lat).fill_(true);
    for (const auto& [b, e] : latents->hidden_slots) {
      if (b < 0 || e > slot || b >= e) fail("internal: hidden slot range {}..{} outside the cached 0..{}", b, e, slot);
      allowed.narrow(0, 0, T).narrow(1, b, e - b).fill_(false);
    }
    allowed.narrow(0, T, n_lat).narrow(1, slot, T).fill_(false);  // latents precede the tokens in time
    allowed.narrow(0, T, n_lat).narrow(1, slot + T, n_lat).copy_(at::ones({n_lat, n_lat}, at::kBool).tril(0));
    mask_extras.allowed = allowed.to(device_);
  }
  ForwardOutput out;
  if (options.keep_hidden_states) out.hidden_states.push_back(x.narrow(0, 0, T));
  std::vector<at::Tensor> taps(options.tap_layers.size());
  cache.last_rows_mass = at::Tensor();  // each token row's share, for a rollback that drops rows (see KVCache)
  if (cache.received_mass.defined() && options.may_roll_back && T > 1) {
    cache.last_rows_mass = at::empty({c.num_layers, c.num_kv_heads, T, slot + R}, cache.received_mass.options());
    cache.last_rows_position = start;
  }

  for (int64_t l = 0; l < c.num_layers; ++l) {
    const DecoderLayerWeights& w = weights_.layers[l];
    at::Tensor h = ops::rms_norm(x, w.input_norm, c.rms_norm_eps);
    at::Tensor q = ops::rms_norm(at::linear(h, w.q_proj).view({R, c.num_heads, hd}), w.q_norm, c.rms_norm_eps).transpose(0, 1);
    at::Tensor k = ops::rms_norm(at::linear(h, w.k_proj).view({R, c.num_kv_heads, hd}), w.k_norm, c.rms_norm_eps).transpose(0, 1);
    at::Tensor v = at::linear(h, w.v_proj).view({R, c.num_kv_heads, hd}).transpose(0, 1);
    q = ops::apply_rope(q, rope_, positions);
    k = ops::apply_rope(k, rope_, positions);
    at::Tensor k_cache = cache.k[l], v_cache = cache.v[l];  // [n_kv, capacity, hd]
    k_cache.narrow(1, slot, R).copy_(k);
    v_cache.narrow(1, slot, R).copy_(v);
    ops::AttentionExtras extras = mask_extras;
    if (cache.key_bias.defined()) {
      cache.key_bias[l].narrow(1, slot, R).zero_();  // fresh tokens carry no bias
      extras.key_bias = cache.key_bias[l].narrow(1, 0, slot + R);
    }
    if (cache.received_mass.defined()) {
      cache.received_mass[l].narrow(1, slot, R).zero_();
      extras.received_mass = cache.received_mass[l].narrow(1, 0, slot + R);
      if (cache.last_rows_mass.defined()) extras.received_mass_by_row = cache.last_rows_mass[l];
    }
    at::Tensor attn = ops::attention(q, k_cache.narrow(1, 0, slot + R), v_cache.narrow(1, 0, slot + R),
                                     ops::AttentionMask::kCausalBottomRight, &extras);
    x = x + at::linear(attn, w.o_proj);
    x = x + ops::swiglu_mlp(ops::rms_norm(x, w.post_norm, c.rms_norm_eps), w.gate_proj, w.up_proj, w.down_proj);
    for (size_t i = 0; i < options.tap_layers.size(); ++i)
      if (options.tap_layers[i] == l) taps[i] = x.narrow(0, 0, T);
    if (options.keep_hidden_states && l + 1 < c.num_layers) out.hidden_states.push_back(x.narrow(0, 0, T));
  }
  cache.length = slot + R;
  if (!cache.slot_positions.empty())
    for (int64_t i = 0; i < R; ++i) cache.slot_positions[slot + i] = i < T ? start + i : latents->positions[i - T];
  if (latents != nullptr) x = x.narrow(0, 0, T);

  at::Tensor rows = options.all_logits ? x : x.narrow(0, T - 1, 1);
  at::Tensor normed = ops::rms_norm(rows, weights_.final_norm, c.rms_norm_eps);
  if (options.keep_hidden_states)
    out.hidden_states.push_back(options.all_logits ? normed : ops::rms_norm(x, weights_.final_norm, c.rms_norm_eps));
  out.logits = lm_head_logits(normed);
  if (!taps.empty()) out.taps = at::cat(taps, -1);
  return out;
}

at::ScalarType parse_compute_dtype(const std::string& name, at::Device device, const std::string& flag) {
  if (name == "auto") return device.is_cuda() ? at::kBFloat16 : at::kFloat;
  if (name == "f32" || name == "float32") return at::kFloat;
  if (name == "bf16" || name == "bfloat16") return at::kBFloat16;
  if (name == "f16" || name == "float16") return at::kHalf;
  fail("{}: unknown dtype '{}' (expected auto, f32, bf16 or f16)", flag, name);
}

std::string compute_dtype_name(at::ScalarType dtype) {
  return dtype == at::kFloat ? "f32" : dtype == at::kBFloat16 ? "bf16" : dtype == at::kHalf ? "f16" : "other";
}

void check_dtype_on_device(at::ScalarType dtype, at::Device device, const std::string& flag) {
  if (dtype == at::kHalf && device.is_cpu() && !compat::kCpuHalfMatmul)
    fail("{} f16: this LibTorch ({}) has no float16 matrix product on the CPU; use f32 or bf16 with --device cpu (or "
         "f16 with --device cuda)",
         flag, TORCH_VERSION);
}

at::Device parse_device(const std::string& name, const std::string& flag) {
  if (name == "auto") return at::hasCUDA() ? at::Device(at::kCUDA) : at::Device(at::kCPU);
  if (name == "cpu") return at::Device(at::kCPU);
  if (name == "cuda" || name.rfind("cuda:", 0) == 0) {
    if (!at::hasCUDA()) fail("{}: '{}' requested but this build or machine has no CUDA", flag, name);
    return at::Device(name);
  }
  fail("{}: unknown device '{}' (expected auto, cpu, cuda or cuda:N)", flag, name);
}

}  // namespace specpress::model
