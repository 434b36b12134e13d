// compressor_trainer.cpp — see compressor_trainer.h.
#include "train/compressor_trainer.h"

#include <c10/core/GradMode.h>
#include <c10/core/InferenceMode.h>

#include <cmath>
#include <filesystem>
#include <optional>
#include <sstream>

#include <fmt/ranges.h>

#include "compress/beacon.h"
#include "compress/fidelity.h"
#include "core/compat.h"
#include "core/error.h"
#include "core/json_depth.h"
#include "decode/generation.h"
#include "io/mapped_file.h"
#include "train/beacon_layout.h"
#include "train/checkpoint.h"
#include "train/onpolicy.h"
#include "train/sequence_forward.h"
#include "tools/progress.h"

namespace specpress::train {
namespace fs = std::filesystem;

namespace {

// A teacher-forced trajectory: prompt + the target's continuation, committed in runs of `spans`.
struct Trajectory {
  std::vector<int64_t> ids;
  int64_t prompt_tokens = 0;
  std::vector<int64_t> spans;
};

std::string trajectories_jsonl(const std::vector<Trajectory>& ts) {
  std::string out;
  for (const Trajectory& t : ts)
    out += nlohmann::json{{"ids", t.ids}, {"prompt_tokens", t.prompt_tokens}, {"spans", t.spans}}.dump() + "\n";
  return out;
}

std::vector<Trajectory> read_trajectories(const std::string& path, int64_t vocab_size) {
  std::vector<Trajectory> out;
  std::istringstream in(io::read_text_file(path));
  std::string line;
  int64_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty()) continue;
    try {
      nlohmann::json j = nlohmann::json::parse(depth_checked(line, fmt::format("{}:{}", path, line_no)));
      out.push_back({j.at("ids").get<std::vector<int64_t>>(), j.at("prompt_tokens").get<int64_t>(),
                     j.at("spans").get<std::vector<int64_t>>()});
    } catch (const nlohmann::json::exception& e) {
      fail("{}:{}: not a trajectory record ({})", path, line_no, e.what());
    }
    const Trajectory& t = out.back();
    if (t.prompt_tokens < 1 || t.prompt_tokens > static_cast<int64_t>(t.ids.size()))
      fail("{}:{}: prompt_tokens {} outside 1..{}", path, line_no, t.prompt_tokens, t.ids.size());
    for (int64_t id : t.ids)
      if (id < 0 || id >= vocab_size) fail("{}:{}: token id {} outside the vocabulary 0..{}", path, line_no, id, vocab_size - 1);
  }
  return out;
}

// Spans for a trajectory without verify steps: uniform lengths in 1..span_max (seeded by `index`).
std::vector<int64_t> sampled_spans(int64_t tokens, int64_t span_max, uint64_t seed, int64_t index) {
  std::mt19937_64 rng = step_rng(seed ^ 0x5b3c0dULL, index);
  std::vector<int64_t> spans;
  for (int64_t covered = 0; covered < tokens;) {
    const int64_t n = 1 + uniform_index(rng, span_max);
    spans.push_back(n);
    covered += n;
  }
  return spans;
}

// The trajectories of `prompts`, the first numbered `first` (its spans' seeds), and the signal that stopped them.
std::pair<std::vector<Trajectory>, int> generate(const CompressorOptions& o, const model::Qwen3Model& target,
                                                 const std::vector<std::vector<int64_t>>& prompts, const char* label,
                                                 int64_t seed_base, size_t first) {
  std::vector<Trajectory> out;
  const Generations generated = generate_greedy(target, o.target_dir, o.draft_dir, prompts, o.gen_tokens, label);
  for (const decode::GenerationResult& r : generated.results) {
    const std::vector<int64_t>& prompt = prompts[out.size()];
    Trajectory t{prompt, static_cast<int64_t>(prompt.size()), {}};
    t.ids.insert(t.ids.end(), r.output_ids.begin(), r.output_ids.end());
    t.spans = !o.draft_dir.empty() ? r.acceptance_lengths
                                   : sampled_spans(static_cast<int64_t>(r.output_ids.size()), o.span_max, o.seed,
                                                   seed_base + static_cast<int64_t>(first + out.size()));
    out.push_back(std::move(t));
  }
  return {std::move(out), generated.stopped_by};
}

