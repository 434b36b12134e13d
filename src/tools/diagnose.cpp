// diagnose.cpp — draft-vs-target diagnostics along the target's greedy trajectory (see diagnose.h).
#include "tools/diagnose.h"

#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <type_traits>

#include <fmt/format.h>

#include "core/error.h"
#include "decode/generation.h"
#include "ops/rmsnorm.h"
#include "tools/bench_checkpoint.h"
#include "tools/progress.h"
#include "tools/prompting.h"
#include "tools/runner.h"

namespace specpress::tools {
namespace {

// The target verifies the block [bonus, drafted...] at positions s.. (the cache holding the trajectory's true tokens
// before s: each start rewrites position s with the true token, and later starts only read positions before
// theirs), and, where `scored`, each temperature's step acceptance is added in: drafted token k is accepted with
// probability prod_{j<=k} p_T(d_j | context, d_<j); greedy temperatures (below the sampler's 1e-5) take p_T as 1 for
// the target's argmax and 0 elsewhere.
void add_sampled_acceptance(const model::Qwen3Model& target, model::KVCache& cache, int64_t s, int64_t bonus,
                            const at::Tensor& drafted, bool scored, const std::vector<double>& temperatures,
                            DiagnoseSums& sums) {
  const int64_t drafts = drafted.size(0);
  cache.rollback(s);
  at::Tensor bonus_id = at::full({1}, bonus, drafted.options());
  if (!scored) {  // the true token's K/V at s is all that later starts need
    target.forward(bonus_id, s, cache, {});
    return;
  }
  model::ForwardOptions opts;
  opts.all_logits = true;
  // row k-1 predicts position k (the last row, the bonus after the block, is not needed)
  at::Tensor logits = target.forward(at::cat({bonus_id, drafted}), s, cache, opts).logits.narrow(0, 0, drafts);
  at::Tensor index = drafted.unsqueeze(1);
  for (size_t t = 0; t < temperatures.size(); ++t) {
    decode::SamplingParams sampling;
    sampling.temperature = temperatures[t];
    at::Tensor p = sampling.greedy()
                       ? logits.argmax(-1).eq(drafted).to(at::kDouble)
                       : at::softmax(logits / temperatures[t], -1).gather(1, index).squeeze(1).to(at::kDouble);
    at::Tensor accepted = at::cumprod(p, 0).to(at::kCPU);
    auto acc = accepted.accessor<double, 1>();
    sums.sampled_starts[t] += 1;
    sums.sampled_length[t] += 1;
    for (int64_t k = 0; k < drafts; ++k) {
      sums.sampled_per_position[t][k] += acc[k];
      sums.sampled_length[t] += acc[k];
    }
  }
}

template <typename T>
void add_into(std::vector<T>& into, const std::vector<T>& from) {
  for (size_t i = 0; i < into.size(); ++i) into[i] += from[i];
}

// An integer from 0 to 2^63 - 1 (an unsigned JSON number past it would wrap negative as int64).
bool is_count(const nlohmann::json& v) {
  return v.is_number_unsigned() ? v.get<uint64_t>() <= uint64_t{INT64_MAX}
                                : v.is_number_integer() && v.get<int64_t>() >= 0;
}

// `value` (field `name`, nullptr where absent): an array of `size` numbers >= 0, integers where T is.
template <typename T>
std::vector<T> sums_array(const nlohmann::json* value, const std::string& name, size_t size, const std::string& where) {
  const char* what = std::is_integral_v<T> ? "counts (integers >= 0)" : "sums (numbers >= 0)";
  if (value == nullptr || !value->is_array() || value->size() != size)
    fail("{}: field '{}' must be an array of {} {}, found {}", where, name, size, what,
         value != nullptr ? value->dump().substr(0, 200) : "none");
  std::vector<T> out;
  for (const nlohmann::json& v : *value) {
    // sums: finite (1e999 parses as infinity)
    const bool fits = std::is_integral_v<T> ? is_count(v)
                                            : v.is_number() && v.get<double>() >= 0 && std::isfinite(v.get<double>());
    if (!fits) fail("{}: field '{}' must hold {}, found {}", where, name, what, v.dump());
    out.push_back(v.get<T>());
  }
  return out;
}

const nlohmann::json* field(const nlohmann::json& j, const std::string& key) {
  return j.contains(key) ? &j[key] : nullptr;
}

int64_t count_field(const nlohmann::json& j, const std::string& key, const std::string& where) {
  const nlohmann::json* v = field(j, key);
  if (v == nullptr || !is_count(*v))
    fail("{}: field '{}' must be a count (an integer >= 0), found {}", where, key, v != nullptr ? v->dump() : "none");
  return v->get<int64_t>();
}

// A record's sums of per-position indicators can be no larger than the positions they were counted over (a top-1
// rate over 1 in the report otherwise): a record edited by hand, or damaged, is refused naming the first such sum.
// `block` is B, the most a sampled acceptance length can be.
void check_sums_within_counts(const DiagnoseSums& s, int64_t block, const std::string& where) {
  const auto at_most = [&](double part, const std::string& part_name, double limit, const std::string& limit_name) {
    if (part > limit * (1 + 1e-9) + 1e-6)
      fail("{}: field '{}' is {}, more than {} = {} allows: the record was edited or is damaged", where, part_name,
           part, limit_name, limit);
  };
  const auto each = [&](const char* part, const auto& parts, const char* whole, const auto& wholes) {
    for (size_t i = 0; i < parts.size(); ++i)
      at_most(static_cast<double>(parts[i]), fmt::format("{}[{}]", part, i), static_cast<double>(wholes[i]),
              fmt::format("{}[{}]", whole, i));
  };
  each("top1", s.top1, "position_count", s.position_count);
  each("chain", s.chain, "top1", s.top1);
  each("calibration_correct", s.calibration_correct, "calibration_count", s.calibration_count);
  each("calibration_confidence", s.calibration_confidence, "calibration_count", s.calibration_count);
  each("entropy_top1", s.entropy_top1, "entropy_count", s.entropy_count);
  each("mix_changed", s.mix_changed, "mix_positions", s.mix_positions);
  for (size_t l = 0; l < s.layer_agree.size(); ++l)
    at_most(s.layer_agree[l], fmt::format("layer_agree[{}]", l), static_cast<double>(s.layer_positions),
            "layer_positions");
  int64_t whole_blocks = 0;
  for (int64_t c : s.acceptance_length_counts) whole_blocks += c;
  at_most(static_cast<double>(whole_blocks), "acceptance_length_counts' sum", static_cast<double>(s.block_starts),
          "block_starts");
  for (size_t t = 0; t < s.sampled_starts.size(); ++t) {
    const double starts = static_cast<double>(s.sampled_starts[t]);
    const std::string starts_name = fmt::format("sampled_starts[{}]", t);
    for (size_t k = 0; k < s.sampled_per_position[t].size(); ++k)
      at_most(s.sampled_per_position[t][k], fmt::format("sampled_per_position[{}][{}]", t, k), starts, starts_name);
    at_most(s.sampled_length[t], fmt::format("sampled_length[{}]", t), starts * static_cast<double>(block),
            fmt::format("the block size times {}", starts_name));
  }
}

}  // namespace

void DiagnoseSums::add(const DiagnoseSums& o) {
  trajectory_tokens += o.trajectory_tokens;
  block_starts += o.block_starts;
  layer_positions += o.layer_positions;
  add_into(acceptance_length_counts, o.acceptance_length_counts);
  add_into(position_count, o.position_count);
  add_into(top1, o.top1);
  add_into(rank, o.rank);
  add_into(kl, o.kl);
  add_into(chain, o.chain);
  add_into(calibration_count, o.calibration_count);
  add_into(calibration_confidence, o.calibration_confidence);
  add_into(calibration_correct, o.calibration_correct);
  add_into(entropy_count, o.entropy_count);
  add_into(entropy, o.entropy);
  add_into(entropy_top1, o.entropy_top1);
  add_into(entropy_kl, o.entropy_kl);
  add_into(layer_agree, o.layer_agree);
  add_into(mix_positions, o.mix_positions);
  add_into(mix_changed, o.mix_changed);
  add_into(sampled_starts, o.sampled_starts);
  add_into(sampled_length, o.sampled_length);
  for (size_t t = 0; t < sampled_per_position.size(); ++t) add_into(sampled_per_position[t], o.sampled_per_position[t]);
}

nlohmann::ordered_json diagnose_sums_json(const DiagnoseSums& s) {
  return {{"trajectory_tokens", s.trajectory_tokens},
          {"block_starts", s.block_starts},
          {"layer_positions", s.layer_positions},
          {"acceptance_length_counts", s.acceptance_length_counts},
          {"position_count", s.position_count},
          {"top1", s.top1},
          {"rank", s.rank},
          {"kl", s.kl},
          {"chain", s.chain},
          {"calibration_count", s.calibration_count},
          {"calibration_confidence", s.calibration_confidence},
          {"calibration_correct", s.calibration_correct},
          {"entropy_count", s.entropy_count},
          {"entropy", s.entropy},
          {"entropy_top1", s.entropy_top1},
          {"entropy_kl", s.entropy_kl},
          {"layer_agree", s.layer_agree},
          {"mix_positions", s.mix_positions},
          {"mix_changed", s.mix_changed},
          {"sampled_starts", s.sampled_starts},
          {"sampled_length", s.sampled_length},
          {"sampled_per_position", s.sampled_per_position}};
}

DiagnoseSums diagnose_sums_from_json(const nlohmann::json& j, const DiagnoseSums& zero, const std::string& where) {
  if (!j.is_object()) fail("{}: field 'sums' must be an object, found {}", where, j.dump().substr(0, 200));
  DiagnoseSums s;
  s.trajectory_tokens = count_field(j, "trajectory_tokens", where);
  s.block_starts = count_field(j, "block_starts", where);
  s.layer_positions = count_field(j, "layer_positions", where);
  const auto counts = [&](const char* key, const std::vector<int64_t>& like) {
    return sums_array<int64_t>(field(j, key), key, like.size(), where);
  };
  const auto numbers = [&](const char* key, const std::vector<double>& like) {
    return sums_array<double>(field(j, key), key, like.size(), where);
  };
  s.acceptance_length_counts = counts("acceptance_length_counts", zero.acceptance_length_counts);
  s.position_count = counts("position_count", zero.position_count);
  s.top1 = numbers("top1", zero.top1);
  s.rank = numbers("rank", zero.rank);
  s.kl = numbers("kl", zero.kl);
  s.chain = numbers("chain", zero.chain);
  s.calibration_count = counts("calibration_count", zero.calibration_count);
  s.calibration_confidence = numbers("calibration_confidence", zero.calibration_confidence);
  s.calibration_correct = numbers("calibration_correct", zero.calibration_correct);
  s.entropy_count = counts("entropy_count", zero.entropy_count);
  s.entropy = numbers("entropy", zero.entropy);
  s.entropy_top1 = numbers("entropy_top1", zero.entropy_top1);
  s.entropy_kl = numbers("entropy_kl", zero.entropy_kl);
  s.layer_agree = numbers("layer_agree", zero.layer_agree);
  s.mix_positions = counts("mix_positions", zero.mix_positions);
  s.mix_changed = counts("mix_changed", zero.mix_changed);
  s.sampled_starts = counts("sampled_starts", zero.sampled_starts);
  s.sampled_length = numbers("sampled_length", zero.sampled_length);
  const nlohmann::json* rows = field(j, "sampled_per_position");
  if (rows == nullptr || !rows->is_array() || rows->size() != zero.sampled_per_position.size())
    fail("{}: field 'sampled_per_position' must be an array of {} arrays (one a --temps temperature), found {}", where,
         zero.sampled_per_position.size(), rows != nullptr ? rows->dump().substr(0, 200) : "none");
  for (size_t t = 0; t < rows->size(); ++t)
    s.sampled_per_position.push_back(sums_array<double>(&(*rows)[t], fmt::format("sampled_per_position[{}]", t),
                                                        zero.sampled_per_position[t].size(), where));
  check_sums_within_counts(s, static_cast<int64_t>(zero.acceptance_length_counts.size()), where);
  return s;
}

DiagnoseReport run_diagnose(const model::Qwen3Model& target, const model::DFlashDraft& draft,
                            const tok::Tokenizer& tokenizer, const std::vector<BenchSample>& samples,
                            const DiagnoseOptions& options, const std::vector<int64_t>& stop_ids) {
  if (options.max_new_tokens < 2)  // a block start needs a generated token before and after it
    fail("--max-new-tokens: must be at least 2, found {}", options.max_new_tokens);
  if (options.calibration_bins < 1) fail("--calibration-bins: must be at least 1");
  if (samples.empty()) fail("diagnose: no samples selected");
  for (double t : options.temperatures)
    if (!(t >= 0) || !std::isfinite(t)) fail("--temps: each temperature must be a finite number >= 0, got {}", t);
  c10::InferenceMode inference_mode;
  const model::DFlashConfig& dc = draft.config();
  const int64_t B = dc.block_size, L = target.config().num_layers;
  DiagnoseReport report;
  report.options = options;
  report.block_size = B;
  report.tap_layers = dc.target_layer_ids;
  report.samples_planned = static_cast<int64_t>(samples.size());
  report.options.resume_records.clear();  // the report keeps no records
  report.options.on_record = nullptr;
  // the rows' labels (entropy bins, --temps, mixing); their numbers come from the samples' sums at the end
  for (size_t e = 0; e <= kEntropyEdges.size(); ++e)
    report.by_target_entropy.push_back({e == 0 ? 0.0 : kEntropyEdges[e - 1],
                                        e < kEntropyEdges.size() ? kEntropyEdges[e]
                                                                 : std::numeric_limits<double>::infinity()});
  for (double t : options.temperatures) report.sampled.push_back({t, 0, 0, {}});
  for (double w : options.mix_weights) {
    report.mixing.push_back({"draft", w, 0, 0});
    for (int64_t layer : dc.target_layer_ids) report.mixing.push_back({fmt::format("layer {}", layer), w, 0, 0});
  }
  DiagnoseSums zero;  // a sample's sums before it adds anything, sized for this run
  zero.acceptance_length_counts.assign(B, 0);
  zero.position_count.assign(B - 1, 0);
  zero.top1.assign(B - 1, 0.0);
  zero.rank = zero.kl = zero.chain = zero.top1;
  zero.calibration_count.assign(options.calibration_bins, 0);
  zero.calibration_confidence.assign(options.calibration_bins, 0.0);
  zero.calibration_correct = zero.calibration_confidence;
  zero.entropy_count.assign(report.by_target_entropy.size(), 0);
  zero.entropy.assign(report.by_target_entropy.size(), 0.0);
  zero.entropy_top1 = zero.entropy_kl = zero.entropy;
  zero.layer_agree.assign(L + 1, 0.0);
  zero.mix_positions.assign(report.mixing.size(), 0);
  zero.mix_changed = zero.mix_positions;
  zero.sampled_starts.assign(options.temperatures.size(), 0);
  zero.sampled_length.assign(options.temperatures.size(), 0.0);
  zero.sampled_per_position.assign(options.temperatures.size(), std::vector<double>(B - 1, 0.0));
  DiagnoseSums total = zero;

  // every start s <= T-2 runs a whole draft block (positions up to s+B-1): a turn needs a block's room, as in bench
  const int64_t max_positions =
      std::min(target.config().max_position_embeddings, dc.arch.max_position_embeddings);
  const int64_t longest_first_turn = check_first_turns_fit(tokenizer, samples, options.think, options.max_new_tokens,
                                                           B, max_positions, options.dataset);
  // the records of this run's samples a resumed checkpoint holds, each checked before any work: made from the prompt
  // rendered now, its sums of this run's sizes
  std::map<std::string, const DiagnoseRecord*> record_of;
  for (const DiagnoseRecord& r : options.resume_records) record_of[r.id] = &r;
  std::vector<std::optional<DiagnoseSums>> resumed(samples.size());
  for (size_t i = 0; i < samples.size() && !record_of.empty(); ++i) {
    const auto found = record_of.find(samples[i].id);
    if (found == record_of.end()) continue;
    const DiagnoseRecord& r = *found->second;
    const std::vector<int64_t> prompt =
        chat_prompt_ids(tokenizer, {{"user", samples[i].turns[0], std::nullopt}}, options.think);
    if (r.prompt_fingerprint != prompt_fingerprint(prompt))
      fail("--resume: {}: the record of {} sample {} was made from another prompt ({} tokens, fingerprint {}; now {} "
           "tokens, {}): the dataset file, the chat template or a setting changed; give another --checkpoint",
           r.where, options.dataset, samples[i].id, r.prompt_tokens, r.prompt_fingerprint, prompt.size(),
           prompt_fingerprint(prompt));
    resumed[i] = diagnose_sums_from_json(r.sums, zero, r.where);
  }
  GenerationRunner runner(target, nullptr);
  runner.reserve(longest_first_turn + options.max_new_tokens + 1);  // the fast path's engine, once for every sample
  ProgressBar bar("diagnose " + options.dataset, static_cast<int64_t>(samples.size()), options.progress);
  decode::GenerationParams params;
  params.max_new_tokens = options.max_new_tokens;
  params.stop_ids = stop_ids;
  const at::Device device = target.device();
  auto long_opts = at::TensorOptions().dtype(at::kLong).device(device);
  int64_t done = 0;
  for (size_t index = 0; index < samples.size(); ++index) {
    const BenchSample& sample = samples[index];
    if (options.keep_going && !options.keep_going()) {
      report.interrupted = true;
      break;
    }
    if (resumed[index]) {
      total.add(*resumed[index]);
      ++report.resumed;
      report.samples = ++done;
      bar.update(done, fmt::format("{} block starts", total.block_starts));
      continue;
    }
    const std::vector<int64_t> prompt =
        chat_prompt_ids(tokenizer, {{"user", sample.turns[0], std::nullopt}}, options.think);
    const std::string fingerprint = prompt_fingerprint(prompt);
    DiagnoseSums one = zero;
    std::vector<int64_t> traj = prompt;
    const decode::GenerationResult greedy = runner.plain(prompt, params);
    traj.insert(traj.end(), greedy.output_ids.begin(), greedy.output_ids.end());
    const int64_t N = static_cast<int64_t>(prompt.size()), T = static_cast<int64_t>(traj.size());
    one.trajectory_tokens += T - N;

    // Teacher-forced target pass over the whole trajectory (--temps' verified blocks end inside it too).
    model::KVCache cache = target.make_cache(T);
    model::ForwardOutput full = target.forward(at::tensor(traj, at::kLong).to(device), 0, cache,
                                               {true, dc.target_layer_ids, true});
    at::Tensor target_logp = at::log_softmax(full.logits, -1);  // row j predicts token j+1

    // The logit lens: hidden_states[l] (l = 0 the embeddings) through the final norm and the LM head; the last one,
    // hidden_states[L], has had the final norm already.
    const auto lens_logits = [&](int64_t l, int64_t row, int64_t n) {
      at::Tensor h = full.hidden_states[l].narrow(0, row, n);
      const model::Qwen3Config& c = target.config();
      return target.lm_head_logits(l == L ? h : ops::rms_norm(h, target.weights().final_norm, c.rms_norm_eps));
    };
    // Logit lens over the generated positions (rows N-1 .. T-2 predict the generated tokens).
    const int64_t rows = T - N;
    if (rows > 0) {
      at::Tensor final_top = full.logits.narrow(0, N - 1, rows).argmax(-1);
      for (int64_t l = 0; l <= L; ++l)
        one.layer_agree[l] += lens_logits(l, N - 1, rows).argmax(-1).eq(final_top).sum().item<double>();
      one.layer_positions += rows;
    }

    // Draft block at every start s = N .. T-2, context = taps of positions < s.
    model::DraftCache dcache = draft.make_cache(T + B);
    std::vector<int64_t> block(B, dc.mask_token_id);
    at::Tensor block_ids = at::empty({B}, long_opts);
    for (int64_t s = N; s + 1 < T; ++s) {
      const int64_t n_ctx = s - dcache.length;
      block[0] = traj[s];
      block_ids.copy_(at::tensor(block, at::kLong));
      at::Tensor hidden = draft.forward(full.taps.narrow(0, dcache.length, n_ctx), block_ids, dcache);
      const int64_t K = std::min<int64_t>(B - 1, T - 1 - s);  // positions with a known target token
      at::Tensor draft_logits = target.lm_head_logits(hidden.narrow(0, 1, K));
      // --temps: starts whose whole block lies in the trajectory (K = B-1) verify it; the others still write
      // position s with the true token, which the next starts read
      if (!options.temperatures.empty())
        add_sampled_acceptance(target, cache, s, traj[s], draft_logits.argmax(-1), K == B - 1, options.temperatures,
                               one);
      at::Tensor draft_logp = at::log_softmax(draft_logits, -1);
      at::Tensor tgt_logp = target_logp.narrow(0, s, K);  // row s+k-1 predicts position s+k
      at::Tensor tgt_tokens = at::tensor(std::vector<int64_t>(traj.begin() + s + 1, traj.begin() + s + 1 + K), at::kLong).to(device);
      at::Tensor draft_top = draft_logp.argmax(-1);
      at::Tensor correct = draft_top.eq(tgt_tokens).to(at::kCPU);
      at::Tensor tgt_draft_logit = draft_logits.gather(1, tgt_tokens.unsqueeze(1));
      at::Tensor rank = (draft_logits > tgt_draft_logit).sum(1).to(at::kCPU);
      at::Tensor kl = (tgt_logp.exp() * (tgt_logp - draft_logp)).sum(1).to(at::kCPU);
      at::Tensor conf = std::get<0>(draft_logp.max(-1)).exp().to(at::kCPU);
      at::Tensor entropy = -(tgt_logp.exp() * tgt_logp).sum(1).to(at::kCPU);
      auto correct_a = correct.accessor<bool, 1>();
      auto rank_a = rank.accessor<int64_t, 1>();
      auto kl_a = kl.accessor<float, 1>();
      auto conf_a = conf.accessor<float, 1>();
      auto entropy_a = entropy.accessor<float, 1>();
      bool chain = true;
      for (int64_t k = 0; k < K; ++k) {
        const bool ok = correct_a[k];
        chain = chain && ok;
        one.position_count[k] += 1;
        one.top1[k] += ok;
        one.rank[k] += static_cast<double>(rank_a[k]) + 1;
        one.kl[k] += kl_a[k];
        one.chain[k] += chain;
        const double c = conf_a[k];
        int64_t bin = std::min<int64_t>(options.calibration_bins - 1, static_cast<int64_t>(c * options.calibration_bins));
        one.calibration_count[bin] += 1;
        one.calibration_confidence[bin] += c;
        one.calibration_correct[bin] += ok;
        const double h = std::max(0.0, static_cast<double>(entropy_a[k]));  // -0 or a rounding below 0: no entropy
        const size_t e = std::upper_bound(kEntropyEdges.begin(), kEntropyEdges.end(), h) - kEntropyEdges.begin();
        one.entropy_count[e] += 1;
        one.entropy[e] += h;
        one.entropy_top1[e] += ok;
        one.entropy_kl[e] += kl_a[k];
      }
      if (K == B - 1) {  // a whole block: its acceptance length is known, not cut by the trajectory's end
        int64_t accepted = 0;
        while (accepted < K && correct_a[accepted]) ++accepted;
        one.acceptance_length_counts[accepted] += 1;
      }
      // Draft-guided decoding at the first block position (the draft's next-token prediction) and
      // with each tapped layer's logit-lens distribution at the same row.
      at::Tensor t_row = target_logp[s];
      // against the teacher-forced row's own choice (traj[s + 1], from the step-by-step decode, may differ from it at
      // a near tie), so that mixing the target with itself changes nothing
      const int64_t greedy_tok = t_row.argmax().item<int64_t>();
      std::vector<at::Tensor> sources = {draft_logp[0]};
      for (int64_t layer : dc.target_layer_ids)  // tap `layer` is the output of layer `layer`: hidden_states[layer + 1]
        sources.push_back(at::log_softmax(lens_logits(layer + 1, s, 1)[0], -1));
      size_t m = 0;
      for (double w : options.mix_weights) {
        for (const at::Tensor& src : sources) {
          one.mix_positions[m] += 1;
          one.mix_changed[m] += ((1 - w) * t_row + w * src).argmax().item<int64_t>() != greedy_tok;
          ++m;
        }
      }
      one.block_starts += 1;
    }
    total.add(one);
    if (options.on_record)
      options.on_record({sample.id, fingerprint, static_cast<int64_t>(prompt.size()), diagnose_sums_json(one), ""});
    report.samples = ++done;
    bar.update(done, fmt::format("{} block starts", total.block_starts));
  }
  if (report.interrupted)
    bar.stop(fmt::format("stopped after {} of {} samples; {} block starts", done, samples.size(),
                         total.block_starts));
  else
    bar.finish();

  report.trajectory_tokens = total.trajectory_tokens;
  report.block_starts = total.block_starts;
  report.acceptance_length_counts = total.acceptance_length_counts;
  for (int64_t k = 0; k < B - 1; ++k) {
    PositionStats p;
    p.count = total.position_count[k];
    if (p.count > 0) {
      const double n = static_cast<double>(p.count);
      p.top1 = total.top1[k] / n;
      p.mean_rank = total.rank[k] / n;
      p.kl = total.kl[k] / n;
      p.chain_acceptance = total.chain[k] / n;
    }
    report.positions.push_back(p);
  }
  for (int64_t b = 0; b < options.calibration_bins; ++b) {
    CalibrationBin c;
    c.lo = static_cast<double>(b) / options.calibration_bins;
    c.hi = static_cast<double>(b + 1) / options.calibration_bins;
    c.count = total.calibration_count[b];
    if (c.count > 0) {
      c.mean_confidence = total.calibration_confidence[b] / c.count;
      c.accuracy = total.calibration_correct[b] / c.count;
    }
    report.calibration.push_back(c);
  }
  for (size_t e = 0; e < report.by_target_entropy.size(); ++e) {
    EntropyBin& b = report.by_target_entropy[e];
    b.count = total.entropy_count[e];
    const double n = static_cast<double>(std::max<int64_t>(b.count, 1));
    b.mean_entropy = total.entropy[e] / n, b.top1 = total.entropy_top1[e] / n, b.kl = total.entropy_kl[e] / n;
  }
  for (double a : total.layer_agree)
    report.layer_top1.push_back(total.layer_positions > 0 ? a / total.layer_positions : 0.0);
  for (size_t m = 0; m < report.mixing.size(); ++m) {
    report.mixing[m].positions = total.mix_positions[m];
    report.mixing[m].changed = total.mix_changed[m];
  }
  for (size_t t = 0; t < report.sampled.size(); ++t) {
    SampledAcceptance& a = report.sampled[t];
    a.block_starts = total.sampled_starts[t];
    const double n = static_cast<double>(std::max<int64_t>(a.block_starts, 1));
    a.expected_length = total.sampled_length[t] / n;
    for (double p : total.sampled_per_position[t]) a.per_position.push_back(p / n);
  }
  return report;
}

namespace {
// A mean over `count` items, or null where there were none (a rank or a rate of 0 would be a false number).
nlohmann::ordered_json measured(int64_t count, double mean) {
  return count > 0 ? nlohmann::ordered_json(mean) : nlohmann::ordered_json(nullptr);
}
}  // namespace

nlohmann::ordered_json diagnose_json(const DiagnoseReport& r) {
  nlohmann::ordered_json j;
  j["dataset"] = r.options.dataset;
  j["samples"] = r.samples;
  if (r.resumed > 0) j["resumed_samples"] = r.resumed;  // their sums from --checkpoint
  if (r.interrupted) {  // stopped by a signal: what follows covers the samples done
    j["interrupted"] = true;
    j["samples_planned"] = r.samples_planned;
  }
  j["block_size"] = r.block_size;
  j["trajectory_tokens"] = r.trajectory_tokens;
  j["block_starts"] = r.block_starts;
  j["expected_acceptance_length"] = r.expected_acceptance_length();
  j["tap_layers"] = r.tap_layers;
  int64_t whole_blocks = 0;
  for (int64_t n : r.acceptance_length_counts) whole_blocks += n;
  // index a: acceptance length a + 1, over the starts with a whole block in the trajectory
  j["acceptance_length_histogram"] = {{"block_starts", whole_blocks}, {"counts", r.acceptance_length_counts}};
  nlohmann::ordered_json pos = nlohmann::ordered_json::array();
  for (size_t k = 0; k < r.positions.size(); ++k) {
    const auto& p = r.positions[k];
    pos.push_back({{"position", k + 1},
                   {"count", p.count},
                   {"top1_agreement", measured(p.count, p.top1)},
                   {"mean_rank", measured(p.count, p.mean_rank)},
                   {"kl_target_draft", measured(p.count, p.kl)},
                   {"acceptance", measured(p.count, p.chain_acceptance)}});
  }
  j["positions"] = pos;
  nlohmann::ordered_json cal = nlohmann::ordered_json::array();
  for (const auto& c : r.calibration)
    cal.push_back({{"lo", c.lo},
                   {"hi", c.hi},
                   {"count", c.count},
                   {"mean_confidence", measured(c.count, c.mean_confidence)},
                   {"accuracy", measured(c.count, c.accuracy)}});
  j["calibration"] = cal;
  nlohmann::ordered_json ent = nlohmann::ordered_json::array();
  for (const auto& b : r.by_target_entropy)  // the last bin's hi (infinity) as null, which JSON can say
    ent.push_back({{"lo", b.lo}, {"hi", std::isfinite(b.hi) ? nlohmann::ordered_json(b.hi) : nullptr},
                   {"count", b.count}, {"mean_entropy", measured(b.count, b.mean_entropy)},
                   {"top1_agreement", measured(b.count, b.top1)}, {"kl_target_draft", measured(b.count, b.kl)}});
  j["by_target_entropy"] = ent;
  j["layer_top1_agreement"] = r.layer_top1;
  nlohmann::ordered_json mix = nlohmann::ordered_json::array();
  for (const auto& m : r.mixing)
    mix.push_back({{"source", m.source}, {"weight", m.weight}, {"positions", m.positions}, {"changed", m.changed},
                   {"changed_fraction",
                    measured(m.positions, static_cast<double>(m.changed) / std::max<int64_t>(m.positions, 1))}});
  j["mixing"] = mix;
  if (!r.sampled.empty()) {
    nlohmann::ordered_json sampled = nlohmann::ordered_json::array();
    for (const auto& a : r.sampled) {  // no start with a whole block (trajectories shorter than it): nulls
      const bool scored = a.block_starts > 0;
      sampled.push_back({{"temperature", a.temperature},
                         {"block_starts", a.block_starts},
                         {"expected_acceptance_length", scored ? nlohmann::ordered_json(a.expected_length) : nullptr},
                         {"per_position", scored ? nlohmann::ordered_json(a.per_position) : nullptr}});
    }
    j["sampled_acceptance"] = sampled;
  }
  return j;
}

CheckpointFormat diagnose_checkpoint_format() {
  CheckpointFormat f;
  f.format = "specpress diagnose checkpoint";
  f.version = 1;
  f.tool = "diagnose";
  f.other_build_note = "the records it holds are that build's sums";
  return f;
}

nlohmann::ordered_json diagnose_record_json(const DiagnoseRecord& r) {
  return {{"id", r.id}, {"prompt_fingerprint", r.prompt_fingerprint}, {"prompt_tokens", r.prompt_tokens},
          {"sums", r.sums}};
}

std::vector<DiagnoseRecord> diagnose_records(const JsonlCheckpoint& checkpoint) {
  std::vector<DiagnoseRecord> out;
  std::map<std::string, size_t> position;  // id -> its record in `out`
  for (const JsonlCheckpoint::Line& line : checkpoint.lines()) {
    const nlohmann::json& j = line.value;
    for (const char* key : {"id", "prompt_fingerprint"})
      if (!j.contains(key) || !j[key].is_string()) fail("{}: field '{}' must be a string", line.where, key);
    if (!j.contains("sums") || !j["sums"].is_object()) fail("{}: field 'sums' must be an object", line.where);
    DiagnoseRecord r{j["id"].get<std::string>(), j["prompt_fingerprint"].get<std::string>(),
                     count_field(j, "prompt_tokens", line.where), j["sums"], line.where};
    const auto [at, added] = position.emplace(r.id, out.size());
    if (added) out.push_back(std::move(r));
    else out[at->second] = std::move(r);
  }
  return out;
}

}  // namespace specpress::tools
