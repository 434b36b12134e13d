// beacon.cpp — the beacon compressor's weights, forward, checkpoint and the --compress resolver (see beacon.h).
#include "compress/beacon.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <filesystem>

#include "core/error.h"
#include "io/checkpoint.h"
#include "io/mapped_file.h"
#include "model/config_json.h"

namespace specpress::compress {
namespace fs = std::filesystem;

namespace {

constexpr const char* kConfigFile = "compressor.json";
constexpr const char* kWeightsFile = "compressor.safetensors";

struct Field {
  const char* name;
  at::Tensor BeaconWeights::*member;
};
constexpr Field kFields[] = {
    {"proj_in.weight", &BeaconWeights::proj_in},       {"pool_query", &BeaconWeights::pool_query},
    {"mlp_in.weight", &BeaconWeights::mlp_in},         {"mlp_in.bias", &BeaconWeights::mlp_in_bias},
    {"length_embed.weight", &BeaconWeights::length_embed}, {"mlp_out.weight", &BeaconWeights::mlp_out},
    {"base", &BeaconWeights::base},                    {"gate", &BeaconWeights::gate},
};

std::vector<int64_t> expected_shape(const BeaconConfig& c, const std::string& name) {
  const int64_t W = c.width, H = c.target_hidden;
  if (name == "proj_in.weight") return {W, c.feature_dim()};
  if (name == "pool_query") return {W};
  if (name == "mlp_in.weight") return {W, 2 * W};
  if (name == "mlp_in.bias") return {W};
  if (name == "length_embed.weight") return {c.max_span, W};
  if (name == "mlp_out.weight") return {H, W};
  if (name == "base") return {H};
  return {1};  // gate
}

// x [..., D] viewed as n_layers chunks of H, each scaled to unit RMS (hidden states of different
// depths differ in scale by orders of magnitude).
at::Tensor normalize_per_layer(const at::Tensor& x, int64_t n_layers, int64_t H) {
  std::vector<int64_t> split = x.sizes().vec();
  split.back() = n_layers;
  split.push_back(H);
  at::Tensor v = x.reshape(split);
  v = v * at::rsqrt(v.pow(2).mean(-1, /*keepdim=*/true) + 1e-6);
  return v.reshape(x.sizes());
}

}  // namespace

BeaconWeights init_beacon_weights(const BeaconConfig& c, uint64_t seed) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  auto normal = [&](std::vector<int64_t> shape, double std) { return at::empty(shape, at::kFloat).normal_(0.0, std, gen); };
  const double W = static_cast<double>(c.width);
  BeaconWeights w;
  w.proj_in = normal({c.width, c.feature_dim()}, 1.0 / std::sqrt(static_cast<double>(c.feature_dim())));
  w.pool_query = at::zeros({c.width}, at::kFloat);  // uniform attention pooling at the start
  w.mlp_in = normal({c.width, 2 * c.width}, 1.0 / std::sqrt(2 * W));
  w.mlp_in_bias = at::zeros({c.width}, at::kFloat);
  w.length_embed = normal({c.max_span, c.width}, 0.02);
  w.mlp_out = normal({c.target_hidden, c.width}, 1.0 / std::sqrt(W));
  w.base = at::zeros({c.target_hidden}, at::kFloat);
  w.gate = at::full({1}, 0.1, at::kFloat);
  return w;
}

std::vector<std::pair<std::string, at::Tensor>> beacon_named(const BeaconWeights& w) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const Field& f : kFields) out.emplace_back(f.name, w.*f.member);
  return out;
}

BeaconWeights beacon_from_named(const std::vector<std::pair<std::string, at::Tensor>>& named) {
  BeaconWeights w;
  for (const Field& f : kFields) {
    bool found = false;
    for (const auto& [name, t] : named)
      if (name == f.name) {
        w.*f.member = t;
        found = true;
      }
    if (!found) fail("internal: beacon weights lack '{}'", f.name);
  }
  return w;
}