// Generated once into OUT/<file> and reused by a resumed run when they answer the same prompts, made with the same
// target, draft, --gen-tokens, span sampling and device (OUT/generations.json); a run stopped by a signal during the
// generation keeps the ones done there, and the next continues after them.
std::vector<Trajectory> cached_generation(const std::string& file, const model::Qwen3Model& target,
                                          const std::vector<std::vector<int64_t>>& prompts, const CompressorOptions& o,
                                          const char* label, int64_t seed_base) {
  const int64_t vocab_size = target.config().vocab_size;
  if (prompts.empty()) return {};
  const std::string path = (fs::path(o.out) / file).string();
  const nlohmann::json made_with = {
      {"target", fs::absolute(o.target_dir).lexically_normal().string()},
      {"draft", o.draft_dir.empty() ? "" : fs::absolute(o.draft_dir).lexically_normal().string()},
      {"target_fingerprint", model_digest(o.target_dir)},
      {"draft_fingerprint", model_digest(o.draft_dir)},
      {"gen_tokens", o.gen_tokens},
      {"span_max", o.span_max},
      {"seed", o.seed},
      {"device", target.device().str()}};
  std::vector<Trajectory> trajectories;
  const std::optional<std::string> otherwise = cache_made_otherwise(o.out, file, made_with);
  if (otherwise) {
    std::fprintf(stderr, "train-compressor: %s was made otherwise (%s); generating again\n", path.c_str(),
                 otherwise->c_str());
    fs::remove(path);  // so that a stop before the first new answer leaves no file the new record would vouch for
  } else if (fs::exists(path)) {
    std::vector<Trajectory> cached = read_trajectories(path, vocab_size);
    bool same = cached.size() <= prompts.size();
    for (size_t i = 0; same && i < cached.size(); ++i)
      same = std::vector<int64_t>(cached[i].ids.begin(), cached[i].ids.begin() + cached[i].prompt_tokens) == prompts[i];
    if (same && cached.size() == prompts.size()) {
      std::fprintf(stderr, "train-compressor: reusing %zu trajectories from %s\n", cached.size(), path.c_str());
      return cached;
    }
    if (same && !cached.empty()) {
      std::fprintf(stderr, "train-compressor: reusing %zu trajectories from %s (a stopped run's); generating the "
                   "other %zu\n", cached.size(), path.c_str(), prompts.size() - cached.size());
      trajectories = std::move(cached);
    } else if (!same) {
      std::fprintf(stderr, "train-compressor: %s answers other prompts; generating again\n", path.c_str());
      fs::remove(path);
    }
  }
  const size_t first = trajectories.size();
  record_cache(o.out, file, made_with);
  auto [generated, stopped_by] =
      generate(o, target, {prompts.begin() + static_cast<std::ptrdiff_t>(first), prompts.end()}, label, seed_base,
               first);
  for (Trajectory& t : generated) trajectories.push_back(std::move(t));
  if (!trajectories.empty()) io::write_file_atomic(path, trajectories_jsonl(trajectories));
  if (stopped_by != 0)
    generation_interrupted("train-compressor", stopped_by, trajectories.size(), prompts.size(), path);
  return trajectories;
}

// Cuts a trajectory to `max_tokens`; the spans stay as they were (plan_compression clips the last).
Trajectory truncated(Trajectory t, int64_t max_tokens) {
  if (static_cast<int64_t>(t.ids.size()) > max_tokens) t.ids.resize(max_tokens);
  t.prompt_tokens = std::min<int64_t>(t.prompt_tokens, static_cast<int64_t>(t.ids.size()) - 1);
  return t;
}

struct Prepared {
  at::Tensor ids;        // int64 [T]
  at::Tensor labels;     // int64 [rows]: next token of each loss row (-1 past the end)
  BeaconLayout layout;
};

