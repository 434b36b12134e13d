// diagnose.cpp — draft-vs-target diagnostics along the target's greedy trajectory (see diagnose.h).
#include "tools/diagnose.h"

#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "core/error.h"
#include "decode/generation.h"
#include "ops/rmsnorm.h"
#include "tools/progress.h"
#include "tools/prompting.h"
#include "tools/runner.h"

namespace specpress::tools {
namespace {

// Accumulates one sample's statistics into running sums.
struct Sums {
  std::vector<double> top1, rank, kl, chain;
  std::vector<int64_t> count;
  std::vector<int64_t> bin_count;
  std::vector<double> bin_conf, bin_correct;
  std::vector<double> layer_agree;
  int64_t layer_positions = 0;
  std::vector<MixResult> mixing;
};

// The target verifies the block [bonus, drafted...] at positions s.. (the cache holding the trajectory's true tokens
// before s: each start rewrites position s with the true token, and later starts only read positions before
// theirs), and, where `scored`, each temperature's step acceptance is added in: drafted token k is accepted with
// probability prod_{j<=k} p_T(d_j | context, d_<j); greedy temperatures (below the sampler's 1e-5) take p_T as 1 for
// the target's argmax and 0 elsewhere.
void add_sampled_acceptance(const model::Qwen3Model& target, model::KVCache& cache, int64_t s, int64_t bonus,
                            const at::Tensor& drafted, bool scored, std::vector<SampledAcceptance>& sampled) {
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
  for (SampledAcceptance& a : sampled) {
    decode::SamplingParams sampling;
    sampling.temperature = a.temperature;
    at::Tensor p = sampling.greedy() ? logits.argmax(-1).eq(drafted).to(at::kDouble)
                                     : at::softmax(logits / a.temperature, -1).gather(1, index).squeeze(1).to(at::kDouble);
    at::Tensor accepted = at::cumprod(p, 0).to(at::kCPU);
    auto acc = accepted.accessor<double, 1>();
    a.block_starts += 1;
    a.expected_length += 1;
    for (int64_t k = 0; k < drafts; ++k) {
      a.per_position[k] += acc[k];
      a.expected_length += acc[k];
    }
  }
}

}  // namespace

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
  report.acceptance_length_counts.assign(B, 0);

  Sums sums;
  sums.top1.assign(B - 1, 0);
  sums.rank = sums.kl = sums.chain = sums.top1;
  sums.count.assign(B - 1, 0);
  sums.bin_count.assign(options.calibration_bins, 0);
  sums.bin_conf.assign(options.calibration_bins, 0);
  sums.bin_correct.assign(options.calibration_bins, 0);
  sums.layer_agree.assign(L + 1, 0);
  // the target-entropy bins hold their sums until the end, then their means
  for (size_t e = 0; e <= kEntropyEdges.size(); ++e)
    report.by_target_entropy.push_back({e == 0 ? 0.0 : kEntropyEdges[e - 1],
                                        e < kEntropyEdges.size() ? kEntropyEdges[e]
                                                                 : std::numeric_limits<double>::infinity()});
  for (double t : options.temperatures) report.sampled.push_back({t, 0, 0, std::vector<double>(B - 1, 0.0)});
  for (double w : options.mix_weights) {
    sums.mixing.push_back({"draft", w, 0, 0});
    for (int64_t layer : dc.target_layer_ids) sums.mixing.push_back({fmt::format("layer {}", layer), w, 0, 0});
  }