at::Tensor beacon_embed(const BeaconConfig& c, const BeaconWeights& w, const at::Tensor& features,
                        const at::Tensor& token_embeds, const at::Tensor& lengths) {
  if (features.dim() != 3 || features.size(2) != c.feature_dim())
    fail("internal: beacon features must be [E, n, {}], found {} dims", c.feature_dim(), features.dim());
  const int64_t n_max = features.size(1);
  const at::ScalarType dtype = w.proj_in.scalar_type();
  at::Tensor valid = at::arange(n_max, lengths.options()).unsqueeze(0).lt(lengths.unsqueeze(1));  // [E, n]
  at::Tensor valid_f = valid.to(dtype).unsqueeze(-1);
  at::Tensor counts = lengths.to(dtype).unsqueeze(-1);                                         // [E, 1]
  at::Tensor z = at::linear(normalize_per_layer(features.to(dtype), static_cast<int64_t>(c.feature_layers.size()),
                                                c.target_hidden),
                            w.proj_in);                                                         // [E, n, W]
  at::Tensor scores = at::matmul(z, w.pool_query) / std::sqrt(static_cast<double>(c.width));    // [E, n]
  scores = scores.masked_fill(valid.logical_not(), -std::numeric_limits<double>::infinity());
  at::Tensor attn_pool = (at::softmax(scores, -1).unsqueeze(-1) * z).sum(1);                    // [E, W]
  at::Tensor mean_pool = (z * valid_f).sum(1) / counts;
  at::Tensor length_row = (lengths - 1).clamp(0, c.max_span - 1);
  at::Tensor u = at::silu(at::linear(at::cat({attn_pool, mean_pool}, -1), w.mlp_in, w.mlp_in_bias) +
                          at::embedding(w.length_embed, length_row));
  at::Tensor mean_tok = (token_embeds.to(dtype) * valid_f).sum(1) / counts;                    // [E, H]
  at::Tensor e = mean_tok + c.embed_rms * (w.base + w.gate * at::linear(u, w.mlp_out));
  return e * (c.embed_rms * at::rsqrt(e.pow(2).mean(-1, /*keepdim=*/true) + 1e-12));
}

at::Tensor beacon_embed_rows(const BeaconConfig& config, const BeaconWeights& weights, const model::Qwen3Model& target,
                             const at::Tensor& feature_rows, const at::Tensor& ids, const at::Tensor& unit_rows,
                             const at::Tensor& lengths) {
  const at::Tensor flat = unit_rows.reshape({-1});
  const std::vector<int64_t> shape = unit_rows.sizes().vec();
  at::Tensor features = feature_rows.index_select(0, flat).view({shape[0], shape[1], feature_rows.size(1)});
  at::Tensor token_embeds = target.embed(ids.index_select(0, flat).view(shape));
  return beacon_embed(config, weights, features, token_embeds, lengths);
}

nlohmann::ordered_json beacon_config_json(const BeaconConfig& c) {
  return {{"compressor_type", "beacon"},
          {"feature_layers", c.feature_layers},
          {"target_hidden_size", c.target_hidden},
          {"target_num_layers", c.target_layers},
          {"target_vocab_size", c.target_vocab},
          {"width", c.width},
          {"max_span", c.max_span},
          {"embed_rms", c.embed_rms},
          {"policy", policy_knobs_json(c.policy)}};
}

double embedding_rms(const at::Tensor& embed_tokens) {
  return std::sqrt(embed_tokens.to(at::kFloat).pow(2).mean().item<double>());
}