Prepared prepare(const Trajectory& t, const compress::CompressionPlan& plan, at::Device device) {
  const int64_t T = static_cast<int64_t>(t.ids.size());
  Prepared p;
  p.layout = make_beacon_layout(plan, device);
  p.ids = at::tensor(t.ids, at::kLong).to(device);
  std::vector<int64_t> next(T, -1);
  for (int64_t q = 0; q + 1 < T; ++q) next[q] = t.ids[q + 1];
  p.labels = at::tensor(next, at::kLong).to(device).index_select(0, p.layout.loss_rows);
  return p;
}

compress::BeaconConfig beacon_config(const CompressorOptions& o, const model::Qwen3Model& target,
                                     const std::vector<int64_t>& draft_taps) {
  const model::Qwen3Config& tc = target.config();
  compress::BeaconConfig c;
  c.feature_layers = !o.feature_layers.empty() ? o.feature_layers
                     : !draft_taps.empty()     ? draft_taps
                                               : model::default_target_layer_ids(tc.num_layers, 1);
  check_distinct_layers(o.feature_layers, "--feature-layers");
  for (int64_t l : c.feature_layers)
    if (l < 0 || l >= tc.num_layers)
      fail("--feature-layers: layer {} is not a layer of {} (it has layers 0..{})", l, o.target_dir, tc.num_layers - 1);
  if (o.width < 1) fail("--width: must be positive, found {}", o.width);
  if (o.max_span < 1) fail("--max-span: must be positive, found {}", o.max_span);
  c.target_hidden = tc.hidden_size;
  c.target_layers = tc.num_layers;
  c.target_vocab = tc.vocab_size;
  c.width = o.width;
  c.max_span = o.max_span;
  c.embed_rms = compress::embedding_rms(target.weights().embed_tokens);
  c.policy = o.policy;
  return c;
}

// Mean KL over the held-out trajectories, replayed through the compressed engine.
compress::FidelityResult replay(const model::Qwen3Model& target, const std::vector<Trajectory>& held_out,
                                const compress::Policy& policy) {
  compress::FidelityResult total;
  for (const Trajectory& t : held_out) {
    std::vector<int64_t> prompt(t.ids.begin(), t.ids.begin() + t.prompt_tokens);
    std::vector<int64_t> output(t.ids.begin() + t.prompt_tokens, t.ids.end());
    total.merge(compress::evaluate_fidelity(target, prompt, output, t.spans, policy));
  }
  return total;
}

}  // namespace

