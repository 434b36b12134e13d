// dflash_draft.cpp — DFlash draft loading, validation and reference forward (see dflash_draft.h).
#include "model/dflash_draft.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "io/checkpoint.h"
#include "model/config_json.h"
#include "ops/attention.h"
#include "ops/rmsnorm.h"
#include "ops/swiglu.h"

namespace specpress::model {

std::vector<int64_t> default_target_layer_ids(int64_t num_target_layers, int64_t num_draft_layers) {
  if (num_draft_layers == 1) return {num_target_layers / 2};
  std::vector<int64_t> ids;
  const int64_t start = 1, end = num_target_layers - 3, span = end - start;
  for (int64_t i = 0; i < num_draft_layers; ++i)
    ids.push_back(static_cast<int64_t>(std::nearbyint(start + static_cast<double>(i) * span / (num_draft_layers - 1))));
  return ids;
}

DFlashConfig parse_dflash_config(const std::string& config_path) {
  DFlashConfig c;
  c.arch = parse_qwen3_config(config_path, /*architecture=*/nullptr);
  nlohmann::json j = ConfigReader::parse_file(config_path);
  ConfigReader r{j, config_path};
  if (!r.has("block_size") && r.has("architectures") && j["architectures"].is_array())
    for (const auto& name : j["architectures"])  // a target's config where the draft's belongs: -m and -md swapped
      if (name.is_string() && name.get<std::string>().find("ForCausalLM") != std::string::npos)
        fail("{}: architectures {} is a target's config, not a DFlash draft's (no block_size): the draft is given "
             "with -md (the trainers' --draft), its Qwen3 target with -m (--target)",
             config_path, j["architectures"].dump());
  c.block_size = r.integer("block_size");
  c.num_target_layers = r.integer("num_target_layers");
  if (c.block_size < 2) fail("{}: block_size {} must be at least 2", config_path, c.block_size);
  // The tapped layers: dflash_config's list, else a top-level one (oldest z-lab configs), else the reference's
  // default formula; a list given empty is refused (the reference would tap no layer), not replaced by the formula.
  std::vector<int64_t> ids;
  std::string ids_field;
  if (r.has("dflash_config")) {
    if (!j["dflash_config"].is_object()) fail("{}: field 'dflash_config' must be an object", config_path);
    ConfigReader d{j["dflash_config"], config_path + ": dflash_config"};
    if (d.has("target_layer_ids")) {
      ids = d.integer_list("target_layer_ids");
      ids_field = "dflash_config.target_layer_ids";
    }
    c.mask_token_id = d.integer("mask_token_id");
    // Other DFlash checkpoints configure causal or sliding-window draft layers here (dflash-spec.md, section 6.1);
    // specpress's draft attends to the whole context and block, non-causally, as the Qwen3 drafts do.
    if (d.boolean_or("causal", false))
      fail("{}: dflash_config.causal is true; specpress runs DFlash drafts with non-causal attention only (the Qwen3 "
           "drafts' setting: false or absent)", config_path);
    if (d.boolean_or("use_swa", false))
      fail("{}: dflash_config.use_swa is true (sliding window of {}); specpress's draft layers attend to the whole "
           "context (the Qwen3 drafts' setting: false or absent)", config_path,
           d.has("swa_window_size") ? j["dflash_config"]["swa_window_size"].dump().substr(0, 40) : "unset");
  } else {
    // Oldest z-lab configs kept the mask id at the top level.
    c.mask_token_id = r.integer("mask_token_id");
  }
  if (ids_field.empty() && r.has("target_layer_ids")) {
    ids = r.integer_list("target_layer_ids");
    ids_field = "target_layer_ids";
  }
  if (ids_field.empty()) {
    // the reference's formula spreads one tap a draft layer over the target's layers: more draft layers than target
    // layers is no DFlash draft (and a count such as 2^62 would be allocated for)
    if (c.arch.num_layers > c.num_target_layers)
      fail("{}: no target_layer_ids, and the default formula's one tap a draft layer cannot spread {} draft layers "
           "(num_hidden_layers) over num_target_layers {}", config_path, c.arch.num_layers, c.num_target_layers);
    ids = default_target_layer_ids(c.num_target_layers, c.arch.num_layers);
  }
  if (ids.empty())
    fail("{}: field '{}' is empty; it must list the target layers the draft taps", config_path, ids_field);
  c.target_layer_ids = ids;
  return c;
}

DFlashConfig draft_config_for(const std::string& dir, const Qwen3Config& t) {
  const std::string config_path = config_path_in(dir, "a DFlash draft directory");
  DFlashConfig c = parse_dflash_config(config_path);
  if (c.arch.hidden_size != t.hidden_size)
    fail("{}: draft hidden_size {} does not match the target's {}", config_path, c.arch.hidden_size, t.hidden_size);
  if (c.arch.vocab_size != t.vocab_size)
    fail("{}: draft vocab_size {} does not match the target's {}", config_path, c.arch.vocab_size, t.vocab_size);
  if (c.mask_token_id < 0 || c.mask_token_id >= t.vocab_size)
    fail("{}: dflash_config.mask_token_id {} is outside the target embedding (0..{})", config_path, c.mask_token_id,
         t.vocab_size - 1);
  if (c.num_target_layers != t.num_layers)
    fail("{}: num_target_layers {} does not match the target's num_hidden_layers {}", config_path, c.num_target_layers,
         t.num_layers);
  for (int64_t id : c.target_layer_ids)
    if (id < 0 || id >= t.num_layers)
      fail("{}: dflash_config.target_layer_ids entry {} is outside the target's layers 0..{}", config_path, id,
           t.num_layers - 1);
  // The draft's blocks sit at the target's positions, wherever the target can go: the reference computes the draft's
  // rotations for any position (its max_position_embeddings names a trained length, not a table's), so a draft that
  // states fewer positions than its target runs to the target's, not failing midway through a generation.
  c.arch.max_position_embeddings = std::max(c.arch.max_position_embeddings, t.max_position_embeddings);
  return c;
}

DFlashConfig draft_config_for_dirs(const std::string& draft_dir, const std::string& target_dir) {
  return draft_config_for(draft_dir, parse_qwen3_config(config_path_in(target_dir, "an HF model directory")));
}

DFlashDraft DFlashDraft::load(const std::string& dir, const Qwen3Model& target, at::ScalarType dtype,
                              at::Device device) {
  const DFlashConfig c = draft_config_for(dir, target.config());
  io::TensorStore store = io::TensorStore::open_dir(dir);
  const int64_t H = c.arch.hidden_size;
  DFlashWeights w;
  w.fc = store.take("fc.weight", {H, static_cast<int64_t>(c.target_layer_ids.size()) * H}, dtype, device);
  w.hidden_norm = store.take("hidden_norm.weight", {H}, dtype, device);
  w.final_norm = store.take("norm.weight", {H}, dtype, device);
  for (int64_t i = 0; i < c.arch.num_layers; ++i)
    w.layers.push_back(load_decoder_layer(store, fmt::format("layers.{}.", i), c.arch, dtype, device));
  store.check_all_taken();
  if (dtype != target.dtype() || device != target.device())
    fail("{}: draft must be loaded with the target's dtype and device", dir);
  return DFlashDraft(std::move(c), std::move(w), target);
}

DFlashDraft::DFlashDraft(DFlashConfig config, DFlashWeights weights, const Qwen3Model& target)
    : config_(std::move(config)), weights_(std::move(weights)), target_(&target) {
  // the target's own table where the rotations are the same (the Qwen3 drafts': head_dim and theta equal, positions
  // the target's, draft_config_for): shared, not built again (a 262144-position target's table is 256 MiB)
  const Qwen3Config& a = config_.arch;
  const Qwen3Config& t = target.config();
  rope_ = a.head_dim == t.head_dim && a.rope_theta == t.rope_theta &&
                  a.max_position_embeddings <= t.max_position_embeddings
              ? target.rope()
              : ops::make_rope_table(a.head_dim, a.rope_theta, a.max_position_embeddings, target.device());
}

DraftCache DFlashDraft::make_cache(int64_t capacity) const {
  const Qwen3Config& a = config_.arch;
  return make_kv_cache(a.num_layers, a.num_kv_heads, a.head_dim, capacity, target_->dtype(), target_->device());
}

at::Tensor DFlashDraft::forward(const at::Tensor& ctx_features, const at::Tensor& block_ids, DraftCache& cache) const {
  const Qwen3Config& a = config_.arch;
  const int64_t n_ctx = ctx_features.size(0), Bq = block_ids.size(0), hd = a.head_dim;
  const int64_t cache_len = cache.length, start = cache_len + n_ctx;
  if (start + Bq > rope_.max_positions())
    fail("draft block at {}..{} exceeds the draft's max_position_embeddings {}", start, start + Bq - 1, rope_.max_positions());
  if (start > cache.capacity()) fail("draft context of {} positions exceeds its cache capacity {}", start, cache.capacity());
  auto long_opts = at::TensorOptions().dtype(at::kLong).device(block_ids.device());
  at::Tensor ctx_pos = at::arange(cache_len, start, long_opts);
  at::Tensor blk_pos = at::arange(start, start + Bq, long_opts);

  at::Tensor ctx = ops::rms_norm(at::linear(ctx_features, weights_.fc), weights_.hidden_norm, a.rms_norm_eps);
  at::Tensor x = target_->embed(block_ids);  // [Bq, H]
  const ops::RopeTable& rope = rope_;
  for (int64_t l = 0; l < a.num_layers; ++l) {
    const DecoderLayerWeights& w = weights_.layers[l];
    at::Tensor k_cache = cache.k[l], v_cache = cache.v[l];
    if (n_ctx > 0) {  // context K/V, cached once at their absolute positions
      at::Tensor kc = ops::rms_norm(at::linear(ctx, w.k_proj).view({n_ctx, a.num_kv_heads, hd}), w.k_norm, a.rms_norm_eps).transpose(0, 1);
      at::Tensor vc = at::linear(ctx, w.v_proj).view({n_ctx, a.num_kv_heads, hd}).transpose(0, 1);
      k_cache.narrow(1, cache_len, n_ctx).copy_(ops::apply_rope(kc, rope, ctx_pos));
      v_cache.narrow(1, cache_len, n_ctx).copy_(vc);
    }
    at::Tensor h = ops::rms_norm(x, w.input_norm, a.rms_norm_eps);
    at::Tensor q = ops::rms_norm(at::linear(h, w.q_proj).view({Bq, a.num_heads, hd}), w.q_norm, a.rms_norm_eps).transpose(0, 1);
    at::Tensor kb = ops::rms_norm(at::linear(h, w.k_proj).view({Bq, a.num_kv_heads, hd}), w.k_norm, a.rms_norm_eps).transpose(0, 1);
    at::Tensor vb = at::linear(h, w.v_proj).view({Bq, a.num_kv_heads, hd}).transpose(0, 1);
    q = ops::apply_rope(q, rope, blk_pos);
    kb = ops::apply_rope(kb, rope, blk_pos);
    at::Tensor k = at::cat({k_cache.narrow(1, 0, start), kb}, 1);
    at::Tensor v = at::cat({v_cache.narrow(1, 0, start), vb}, 1);
    at::Tensor attn = ops::attention(q, k, v, ops::AttentionMask::kNone);
    x = x + at::linear(attn, w.o_proj);
    x = x + ops::swiglu_mlp(ops::rms_norm(x, w.post_norm, a.rms_norm_eps), w.gate_proj, w.up_proj, w.down_proj);
  }
  cache.length = start;
  return ops::rms_norm(x, weights_.final_norm, a.rms_norm_eps);
}

}  // namespace specpress::model