  // every start s <= T-2 runs a whole draft block (positions up to s+B-1): a turn needs a block's room, as in bench
  const int64_t max_positions =
      std::min(target.config().max_position_embeddings, dc.arch.max_position_embeddings);
  const int64_t longest_first_turn = check_first_turns_fit(tokenizer, samples, options.think, options.max_new_tokens,
                                                           B, max_positions, options.dataset);
  GenerationRunner runner(target, nullptr);
  runner.reserve(longest_first_turn + options.max_new_tokens + 1);  // the fast path's engine, once for every sample
  ProgressBar bar("diagnose " + options.dataset, static_cast<int64_t>(samples.size()), options.progress);
  decode::GenerationParams params;
  params.max_new_tokens = options.max_new_tokens;
  params.stop_ids = stop_ids;
  const at::Device device = target.device();
  auto long_opts = at::TensorOptions().dtype(at::kLong).device(device);
  int64_t done = 0;
  for (const auto& sample : samples) {
    if (options.keep_going && !options.keep_going()) {
      report.interrupted = true;
      break;
    }
    std::vector<int64_t> prompt = chat_prompt_ids(tokenizer, {{"user", sample.turns[0], std::nullopt}}, options.think);
    std::vector<int64_t> traj = prompt;
    const decode::GenerationResult greedy = runner.plain(prompt, params);
    traj.insert(traj.end(), greedy.output_ids.begin(), greedy.output_ids.end());
    const int64_t N = static_cast<int64_t>(prompt.size()), T = static_cast<int64_t>(traj.size());
    report.trajectory_tokens += T - N;

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
        sums.layer_agree[l] += lens_logits(l, N - 1, rows).argmax(-1).eq(final_top).sum().item<double>();
      sums.layer_positions += rows;
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
        add_sampled_acceptance(target, cache, s, traj[s], draft_logits.argmax(-1), K == B - 1, report.sampled);
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
        sums.count[k] += 1;
        sums.top1[k] += ok;
        sums.rank[k] += static_cast<double>(rank_a[k]) + 1;
        sums.kl[k] += kl_a[k];
        sums.chain[k] += chain;
        const double c = conf_a[k];
        int64_t bin = std::min<int64_t>(options.calibration_bins - 1, static_cast<int64_t>(c * options.calibration_bins));
        sums.bin_count[bin] += 1;
        sums.bin_conf[bin] += c;
        sums.bin_correct[bin] += ok;
        const double h = std::max(0.0, static_cast<double>(entropy_a[k]));  // -0 or a rounding below 0: no entropy
        EntropyBin& eb = report.by_target_entropy[std::upper_bound(kEntropyEdges.begin(), kEntropyEdges.end(), h) -
                                                  kEntropyEdges.begin()];
        eb.count += 1;
        eb.mean_entropy += h;
        eb.top1 += ok;
        eb.kl += kl_a[k];
      }
      if (K == B - 1) {  // a whole block: its acceptance length is known, not cut by the trajectory's end
        int64_t accepted = 0;
        while (accepted < K && correct_a[accepted]) ++accepted;
        report.acceptance_length_counts[accepted] += 1;
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
          sums.mixing[m].positions += 1;
          sums.mixing[m].changed += ((1 - w) * t_row + w * src).argmax().item<int64_t>() != greedy_tok;
          ++m;
        }
      }
      report.block_starts += 1;
    }
    ++done;
    report.samples = done;
    bar.update(done, fmt::format("{} block starts", report.block_starts));
  }
  if (report.interrupted)
    bar.stop(fmt::format("stopped after {} of {} samples; {} block starts", done, samples.size(),
                         report.block_starts));
  else
    bar.finish();

  for (int64_t k = 0; k < B - 1; ++k) {
    PositionStats p;
    p.count = sums.count[k];
    if (p.count > 0) {
      const double n = static_cast<double>(p.count);
      p.top1 = sums.top1[k] / n;
      p.mean_rank = sums.rank[k] / n;
      p.kl = sums.kl[k] / n;
      p.chain_acceptance = sums.chain[k] / n;
    }
    report.positions.push_back(p);
  }
  for (int64_t b = 0; b < options.calibration_bins; ++b) {
    CalibrationBin c;
    c.lo = static_cast<double>(b) / options.calibration_bins;
    c.hi = static_cast<double>(b + 1) / options.calibration_bins;
    c.count = sums.bin_count[b];
    if (c.count > 0) {
      c.mean_confidence = sums.bin_conf[b] / c.count;
      c.accuracy = sums.bin_correct[b] / c.count;
    }
    report.calibration.push_back(c);
  }
  for (EntropyBin& b : report.by_target_entropy) {
    const double n = static_cast<double>(std::max<int64_t>(b.count, 1));
    b.mean_entropy /= n, b.top1 /= n, b.kl /= n;
  }
  for (double a : sums.layer_agree)
    report.layer_top1.push_back(sums.layer_positions > 0 ? a / sums.layer_positions : 0.0);
  report.mixing = sums.mixing;
  for (SampledAcceptance& a : report.sampled) {
    const double n = static_cast<double>(std::max<int64_t>(a.block_starts, 1));
    a.expected_length /= n;
    for (double& p : a.per_position) p /= n;
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

}  // namespace specpress::tools