TrainSummary train_compressor(const CompressorOptions& o, const TextCodec& codec) {
  validate_common(o);
  {  // the knobs as the beacon runs them (the method is "none" until the trained compressor exists)
    compress::Policy as_trained = o.policy;
    as_trained.method = compress::Method::kDrop;
    as_trained.beacon = nullptr;
    compress::validate(as_trained);
  }
  const at::ScalarType save_dtype = parse_save_dtype(o.save_dtype);
  keep_freed_memory();
  if (o.data.empty() && o.on_policy_prompts.empty()) fail("train-compressor: give --on-policy-prompts and/or --data");
  if (o.span_max < 1) fail("--span-max: must be positive, found {}", o.span_max);
  if (o.gen_tokens < 1) fail("--gen-tokens: must be at least 1, found {}", o.gen_tokens);
  if (!(o.ce_weight >= 0) || !std::isfinite(o.ce_weight))
    fail("--ce-weight: must be >= 0 and finite, found {}", o.ce_weight);
  if (o.eval_every < 0) fail("--eval-every: must be >= 0 (0 = at the end), found {}", o.eval_every);
  if (o.eval_samples < 0) fail("--eval-samples: must be >= 0, found {}", o.eval_samples);
  if (o.feature_passes < 0) fail("--feature-passes: must be >= 0, found {}", o.feature_passes);
  if (o.target_dir.empty()) fail("--target: required (the Qwen3 target directory)");
  const at::Device device = training_device(o);
  const model::Qwen3Model target = model::Qwen3Model::load(o.target_dir, at::kFloat, device);
  const model::Qwen3Config& tc = target.config();
  // The draft itself is loaded only to generate (onpolicy.h); here its taps are the default features.
  std::optional<model::DFlashConfig> draft_config;
  if (!o.draft_dir.empty()) draft_config = model::draft_config_for(o.draft_dir, tc);
  const std::vector<int64_t> draft_taps = draft_config ? draft_config->target_layer_ids : std::vector<int64_t>{};
  const compress::BeaconConfig bc = beacon_config(o, target, draft_taps);
  if (o.seq_len > tc.max_position_embeddings)
    fail("--seq-len {}: exceeds the target's max_position_embeddings {}", o.seq_len, tc.max_position_embeddings);

  // Inputs first: bad data fails before the output directory is touched.
  std::vector<Trajectory> trajectories;
  if (!o.data.empty()) {
    int64_t index = 0;
    for (Sequence& s : read_documents(o.data, codec, tc.vocab_size)) {
      const int64_t prompt = std::max<int64_t>(1, s.loss_start);
      const int64_t rest = static_cast<int64_t>(s.ids.size()) - prompt;
      if (rest < 1) continue;
      trajectories.push_back({std::move(s.ids), prompt, sampled_spans(rest, o.span_max, o.seed, 1000000 + index++)});
    }
  }
  const std::vector<std::vector<int64_t>> prompts =
      o.on_policy_prompts.empty() ? std::vector<std::vector<int64_t>>{} : read_prompts(o.on_policy_prompts, codec, tc.vocab_size);
  std::vector<std::vector<int64_t>> eval_prompts =
      o.eval_prompts.empty() ? std::vector<std::vector<int64_t>>{} : read_prompts(o.eval_prompts, codec, tc.vocab_size);
  // only the first --eval-samples are held out: the rest are not generated
  eval_prompts.resize(std::min(eval_prompts.size(), static_cast<size_t>(o.eval_samples)));
  // the generations (with the draft's block where it drafts) must fit the target's positions, before any runs
  const int64_t block = draft_config ? draft_config->block_size : 1;
  check_generation_fits(prompts, o.gen_tokens, block, tc.max_position_embeddings, "--gen-tokens");
  check_generation_fits(eval_prompts, o.gen_tokens, block, tc.max_position_embeddings, "--gen-tokens");
  // A compression event needs a unit of generated tokens (a span, or --compress-merge tokens) after the raw head (the
  // prompt, the sinks) that ages past the window before the last token (span_plan.cpp): a continuation of at least
  // raw head - prompt + window + max(merge, 1) + 1 tokens. Where none can have one, fail before generating anything.
  int64_t longest_possible = 0;
  bool any_room = false;
  auto check_room = [&](int64_t total, int64_t prompt) {  // after `truncated` to --seq-len
    const int64_t cut = std::min(total, o.seq_len), kept_prompt = std::min(prompt, cut - 1);
    const int64_t continuation = cut - kept_prompt;
    longest_possible = std::max(longest_possible, continuation);
    const int64_t needed = std::max(kept_prompt, o.policy.sinks) - kept_prompt + o.policy.window +
                           std::max<int64_t>(o.policy.merge_tokens, 1) + 1;
    any_room = any_room || continuation >= needed;
  };
  for (const Trajectory& t : trajectories) check_room(static_cast<int64_t>(t.ids.size()), t.prompt_tokens);
  for (const auto& p : prompts) check_room(static_cast<int64_t>(p.size()) + o.gen_tokens, static_cast<int64_t>(p.size()));
  if (!any_room)
    fail("train-compressor: no trajectory can reach a compression event: the longest continuation can have {} tokens "
         "within --seq-len {} and --gen-tokens {}, and a unit (--compress-merge {}) must age past --compress-window {} "
         "after the prompt and --compress-sinks {} (raise --gen-tokens/--seq-len or lower the window)",
         longest_possible, o.seq_len, o.gen_tokens, o.policy.merge_tokens, o.policy.window, o.policy.sinks);
  std::vector<InputPath> inputs = {{"--target", o.target_dir}, {"--draft", o.draft_dir}};
  add_inputs(inputs, "--data", o.data);
  add_inputs(inputs, "--on-policy-prompts", o.on_policy_prompts);
  add_inputs(inputs, "--eval-prompts", o.eval_prompts);
  const OutputDir output = prepare_output_dir(o.out, o.resume, o.force, inputs);  // locked while it lives
  const bool resume = output.resume;
  nlohmann::json run = common_run_json("train-compressor", o, device);
  run["target"] = fs::absolute(o.target_dir).lexically_normal().string();
  run["draft"] = o.draft_dir.empty() ? "" : fs::absolute(o.draft_dir).lexically_normal().string();
  run["compressor"] = compress::beacon_config_json(bc);
  run["compressor"].erase("embed_rms");  // a float recomputed from the target; the target path pins it
  run["ce_weight"] = o.ce_weight;
  run["gen_tokens"] = o.gen_tokens;
  run["eval_prompts"] = absolute_paths(o.eval_prompts);
  run["span_max"] = o.span_max;
  run["feature_passes"] = o.feature_passes;
  run["eval_samples"] = o.eval_samples;  // without --eval-prompts the held-out set is cut from the training data
  run["on_policy_prompts"] = absolute_paths(o.on_policy_prompts);
  run["input_fingerprints"].update(input_fingerprints(o.on_policy_prompts));
  run["input_fingerprints"].update(input_fingerprints(o.eval_prompts));
  run["input_fingerprints"].update(input_fingerprints(codec.used_files()));
  run["model_fingerprints"] = model_fingerprints(o.target_dir);
  if (!o.draft_dir.empty()) run["model_fingerprints"].update(model_fingerprints(o.draft_dir));
  check_resume_matches(o, run, resume);  // before the generations
  std::vector<Trajectory> generated =
      cached_generation("trajectories.jsonl", target, prompts, o, "on-policy generation", 0);
  trajectories.insert(trajectories.end(), generated.begin(), generated.end());
  std::vector<Trajectory> held_out =
      cached_generation("eval_trajectories.jsonl", target, eval_prompts, o, "held-out generation", 500000);

  // Keep what reaches a compression event within --seq-len.
  std::vector<Trajectory> usable;
  std::vector<compress::CompressionPlan> plans;  // of `usable`
  int64_t longest = 0;
  size_t cut_count = 0;
  for (size_t i = 0; i < trajectories.size(); ++i) {
    cut_count += static_cast<int64_t>(trajectories[i].ids.size()) > o.seq_len ? 1 : 0;
    Trajectory cut = truncated(trajectories[i], o.seq_len);
    longest = std::max<int64_t>(longest, static_cast<int64_t>(cut.ids.size()) - cut.prompt_tokens);
    try {
      compress::CompressionPlan plan =
          compress::plan_compression(o.policy, cut.prompt_tokens, cut.spans, static_cast<int64_t>(cut.ids.size()));
      if (plan.events.empty()) continue;
      usable.push_back(std::move(cut));
      plans.push_back(std::move(plan));
    } catch (const Error& e) {
      fail("train-compressor: trajectory {} ({}): {}", i + 1,
           i < trajectories.size() - generated.size() ? "from --data" : "OUT/trajectories.jsonl", e.what());
    }
  }
  if (cut_count > 0 || usable.size() < trajectories.size())
    std::fprintf(stderr, "train-compressor: %zu of %zu trajectories cut to --seq-len %lld; %zu left out (no compression "
                 "event within it)\n", cut_count, trajectories.size(), static_cast<long long>(o.seq_len),
                 trajectories.size() - usable.size());
  if (held_out.empty() && o.eval_samples > 0 && usable.size() >= 2) {
    const size_t n = std::min<size_t>(static_cast<size_t>(o.eval_samples), usable.size() / 5 + 1);
    held_out.assign(usable.end() - static_cast<std::ptrdiff_t>(n), usable.end());
    usable.resize(usable.size() - n);
    plans.resize(plans.size() - n);
  }
  if (usable.empty())
    fail("train-compressor: no trajectory reaches a compression event: the longest continuation has {} tokens within "
         "--seq-len {}, and a unit must age past --compress-window {} (raise --gen-tokens/--seq-len or lower the window)",
         longest, o.seq_len, o.policy.window);
  held_out.resize(std::min<size_t>(held_out.size(), static_cast<size_t>(o.eval_samples)));
  std::vector<Prepared> prepared;
  int64_t events = 0, tokens = 0;
  for (size_t i = 0; i < usable.size(); ++i) {
    prepared.push_back(prepare(usable[i], plans[i], device));
    events += static_cast<int64_t>(plans[i].events.size());
    tokens += static_cast<int64_t>(usable[i].ids.size());
  }
  std::fprintf(stderr,
               "train-compressor: %zu trajectories (%lld tokens, %lld compression events), %zu held out; window %lld, "
               "merge %lld; features [%s], width %lld\n",
               usable.size(), static_cast<long long>(tokens), static_cast<long long>(events), held_out.size(),
               static_cast<long long>(o.policy.window), static_cast<long long>(o.policy.merge_tokens),
               fmt::format("{}", fmt::join(bc.feature_layers, ", ")).c_str(), static_cast<long long>(bc.width));

  if (held_out.empty() && o.eval_samples > 0)
    std::fprintf(stderr, "train-compressor: nothing held out, so no evaluation and no eval.json (give --eval-prompts, "
                 "or at least 2 trajectories with a compression event: the last are then held out)\n");
  NamedTensors params = compress::beacon_named(compress::init_beacon_weights(bc, o.seed));
  make_trainable(params, device);
  const compress::BeaconWeights weights = compress::beacon_from_named(params);
  AdamW optimizer(params, o.schedule());

  auto current = [&]() {  // the compressor as the engine runs it (float32, detached)
    NamedTensors frozen;
    for (const auto& [name, p] : params) frozen.emplace_back(name, p.detach());
    return compress::beacon_from_named(frozen);
  };

  // OUT/eval.json: the held-out baselines and every evaluation, rewritten atomically after each one.
  const std::string eval_path = (fs::path(o.out) / "eval.json").string();
  nlohmann::ordered_json report = {{"held_out_trajectories", held_out.size()},
                                   {"policy", compress::policy_knobs_json(o.policy)},
                                   {"baselines", nlohmann::ordered_json::object()},
                                   {"evals", nlohmann::ordered_json::array()}};
  if (resume && fs::exists(eval_path)) {  // keep what the run before the checkpoint measured
    const nlohmann::ordered_json saved =
        nlohmann::ordered_json::parse(depth_checked(io::read_text_file(eval_path), eval_path), nullptr, false);
    const std::optional<CheckpointState> checkpoint = find_checkpoint(o.out);
    if (saved.is_object() && saved.contains("baselines") && saved.contains("evals") && checkpoint) {
      report["baselines"] = saved["baselines"];
      for (const auto& e : saved["evals"])
        if (e.contains("step") && e["step"].get<int64_t>() <= checkpoint->step) report["evals"].push_back(e);
    }
  }
  auto write_report = [&] { io::write_file_atomic(eval_path, report.dump(2) + "\n"); };
  auto fidelity_json = [](const compress::FidelityResult& r) {
    return nlohmann::ordered_json{{"kl", r.mean_kl()}, {"top1", r.mean_top1()}, {"tv", r.mean_tv()},
                                  {"perplexity_delta", r.perplexity_delta()}, {"events", r.stats.events}};
  };

  if (!held_out.empty() && !resume) {
    std::string line;
    for (compress::Method m : {compress::Method::kDrop, compress::Method::kKeepLast, compress::Method::kMeanMerge,
                               compress::Method::kTopAttention, compress::Method::kWindowOnly}) {
      compress::Policy control = o.policy;
      control.method = m;
      c10::InferenceMode inference;
      const compress::FidelityResult r = replay(target, held_out, control);
      if (r.pairs() == 0)  // the same units for every method: an evaluation would measure nothing, each one a blank
        fail("train-compressor: no row of the {} held-out trajectories follows a compression event at "
             "--compress-window {} (raise --gen-tokens or lower the window)", held_out.size(), o.policy.window);
      line += fmt::format("{}{} KL {:.4f} top-1 {:.3f}", line.empty() ? "" : "; ", compress::method_name(m), r.mean_kl(),
                          r.mean_top1());
      report["baselines"][compress::method_name(m)] = fidelity_json(r);
    }
    {  // and the untrained beacon, where training starts
      c10::InferenceMode inference;
      compress::Policy start = o.policy;
      start.method = compress::Method::kBeacon;
      start.beacon = std::make_shared<const compress::BeaconCompressor>(bc, current());
      const compress::FidelityResult r = replay(target, held_out, start);
      line += fmt::format("; untrained beacon KL {:.4f} top-1 {:.3f}", r.mean_kl(), r.mean_top1());
      report["baselines"]["beacon (untrained)"] = fidelity_json(r);
    }
    std::fprintf(stderr, "train-compressor: held-out controls at the same policy: %s\n", line.c_str());
    write_report();
  }

  LoopHooks hooks;
  int64_t completed = 0;  // steps done when the next evaluation runs
  hooks.forward_backward = [&](int64_t step) {
    completed = step + 1;
    std::mt19937_64 rng = step_rng(o.seed, step);
    double loss = 0, kl = 0, top1 = 0;
    int64_t step_tokens = 0;
    for (int64_t b = 0; b < o.batch; ++b) {
      const Prepared& p = prepared[uniform_index(rng, static_cast<int64_t>(prepared.size()))];
      compat::CudaAutocast autocast(o.autocast && device.is_cuda(), at::kBFloat16);
      const int64_t T = p.ids.size(0);
      at::Tensor teacher_hidden, features;
      {
        c10::NoGradGuard frozen_target;
        SequenceOutput t = sequence_forward(tc, target.weights(), target.rope(), p.ids.unsqueeze(0), bc.feature_layers, true);
        teacher_hidden = t.hidden[0].index_select(0, p.layout.loss_rows);
        features = refine_features(bc, weights, target, p.layout, p.ids, t.taps[0], o.feature_passes);
      }
      at::Tensor latents = layout_latents(bc, weights, target, p.layout, p.ids, features);
      at::Tensor student =
          layout_forward(target, p.layout, p.ids, latents, {}, true).hidden.index_select(0, p.layout.loss_rows);
      VocabKL v = vocab_kl(student, teacher_hidden, target.weights().lm_head, p.labels, o.ce_weight);
      student.backward(v.grad_hidden / static_cast<double>(o.batch));
      loss += v.loss / static_cast<double>(o.batch);
      kl += v.kl / static_cast<double>(o.batch);
      top1 += v.top1 / static_cast<double>(o.batch);
      step_tokens += T;
    }
    return StepOutput{loss, step_tokens, fmt::format(" | kl {:.4f} | top1 {:.3f}", kl, top1)};
  };
  hooks.export_model = [&] { compress::save_beacon(o.out, bc, current(), save_dtype); };
  hooks.eval_every = held_out.empty() ? 0 : (o.eval_every > 0 ? o.eval_every : o.steps);
  hooks.eval_name = "held-out KL (compressed engine replay, nats)";
  hooks.evaluate = [&]() {
    c10::InferenceMode inference;
    compress::Policy p = o.policy;
    p.method = compress::Method::kBeacon;
    p.beacon = std::make_shared<const compress::BeaconCompressor>(bc, current());
    const compress::FidelityResult r = replay(target, held_out, p);
    nlohmann::ordered_json entry = fidelity_json(r);
    entry["step"] = completed;
    report["evals"].push_back(entry);
    write_report();
    return Evaluation{r.mean_kl(), fmt::format(" (top-1 {:.3f}, ppl delta {:+.2f}% over {} events)", r.mean_top1(),
                                               100.0 * r.perplexity_delta(), r.stats.events)};
  };
  return run_training("train-compressor", o, run, resume, params, optimizer, hooks);
}

}  // namespace specpress::train
