// draft_trainer.cpp — see draft_trainer.h.
#include "train/draft_trainer.h"

#include <c10/core/GradMode.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <set>
#include <cmath>
#include <filesystem>

#include <fmt/ranges.h>

#include "core/compat.h"
#include "core/error.h"
#include "decode/generation.h"
#include "io/mapped_file.h"
#include "train/checkpoint.h"
#include "train/dflash_forward.h"
#include "train/onpolicy.h"
#include "train/sequence_forward.h"
#include "tools/progress.h"

namespace specpress::train {
namespace fs = std::filesystem;

namespace {

constexpr int64_t kQwen3MaskTokenId = 151669;  // dflash-spec.md §2.9

model::DFlashConfig draft_config(const DraftOptions& o, const model::Qwen3Config& target) {
  if (o.draft_layers < 1) fail("--draft-layers: must be at least 1, found {}", o.draft_layers);
  if (o.block_size < 2) fail("--block-size: must be at least 2, found {}", o.block_size);
  model::DFlashConfig c;
  c.arch = target;
  c.arch.num_layers = o.draft_layers;
  c.block_size = o.block_size;
  c.num_target_layers = target.num_layers;
  c.target_layer_ids = o.target_layer_ids.empty() ? model::default_target_layer_ids(target.num_layers, o.draft_layers)
                                                  : o.target_layer_ids;
  check_distinct_layers(o.target_layer_ids, "--target-layer-ids");  // the given ones (the defaults may repeat: said)
  if (o.target_layer_ids.empty() &&
      std::set<int64_t>(c.target_layer_ids.begin(), c.target_layer_ids.end()).size() < c.target_layer_ids.size())
    std::fprintf(stderr, "warning: the default taps for a %lld-layer target and %lld draft layers repeat a layer "
                 "([%s]); pass --target-layer-ids to choose distinct ones\n",
                 static_cast<long long>(target.num_layers), static_cast<long long>(o.draft_layers),
                 fmt::format("{}", fmt::join(c.target_layer_ids, ", ")).c_str());
  if (o.mask_token_id < -1)
    fail("--mask-token-id: must be a token id >= 0 (or -1: the default), found {}", o.mask_token_id);
  for (int64_t id : c.target_layer_ids)
    if (id < 0 || id >= target.num_layers)
      fail("--target-layer-ids: layer {} is not a layer of {} (it has {} layers: 0..{}){}", id, o.target_dir,
           target.num_layers, target.num_layers - 1,
           o.target_layer_ids.empty() ? "; the default taps do not fit this target, pass --target-layer-ids" : "");
  c.mask_token_id = o.mask_token_id >= 0 ? o.mask_token_id
                                         : (target.vocab_size > kQwen3MaskTokenId ? kQwen3MaskTokenId : target.vocab_size - 1);
  if (c.mask_token_id >= target.vocab_size)
    fail("--mask-token-id: {} is outside the target embedding (0..{})", c.mask_token_id, target.vocab_size - 1);
  return c;
}

// The on-policy sequences, generated once and kept in OUT/onpolicy.jsonl so a resumed run reuses them: each cached
// sequence must answer its prompt within --gen-tokens, made by the same target (its path and model_digest) on the
// same device (OUT/generations.json), else all are generated again. A run stopped by a signal during the generation
// keeps the ones done there, and the next continues after them.
std::vector<Sequence> on_policy_sequences(const DraftOptions& o, const model::Qwen3Model& target,
                                          const std::vector<std::vector<int64_t>>& prompts) {
  const std::string cache = (fs::path(o.out) / "onpolicy.jsonl").string();
  const nlohmann::json made_with = {{"target", fs::absolute(o.target_dir).lexically_normal().string()},
                                    {"target_fingerprint", model_digest(o.target_dir)},
                                    {"gen_tokens", o.gen_tokens},
                                    {"device", target.device().str()}};
  std::vector<Sequence> sequences;
  const std::optional<std::string> otherwise = cache_made_otherwise(o.out, "onpolicy.jsonl", made_with);
  if (otherwise) {
    std::fprintf(stderr, "train-draft: %s was made otherwise (%s); generating again\n", cache.c_str(),
                 otherwise->c_str());
    fs::remove(cache);  // so that a stop before the first new answer leaves no file the new record would vouch for
  } else if (fs::exists(cache)) {
    std::vector<Sequence> cached = read_documents({cache}, TextCodec{}, target.config().vocab_size);
    bool same = cached.size() <= prompts.size();
    for (size_t i = 0; same && i < cached.size(); ++i) {
      const Sequence& c = cached[i];
      const auto prompt_len = static_cast<int64_t>(prompts[i].size());
      const auto len = static_cast<int64_t>(c.ids.size());
      same = c.loss_start == prompt_len && len >= prompt_len && len <= prompt_len + o.gen_tokens &&
             std::equal(prompts[i].begin(), prompts[i].end(), c.ids.begin());
    }
    if (same && cached.size() == prompts.size()) {
      std::fprintf(stderr, "train-draft: reusing %zu on-policy generations from %s\n", cached.size(), cache.c_str());
      return cached;
    }
    if (same && !cached.empty()) {
      std::fprintf(stderr, "train-draft: reusing %zu on-policy generations from %s (a stopped run's); generating the "
                   "other %zu\n", cached.size(), cache.c_str(), prompts.size() - cached.size());
      sequences = std::move(cached);
    } else if (!same) {
      std::fprintf(stderr, "train-draft: %s answers other prompts (or more --gen-tokens); generating again\n",
                   cache.c_str());
      fs::remove(cache);
    }
  }
  const std::vector<std::vector<int64_t>> rest(prompts.begin() + static_cast<std::ptrdiff_t>(sequences.size()),
                                               prompts.end());
  record_cache(o.out, "onpolicy.jsonl", made_with);
  const Generations generated = generate_greedy(target, o.target_dir, "", rest, o.gen_tokens, "on-policy generation");
  for (const decode::GenerationResult& r : generated.results) {
    Sequence s{prompts[sequences.size()], static_cast<int64_t>(prompts[sequences.size()].size())};
    s.ids.insert(s.ids.end(), r.output_ids.begin(), r.output_ids.end());
    sequences.push_back(std::move(s));
  }
  if (!sequences.empty()) io::write_file_atomic(cache, sequences_jsonl(sequences));
  if (generated.stopped_by != 0)
    generation_interrupted("train-draft", generated.stopped_by, sequences.size(), prompts.size(), cache);
  return sequences;
}

// Whether a sequence of `len` tokens whose loss starts at `loss_start` keeps a block anchor once cut to --seq-len
// (trainable_for_draft's rule).
bool has_anchor_room(int64_t loss_start, int64_t len, int64_t seq_len) {
  return std::max<int64_t>(loss_start, 1) <= std::min(len, seq_len) - 2;
}

// Before the on-policy generation: fails where no sequence can keep an anchor within --seq-len (every on-policy
// prompt too long for it, even with all --gen-tokens, and no --data sequence that fits), and says how many prompts
// will be dropped where only some are.
void check_room_for_anchors(const std::vector<Sequence>& data, const std::vector<std::vector<int64_t>>& prompts,
                            const DraftOptions& o) {
  if (prompts.empty()) return;
  size_t no_room = 0, longest = 0, shortest = prompts.front().size();
  for (const auto& p : prompts) {
    shortest = std::min(shortest, p.size());
    no_room += has_anchor_room(static_cast<int64_t>(p.size()), static_cast<int64_t>(p.size()) + o.gen_tokens, o.seq_len)
                   ? 0 : 1;
    longest = std::max(longest, p.size());
  }
  if (no_room == 0) return;
  const bool data_fits = std::any_of(data.begin(), data.end(), [&](const Sequence& s) {
    return has_anchor_room(s.loss_start, static_cast<int64_t>(s.ids.size()), o.seq_len);
  });
  if (no_room == prompts.size() && !data_fits)
    fail("--seq-len {}: no sequence would keep a block anchor: every --on-policy-prompts prompt needs 2 generated "
         "tokens after it within --seq-len (the shortest prompt has {} tokens){}",
         o.seq_len, shortest, data.empty() ? "" : ", and no --data sequence has 2 tokens after its prompt within it");
  std::fprintf(stderr, "train-draft: %zu of %zu on-policy prompts leave no 2 tokens within --seq-len %lld and will be "
               "dropped after generation (the longest has %zu tokens)\n", no_room, prompts.size(),
               static_cast<long long>(o.seq_len), longest);
}

// Without --eval-prompts: the on-policy prompts, else the prompt parts of the data (the first tokens of
// sequences without one).
std::vector<std::vector<int64_t>> default_eval_prompts(const std::vector<std::vector<int64_t>>& on_policy_prompts,
                                                       const std::vector<Sequence>& sequences) {
  if (!on_policy_prompts.empty()) return on_policy_prompts;
  std::vector<std::vector<int64_t>> out;
  for (const Sequence& s : sequences) {
    const int64_t len = s.loss_start > 0 ? s.loss_start : std::min<int64_t>(16, static_cast<int64_t>(s.ids.size()) / 2 + 1);
    out.emplace_back(s.ids.begin(), s.ids.begin() + len);
  }
  return out;
}

}  // namespace

double default_gamma(int64_t block_size) {
  if (block_size == 16) return 7.0;
  if (block_size == 10) return 5.0;
  if (block_size == 8) return 4.0;
  return std::max(1.0, static_cast<double>(block_size - 1) / 2.0);
}

TrainSummary train_draft(const DraftOptions& o, const TextCodec& codec) {
  validate_common(o);
  keep_freed_memory();
  if (o.anchors < 1) fail("--anchors: must be at least 1, found {}", o.anchors);
  if (!(o.gamma >= 0) || !std::isfinite(o.gamma))
    fail("--gamma: must be positive (or 0 for the default), found {}", o.gamma);
  if (o.data.empty() && o.on_policy_prompts.empty()) fail("train-draft: give --data and/or --on-policy-prompts");
  if (o.eval_samples < 0) fail("--eval-samples: must be >= 0, found {}", o.eval_samples);
  if (o.eval_tokens < 1) fail("--eval-tokens: must be at least 1, found {}", o.eval_tokens);
  if (o.eval_every < 0) fail("--eval-every: must be >= 0 (0 = at the end), found {}", o.eval_every);
  if (o.block_size > o.seq_len)  // every block then runs past its sequence, and its rows there have no label
    fail("--block-size {}: more than --seq-len {} (a block's positions past the sequence train nothing)", o.block_size,
         o.seq_len);
  const at::Device device = training_device(o);
  const at::ScalarType save_dtype = parse_save_dtype(o.save_dtype);
  if (o.target_dir.empty()) fail("--target: required (the Qwen3 target directory)");
  const model::Qwen3Model target = model::Qwen3Model::load(o.target_dir, at::kFloat, device);
  const model::Qwen3Config& tc = target.config();
  const model::DFlashConfig dc = draft_config(o, tc);
  const double gamma = o.gamma > 0 ? o.gamma : default_gamma(o.block_size);
  // the last anchor is at seq_len - 2 (a label after it), and its block's last position B - 1 further on
  if (o.seq_len + o.block_size - 2 > tc.max_position_embeddings)
    fail("--seq-len {} + --block-size {}: the last block reaches position {}, past the target's "
         "max_position_embeddings {}", o.seq_len, o.block_size, o.seq_len + o.block_size - 3,
         tc.max_position_embeddings);

  // Inputs first: bad data fails before the output directory is touched.
  std::vector<Sequence> sequences = o.data.empty() ? std::vector<Sequence>{} : read_documents(o.data, codec, tc.vocab_size);
  const std::vector<std::vector<int64_t>> prompts =
      o.on_policy_prompts.empty() ? std::vector<std::vector<int64_t>>{} : read_prompts(o.on_policy_prompts, codec, tc.vocab_size);
  std::vector<std::vector<int64_t>> eval_prompts =
      o.eval_prompts.empty() ? std::vector<std::vector<int64_t>>{} : read_prompts(o.eval_prompts, codec, tc.vocab_size);
  // the generations must fit the target's positions, checked before any of them (or the training) runs
  if (!prompts.empty() && o.gen_tokens < 1) fail("--gen-tokens: must be at least 1, found {}", o.gen_tokens);
  check_generation_fits(prompts, o.gen_tokens, 1, tc.max_position_embeddings, "--gen-tokens");
  std::vector<InputPath> inputs = {{"--target", o.target_dir}};
  add_inputs(inputs, "--data", o.data);
  add_inputs(inputs, "--on-policy-prompts", o.on_policy_prompts);
  add_inputs(inputs, "--eval-prompts", o.eval_prompts);
  check_room_for_anchors(sequences, prompts, o);  // before the output directory and the generations
  const OutputDir output = prepare_output_dir(o.out, o.resume, o.force, inputs);  // locked while it lives
  const bool resume = output.resume;
  nlohmann::json run = common_run_json("train-draft", o, device);
  run["target"] = fs::absolute(o.target_dir).lexically_normal().string();
  run["draft"] = dflash_config_json(dc, "float32");
  run["gamma"] = gamma;
  run["anchors"] = o.anchors;
  run["on_policy_prompts"] = absolute_paths(o.on_policy_prompts);
  run["gen_tokens"] = o.gen_tokens;
  run["input_fingerprints"].update(input_fingerprints(o.on_policy_prompts));
  run["input_fingerprints"].update(input_fingerprints(codec.used_files()));
  run["model_fingerprints"] = model_fingerprints(o.target_dir);
  check_resume_matches(o, run, resume);  // before the on-policy generation
  if (!prompts.empty()) {
    std::vector<Sequence> generated = on_policy_sequences(o, target, prompts);
    sequences.insert(sequences.end(), generated.begin(), generated.end());
  }
  const size_t given = sequences.size();
  size_t cut = 0;
  for (const Sequence& s : sequences) cut += static_cast<int64_t>(s.ids.size()) > o.seq_len ? 1 : 0;
  sequences = trainable_for_draft(std::move(sequences), o.seq_len);
  if (sequences.empty())
    fail("train-draft: no sequence has room for a block anchor within --seq-len {} (at least 3 tokens, 2 after any "
         "prompt)", o.seq_len);
  if (cut > 0 || sequences.size() < given)
    std::fprintf(stderr, "train-draft: %zu of %zu sequences cut to --seq-len %lld; %zu dropped (no 2 tokens after the "
                 "prompt within it)\n", cut, given, static_cast<long long>(o.seq_len), given - sequences.size());
  if (eval_prompts.empty()) eval_prompts = default_eval_prompts(prompts, sequences);
  eval_prompts.resize(std::min<size_t>(eval_prompts.size(), o.eval_samples));
  check_generation_fits(eval_prompts, o.eval_tokens, o.block_size, tc.max_position_embeddings, "--eval-tokens");
  int64_t tokens = 0;
  for (const Sequence& s : sequences) tokens += static_cast<int64_t>(s.ids.size());
  std::fprintf(stderr,
               "train-draft: %zu sequences, %lld tokens; draft %lld layers, block %lld, taps [%s], mask %lld, gamma %.2f\n",
               sequences.size(), static_cast<long long>(tokens), static_cast<long long>(o.draft_layers),
               static_cast<long long>(o.block_size), fmt::format("{}", fmt::join(dc.target_layer_ids, ", ")).c_str(),
               static_cast<long long>(dc.mask_token_id), gamma);

  NamedTensors params = dflash_named(init_dflash_weights(dc, o.seed));
  make_trainable(params, device);
  const model::DFlashWeights weights = dflash_from_named(params, dc);
  const ops::RopeTable rope = ops::make_rope_table(dc.arch.head_dim, dc.arch.rope_theta, o.seq_len + o.block_size, device);
  AdamW optimizer(params, o.schedule());

  const nlohmann::ordered_json out_config = dflash_config_json(dc, dtype_config_name(save_dtype));

  LoopHooks hooks;
  hooks.forward_backward = [&](int64_t step) {
    std::mt19937_64 rng = step_rng(o.seed, step);
    DraftBatch batch = sample_draft_batch(sequences, o.batch, o.seq_len, o.anchors, rng);
    DraftBlocks blocks = make_blocks(batch.rows, batch.anchors, batch.ids.size(1), o.block_size, dc.mask_token_id, gamma)
                             .to(device);
    compat::CudaAutocast autocast(o.autocast && device.is_cuda(), at::kBFloat16);
    at::Tensor taps;
    {
      c10::NoGradGuard frozen_target;
      taps = sequence_forward(tc, target.weights(), target.rope(), batch.ids.to(device), dc.target_layer_ids, false).taps;
    }
    DraftMetrics metrics;
    const double loss = draft_forward_backward(dc, weights, rope, target.weights().embed_tokens, target.weights().lm_head,
                                               taps, blocks, &metrics);
    int64_t step_tokens = 0;
    for (const auto& row : batch.rows) step_tokens += static_cast<int64_t>(row.size());
    return StepOutput{loss, step_tokens,
                      fmt::format(" | top1 {:.3f} | acc-len {:.2f}", metrics.top1, metrics.accepted_length)};
  };
  hooks.export_model = [&] { export_model(o.out, out_config, params, save_dtype); };
  hooks.eval_every = eval_prompts.empty() ? 0 : (o.eval_every > 0 ? o.eval_every : o.steps);
  hooks.evaluate = [&]() {
    c10::InferenceMode inference;
    NamedTensors frozen;
    for (const auto& [name, p] : params) frozen.emplace_back(name, p.detach());
    model::DFlashDraft draft(dc, dflash_from_named(frozen, dc), target);
    decode::GenerationParams gp;
    gp.max_new_tokens = o.eval_tokens;
    gp.stop_ids = tc.eos_token_ids;
    double tau_sum = 0;
    for (const auto& prompt : eval_prompts)
      tau_sum += decode::generate_dflash(target, draft, prompt, gp).mean_acceptance_length();
    return Evaluation{tau_sum / static_cast<double>(eval_prompts.size()),
                      fmt::format(" over {} prompts", eval_prompts.size())};
  };
  return run_training("train-draft", o, run, resume, params, optimizer, hooks);
}

}  // namespace specpress::train