std::shared_ptr<const BeaconCompressor> BeaconCompressor::load(const std::string& dir, const model::Qwen3Model& target) {
  const std::string config_path = (fs::path(dir) / kConfigFile).string();
  const std::string weights_path = (fs::path(dir) / kWeightsFile).string();
  if (!fs::is_directory(dir)) fail("{}: not a directory (expected a compressor written by specpress train-compressor)", dir);
  if (!fs::exists(config_path)) fail("{}: no {} (expected a compressor written by specpress train-compressor)", dir, kConfigFile);
  if (!fs::exists(weights_path)) fail("{}: no {} next to {}", dir, kWeightsFile, kConfigFile);
  nlohmann::json j = model::ConfigReader::parse_file(config_path);
  model::ConfigReader r{j, config_path};
  const std::string type = r.string_or("compressor_type", "");
  if (type != "beacon") fail("{}: field 'compressor_type' must be \"beacon\", found \"{}\"", config_path, type);
  const model::Qwen3Config& tc = target.config();
  BeaconConfig c;
  c.feature_layers = r.integer_list("feature_layers");
  c.target_hidden = r.integer("target_hidden_size");
  c.target_layers = r.integer("target_num_layers");
  c.target_vocab = r.integer("target_vocab_size");
  c.width = r.integer("width");
  c.max_span = r.integer("max_span");
  c.embed_rms = r.number("embed_rms");
  if (c.feature_layers.empty()) fail("{}: field 'feature_layers' must list at least one target layer", config_path);
  for (int64_t l : c.feature_layers)
    if (l < 0 || l >= tc.num_layers)
      fail("{}: field 'feature_layers' names layer {}, but the target has layers 0..{}", config_path, l, tc.num_layers - 1);
  if (c.target_hidden != tc.hidden_size || c.target_layers != tc.num_layers || c.target_vocab != tc.vocab_size)
    fail("{}: trained for a target with hidden {}, {} layers, vocab {}; this target has hidden {}, {} layers, vocab {}",
         config_path, c.target_hidden, c.target_layers, c.target_vocab, tc.hidden_size, tc.num_layers, tc.vocab_size);
  if (c.width < 1) fail("{}: field 'width' must be positive, found {}", config_path, c.width);
  if (c.max_span < 1) fail("{}: field 'max_span' must be positive, found {}", config_path, c.max_span);
  if (!(c.embed_rms > 0) || !std::isfinite(c.embed_rms))
    fail("{}: field 'embed_rms' must be a positive number, found {}", config_path, c.embed_rms);
  if (j.contains("policy")) {
    if (!j["policy"].is_object()) fail("{}: field 'policy' must be an object", config_path);
    model::ConfigReader p{j["policy"], config_path + " (policy)"};
    c.policy.window = p.integer_or("window", c.policy.window);
    c.policy.sinks = p.integer_or("sinks", c.policy.sinks);
    c.policy.merge_tokens = p.integer_or("merge_tokens", c.policy.merge_tokens);
  }
  io::TensorStore store = io::TensorStore::open_file(weights_path);
  std::vector<std::pair<std::string, at::Tensor>> named;
  for (const Field& f : kFields) {
    if (!store.has(f.name)) fail("{}: tensor '{}' is missing", weights_path, f.name);
    at::Tensor t = store.take(f.name, expected_shape(c, f.name), at::kFloat, target.device());
    if (!at::isfinite(t).all().item<bool>()) fail("{}: tensor '{}' holds NaN or infinite values", weights_path, f.name);
    named.emplace_back(f.name, t);
  }
  store.check_all_taken();
  return std::make_shared<const BeaconCompressor>(std::move(c), beacon_from_named(named));
}

void save_beacon(const std::string& dir, const BeaconConfig& config, const BeaconWeights& weights,
                 at::ScalarType dtype) {
  fs::create_directories(dir);
  std::vector<std::pair<std::string, at::Tensor>> cpu;
  for (const auto& [name, t] : beacon_named(weights))
    cpu.emplace_back(name, t.detach().to(at::kCPU, dtype).contiguous());
  io::save_safetensors((fs::path(dir) / kWeightsFile).string(), cpu, {{"format", "pt"}});
  io::write_file_atomic((fs::path(dir) / kConfigFile).string(), beacon_config_json(config).dump(2) + "\n");
}

namespace {
// A value that is no method name is a compressor directory where it looks like a path; else an unknown method.
bool names_a_path(const std::string& value) {
  return !is_method_name(value) && (value.find('/') != std::string::npos || fs::exists(value));
}
void check_path_exists(const std::string& value, const std::string& flag) {
  if (!fs::exists(value)) fail("{}: {} does not exist (expected a method name or a compressor directory)", flag, value);
}
}  // namespace

void check_compress_flags(const std::string& value, const std::string& flag, Policy policy) {
  if (names_a_path(value)) {
    check_path_exists(value, flag);
    // its checkpoint is read with the model; the knobs given are checked as any method's
    policy.method = Method::kDrop;
  } else {
    policy.method = parse_method(value, flag);
  }
  policy.beacon = nullptr;
  validate(policy);
}

Policy resolve_compress(const std::string& value, const std::string& flag, Policy policy, const model::Qwen3Model& target) {
  if (!names_a_path(value)) {
    policy.method = parse_method(value, flag);
    return policy;
  }
  check_path_exists(value, flag);
  policy.beacon = BeaconCompressor::load(value, target);
  policy.method = Method::kBeacon;
  policy.beacon_dir = value;
  const Policy& trained = policy.beacon->config().policy;
  if (!policy.given.window) policy.window = trained.window;
  if (!policy.given.sinks) policy.sinks = trained.sinks;
  if (!policy.given.merge_tokens) policy.merge_tokens = trained.merge_tokens;
  if (trained.window != policy.window || trained.merge_tokens != policy.merge_tokens || trained.sinks != policy.sinks)
    std::fprintf(stderr,
                 "note: %s was trained with window %lld, sinks %lld, merge %lld; running with window %lld, sinks %lld, "
                 "merge %lld (the flags given override the trained values)\n",
                 value.c_str(), static_cast<long long>(trained.window), static_cast<long long>(trained.sinks),
                 static_cast<long long>(trained.merge_tokens), static_cast<long long>(policy.window),
                 static_cast<long long>(policy.sinks), static_cast<long long>(policy.merge_tokens));
  return policy;
}

}  // namespace specpress::compress
