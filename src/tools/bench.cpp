// bench.cpp — the benchmark driver and its report (see bench.h).
#include "tools/bench.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>

#include <fmt/format.h>

#include "core/error.h"
#include "tools/answers.h"
#include "tools/bench_checkpoint.h"
#include "tools/progress.h"
#include "tools/prompting.h"
#include "tools/device_memory.h"
#include "tools/runner.h"

namespace specpress::tools {
namespace {

void check_resumed_prompt(const BenchRecord& record, const std::vector<int64_t>& prompt, const std::string& dataset) {
  if (record.prompt_fingerprint != prompt_fingerprint(prompt))
    fail("--resume: the checkpoint's record of {} sample {} turn {} was made from another prompt ({} tokens, "
         "fingerprint {}; now {} tokens, {}): the dataset file, the chat template{} or a setting changed; give another "
         "--checkpoint",
         dataset, record.id, record.turn, record.prompt_tokens, record.prompt_fingerprint, prompt.size(),
         prompt_fingerprint(prompt), record.turn > 0 ? ", the recorded answer before it" : "");
}

const BenchRecord* find_record(const std::vector<BenchRecord>& records, const std::string& id, int64_t turn) {
  for (const BenchRecord& r : records)
    if (r.id == id && r.turn == turn) return &r;
  return nullptr;
}

}  // namespace

void check_resumed_prompts(const tok::Tokenizer& tokenizer, const std::vector<BenchSample>& samples,
                           const std::vector<BenchRecord>& records, bool think, const std::string& dataset) {
  if (records.empty()) return;
  for (const BenchSample& sample : samples) {
    std::vector<tok::ChatMessage> messages;
    for (size_t t = 0; t < sample.turns.size(); ++t) {
      const BenchRecord* record = find_record(records, sample.id, static_cast<int64_t>(t));
      if (record == nullptr) break;
      messages.push_back({"user", sample.turns[t], std::nullopt});
      check_resumed_prompt(*record, chat_prompt_ids(tokenizer, messages, think), dataset);
      messages.push_back({"assistant", decode_output(tokenizer, record->dflash.output_ids).text, std::nullopt});
    }
  }
}

BenchReport run_bench(const model::Qwen3Model& target, const model::DFlashDraft& draft, const tok::Tokenizer& tokenizer,
                      const std::vector<BenchSample>& samples, const BenchOptions& options,
                      const std::vector<int64_t>& stop_ids) {
  if (options.max_new_tokens < 1) fail("--max-new-tokens: must be at least 1, found {}", options.max_new_tokens);
  if (samples.empty()) fail("bench: no samples selected");
  BenchReport report;
  report.options = options;
  report.options.resume_records.clear();  // the report keeps its own records
  report.options.on_record = nullptr;
  report.options.plain_results = nullptr;
  report.block_size = decode::resolve_block_size(draft, options.block_size);
  const int64_t max_positions =  // the draft's blocks run past the committed tokens too
      std::min(target.config().max_position_embeddings, draft.config().arch.max_position_embeddings);
  check_first_turns_fit(tokenizer, samples, options.think, options.max_new_tokens, report.block_size, max_positions,
                        options.dataset);
  int64_t total_turns = 0;
  for (const auto& s : samples) total_turns += static_cast<int64_t>(s.turns.size());
  // the checkpoint's records this run asks for again (its samples' turns, each at most once)
  auto find_resumed = [&](const std::string& id, int64_t turn) {
    return find_record(options.resume_records, id, turn);
  };
  int64_t resumable = 0;
  for (const auto& s : samples)
    for (size_t t = 0; t < s.turns.size(); ++t) resumable += find_resumed(s.id, static_cast<int64_t>(t)) ? 1 : 0;

  // Compressed runs edit the reference cache; the uncompressed runs they are compared with must then
  // use the same path, or the comparison would mix kernels.
  GenerationRunner runner(target, &draft, options.reference_path || options.compress.enabled());
  report.fast_path = runner.fast();
  // On the fast path the engines are built here for the longest first turn this run decodes, so that the samples do
  // not rebuild them as longer prompts come (a later turn longer still, as mt-bench's second turns can be, grows
  // them) and every first turn runs on the same engines and capture-time choices. The plain engine only where a
  // plain decoding is not already known (another draft's or block size's run of the same prompts).
  if (runner.fast()) {
    int64_t longest = 0;
    bool plain_needed = false;
    for (const auto& s : samples) {
      if (s.turns.empty() || find_resumed(s.id, 0) != nullptr) continue;
      const std::vector<int64_t> prompt =
          chat_prompt_ids(tokenizer, {{"user", s.turns[0], std::nullopt}}, options.think);
      longest = std::max(longest, static_cast<int64_t>(prompt.size()));
      plain_needed = plain_needed || options.plain_results == nullptr ||
                     options.plain_results->count(prompt_fingerprint(prompt) + " fast") == 0;
    }
    const int64_t positions = longest + options.max_new_tokens;
    double ms = 0;
    if (longest > 0 && plain_needed) ms += runner.reserve_plain(positions + 1);
    if (longest > 0) ms += runner.reserve(positions + report.block_size, report.block_size);
    if (longest > 0 && options.progress)
      std::fprintf(stderr, "bench: the CUDA fast path's %s for up to %lld positions built in %.0f ms\n",
                   plain_needed ? "plain and DFlash engines" : "DFlash engine",
                   static_cast<long long>(positions + report.block_size), ms);
  }
  ProgressBar bar("bench " + options.dataset, total_turns, options.progress, resumable);
  decode::GenerationParams params;
  params.max_new_tokens = options.max_new_tokens;
  params.stop_ids = stop_ids;
  params.sampling = options.sampling;
  int64_t done = 0;
  double tau_sum = 0;
  for (const auto& sample : samples) {
    if (report.interrupted) break;
    std::vector<tok::ChatMessage> messages;
    for (size_t t = 0; t < sample.turns.size(); ++t) {
      messages.push_back({"user", sample.turns[t], std::nullopt});
      std::vector<int64_t> prompt = chat_prompt_ids(tokenizer, messages, options.think);
      const std::string fingerprint = prompt_fingerprint(prompt);
      // a plain decoding serves the runs on the same path (the fast path applies per draft)
      const std::string plain_key = fingerprint + (runner.fast() ? " fast" : " reference");
      if (const BenchRecord* done_before = find_resumed(sample.id, static_cast<int64_t>(t))) {
        check_resumed_prompt(*done_before, prompt, options.dataset);  // (check_resumed_prompts said it, when run)
        BenchRecord rec = *done_before;
        rec.resumed = true;
        if (options.plain_results != nullptr) options.plain_results->emplace(plain_key, rec.plain);
        messages.push_back({"assistant", decode_output(tokenizer, rec.dflash.output_ids).text, std::nullopt});
        tau_sum += rec.dflash.mean_acceptance_length();
        report.records.push_back(std::move(rec));
        ++report.resumed;
        ++done;
        bar.update(done, fmt::format("tau {:.2f}", tau_sum / static_cast<double>(done)));
        continue;
      }
      if (options.keep_going && !options.keep_going()) {
        report.interrupted = true;
        break;
      }
      // a later turn's prompt holds the earlier answers, so it can outgrow the context only now: it and the turns after
      // it are left out (and said), not the whole bench stopped; first turns were all checked before the first sample
      if (auto why = turn_overflow(static_cast<int64_t>(prompt.size()), options.max_new_tokens, report.block_size,
                                   max_positions, turn_name(options.dataset, sample, t))) {
        if (t == 0) fail("{}", *why);
        bar.note(fmt::format("left out (with the turns after it): {}", *why));
        report.turns_left_out.push_back(*why);
        break;
      }
      BenchRecord rec;
      rec.id = sample.id;
      rec.turn = static_cast<int64_t>(t);
      rec.prompt_tokens = static_cast<int64_t>(prompt.size());
      rec.prompt_fingerprint = fingerprint;
      params.block_size = 0;
      auto* cache = options.plain_results;
      if (const auto known = cache != nullptr ? cache->find(plain_key) : decltype(cache->end()){};
          cache != nullptr && known != cache->end()) {
        rec.plain = known->second;
        rec.plain_reused = true;
        ++report.plain_reused;
      } else {
        rec.plain = runner.plain(prompt, params);
        if (cache != nullptr) cache->emplace(plain_key, rec.plain);
      }
      params.block_size = report.block_size;
      std::optional<PeakDeviceMemory> peak;  // with --compress, the uncompressed cache's memory against the compressed
      if (options.compress.enabled()) peak.emplace(target.device());
      rec.dflash = runner.dflash(prompt, params);
      if (peak) rec.dflash_peak_bytes = peak->peak_bytes();
      rec.outputs_equal = rec.plain.output_ids == rec.dflash.output_ids;
      // The reference feeds the DFlash output back as the assistant turn (skip_special_tokens=True).
      const std::string dflash_text = decode_output(tokenizer, rec.dflash.output_ids).text;
      if (options.check_answers && (options.dataset == "gsm8k" || options.dataset == "math500")) {
        rec.has_answers = true;
        rec.plain_answer = last_boxed(decode_output(tokenizer, rec.plain.output_ids).text).value_or("");
        rec.dflash_answer = last_boxed(dflash_text).value_or("");
        rec.reference_answer = sample.answer.value_or("");
      }
      if (options.compress.enabled()) {
        rec.has_compression = true;
        compress::KVCompressor compressor(options.compress, target, rec.prompt_tokens);
        decode::GenerationParams cparams = params;
        cparams.observer = &compressor;
        peak.emplace(target.device());
        rec.compressed = decode::generate_dflash(target, draft, prompt, cparams);
        rec.compressed_peak_bytes = peak->peak_bytes();
        rec.compression = compressor.stats();
        const auto& a = rec.dflash.output_ids;
        const auto& c = rec.compressed.output_ids;
        rec.first_divergence = 0;
        while (rec.first_divergence < static_cast<int64_t>(std::min(a.size(), c.size())) && a[rec.first_divergence] == c[rec.first_divergence])
          ++rec.first_divergence;
        rec.fidelity = compress::evaluate_fidelity(target, prompt, rec.dflash.output_ids, rec.dflash.acceptance_lengths,
                                                   options.compress);
        if (rec.has_answers)
          rec.compressed_answer = last_boxed(decode_output(tokenizer, rec.compressed.output_ids).text).value_or("");
      }
      messages.push_back({"assistant", dflash_text, std::nullopt});
      tau_sum += rec.dflash.mean_acceptance_length();
      if (options.on_record) options.on_record(rec);
      report.records.push_back(std::move(rec));
      ++done;
      bar.update(done, fmt::format("tau {:.2f}", tau_sum / static_cast<double>(done)));
    }
  }
  aggregate(report);
  if (report.interrupted)
    bar.stop(fmt::format("stopped; tau {:.2f}, speedup {:.2f}x over {} turns", report.tau, report.speedup, done));
  else
    bar.finish(fmt::format("tau {:.2f}, speedup {:.2f}x", report.tau, report.speedup));
  return report;
}

namespace {
// Percentiles 2.5 and 97.5 of bootstrap values (sorted here); none: zeros.
Interval percentile_interval(std::vector<double>& v) {
  if (v.empty()) return Interval{};
  std::sort(v.begin(), v.end());
  auto at = [&](double q) { return v[static_cast<size_t>(std::lround(q * static_cast<double>(v.size() - 1)))]; };
  return Interval{at(0.025), at(0.975)};
}
}  // namespace

int64_t distinct_samples(const std::vector<BenchRecord>& records) {
  std::vector<std::string> ids;
  for (const BenchRecord& r : records)
    if (std::find(ids.begin(), ids.end(), r.id) == ids.end()) ids.push_back(r.id);
  return static_cast<int64_t>(ids.size());
}

void bootstrap_intervals(const std::vector<BenchRecord>& records, Interval& speedup, Interval& tau, int resamples) {
  // the records of each sample id, in first-seen order
  std::vector<std::vector<size_t>> samples;
  std::vector<std::string> ids;
  for (size_t i = 0; i < records.size(); ++i) {
    auto it = std::find(ids.begin(), ids.end(), records[i].id);
    if (it == ids.end()) {
      ids.push_back(records[i].id);
      samples.emplace_back();
      it = ids.end() - 1;
    }
    samples[static_cast<size_t>(it - ids.begin())].push_back(i);
  }
  std::vector<double> speedups, taus;
  std::mt19937_64 rng(20261205);
  std::uniform_int_distribution<size_t> pick(0, samples.empty() ? 0 : samples.size() - 1);
  for (int b = 0; b < resamples && !samples.empty(); ++b) {
    double plain = 0, dflash = 0, tau_sum = 0, n = 0;
    for (size_t k = 0; k < samples.size(); ++k)
      for (size_t i : samples[pick(rng)]) {
        plain += records[i].plain.tpot_ms();
        dflash += records[i].dflash.tpot_ms();
        tau_sum += records[i].dflash.mean_acceptance_length();
        n += 1;
      }
    if (dflash > 0) speedups.push_back(plain / dflash);
    taus.push_back(tau_sum / n);
  }
  speedup = percentile_interval(speedups);
  tau = percentile_interval(taus);
}

double mcnemar_exact_p(int64_t b, int64_t c) {
  const int64_t n = b + c, k = std::min(b, c);
  if (n == 0) return 1.0;
  double tail = 0;  // P(X <= k), the terms in logs (n can be in the thousands)
  for (int64_t i = 0; i <= k; ++i)
    tail += std::exp(std::lgamma(n + 1.0) - std::lgamma(i + 1.0) - std::lgamma(n - i + 1.0) - n * std::log(2.0));
  return std::min(1.0, 2 * tail);
}

void aggregate(BenchReport& r) {
  const double n = static_cast<double>(r.records.size());
  if (n == 0) return;
  const int64_t B = r.block_size;
  r.histogram.assign(B, 0.0);
  r.per_position_acceptance.assign(B > 1 ? B - 1 : 0, 0.0);
  r.speedup = r.tau = r.plain_tpot_ms = r.dflash_tpot_ms = r.plain_ttft_ms = r.dflash_ttft_ms = 0;
  r.identical_outputs = r.answers_agree = r.plain_accuracy = r.dflash_accuracy = 0;
  r.answered = 0;
  double steps = 0;
  for (const auto& rec : r.records) {
    r.plain_tpot_ms += rec.plain.tpot_ms() / n;
    r.dflash_tpot_ms += rec.dflash.tpot_ms() / n;
    r.plain_ttft_ms += rec.plain.prefill_ms / n;
    r.dflash_ttft_ms += rec.dflash.prefill_ms / n;
    r.tau += rec.dflash.mean_acceptance_length() / n;
    r.identical_outputs += (rec.outputs_equal ? 1.0 : 0.0) / n;
    for (int64_t len : rec.dflash.acceptance_lengths) {
      if (len < 1 || len > B) fail("internal: acceptance length {} outside 1..{}", len, B);
      r.histogram[len - 1] += 1;
      for (int64_t i = 1; i < len; ++i) r.per_position_acceptance[i - 1] += 1;
      steps += 1;
    }
    if (rec.has_answers) {
      ++r.answered;
      r.answers_agree += answers_match(rec.plain_answer, rec.dflash_answer) ? 1 : 0;  // both unboxed counts as equal
      if (!rec.reference_answer.empty()) {
        r.plain_accuracy += answers_match(rec.plain_answer, rec.reference_answer) ? 1 : 0;
        r.dflash_accuracy += answers_match(rec.dflash_answer, rec.reference_answer) ? 1 : 0;
      }
    }
  }
  if (steps > 0) {
    for (auto& h : r.histogram) h /= steps;
    for (auto& p : r.per_position_acceptance) p /= steps;
  }
  if (r.answered > 0) {
    r.answers_agree /= static_cast<double>(r.answered);
    r.plain_accuracy /= static_cast<double>(r.answered);
    r.dflash_accuracy /= static_cast<double>(r.answered);
  }
  if (!r.records.empty() && r.records[0].has_compression) {
    r.compressed_tau = r.compressed_tpot_ms = r.mean_first_divergence = r.identical_compressed = 0;
    r.dflash_steps_per_answer = r.compressed_steps_per_answer = 0;
    r.compressed_accuracy = 0;
    r.dflash_only_correct = r.compressed_only_correct = 0;
    r.fidelity = compress::FidelityResult{};
    double positions = 0, slots = 0, events = 0, overhead = 0, unit_tokens = 0, unit_slots = 0;
    r.peak_slots = r.kv_cache_bytes_uncompressed = r.kv_cache_bytes_compressed = r.slot_bytes = 0;
    r.peak_device_bytes_uncompressed = r.peak_device_bytes_compressed = std::nullopt;
    auto keep_max = [](std::optional<int64_t>& most, const std::optional<int64_t>& v) {
      if (v) most = std::max(most.value_or(0), *v);
    };
    for (const auto& rec : r.records) {
      r.compressed_tau += rec.compressed.mean_acceptance_length() / n;
      r.dflash_steps_per_answer += static_cast<double>(rec.dflash.acceptance_lengths.size()) / n;
      r.compressed_steps_per_answer += static_cast<double>(rec.compressed.acceptance_lengths.size()) / n;
      r.compressed_tpot_ms += rec.compressed.tpot_ms() / n;
      r.mean_first_divergence += static_cast<double>(rec.first_divergence) / n;
      r.identical_compressed += (rec.compressed.output_ids == rec.dflash.output_ids ? 1.0 : 0.0) / n;
      positions += static_cast<double>(rec.compression.positions);
      slots += static_cast<double>(rec.compression.slots);
      events += static_cast<double>(rec.compression.events);
      overhead += rec.compression.overhead_ms;
      r.peak_slots = std::max(r.peak_slots, rec.compression.peak_slots);
      r.slot_bytes = std::max(r.slot_bytes, rec.compression.kv_bytes_per_slot);  // one target: the same for all
      unit_tokens += static_cast<double>(rec.compression.tokens_compressed);
      unit_slots += static_cast<double>(rec.compression.tokens_compressed - rec.compression.slots_freed);
      r.kv_cache_bytes_uncompressed =
          std::max(r.kv_cache_bytes_uncompressed, rec.compression.cache_positions * rec.compression.kv_bytes_per_slot);
      r.kv_cache_bytes_compressed = std::max(r.kv_cache_bytes_compressed, rec.compression.cache_bytes);
      keep_max(r.peak_device_bytes_uncompressed, rec.dflash_peak_bytes);
      keep_max(r.peak_device_bytes_compressed, rec.compressed_peak_bytes);
      r.fidelity.merge(rec.fidelity);
      if (rec.has_answers && !rec.reference_answer.empty()) {
        const bool dflash_right = answers_match(rec.dflash_answer, rec.reference_answer);
        const bool compressed_right = answers_match(rec.compressed_answer, rec.reference_answer);
        r.compressed_accuracy += compressed_right ? 1 : 0;
        r.dflash_only_correct += dflash_right && !compressed_right;
        r.compressed_only_correct += compressed_right && !dflash_right;
      }
    }
    if (r.answered > 0) r.compressed_accuracy /= static_cast<double>(r.answered);
    r.mcnemar_p = mcnemar_exact_p(r.dflash_only_correct, r.compressed_only_correct);
    r.tau_ratio = r.tau > 0 ? r.compressed_tau / r.tau : 0;
    r.compressed_tokens_per_s = r.compressed_tpot_ms > 0 ? 1e3 / r.compressed_tpot_ms : 0;
    r.effective_ratio = slots > 0 ? positions / slots : 1.0;
    r.span_ratio = unit_slots > 0 ? unit_tokens / unit_slots : std::numeric_limits<double>::quiet_NaN();
    // per sample: an mt-bench sample's turns are records of their own, each a generation with its cache
    r.kv_bytes_saved = (positions - slots) / static_cast<double>(std::max<int64_t>(distinct_samples(r.records), 1)) *
                       static_cast<double>(r.slot_bytes);
    r.overhead_ms_per_event = events > 0 ? overhead / events : 0;
  }
  r.speedup = r.dflash_tpot_ms > 0 ? r.plain_tpot_ms / r.dflash_tpot_ms : 0;
  Interval speedup_ci, tau_ci;
  bootstrap_intervals(r.records, speedup_ci, tau_ci);
  r.speedup_lo = speedup_ci.lo, r.speedup_hi = speedup_ci.hi, r.tau_lo = tau_ci.lo, r.tau_hi = tau_ci.hi;
  r.interval_samples = distinct_samples(r.records);
  r.plain_tokens_per_s = r.plain_tpot_ms > 0 ? 1e3 / r.plain_tpot_ms : 0;
  r.dflash_tokens_per_s = r.dflash_tpot_ms > 0 ? 1e3 / r.dflash_tpot_ms : 0;
}

nlohmann::ordered_json bench_json(const BenchReport& r) {
  nlohmann::ordered_json j;
  j["dataset"] = r.options.dataset;
  if (!r.options.draft.empty()) j["draft"] = r.options.draft;
  j["samples"] = distinct_samples(r.records);
  j["turns"] = r.records.size();  // a record a turn: mt-bench's samples have two
  j["block_size"] = r.block_size;
  j["max_new_tokens"] = r.options.max_new_tokens;
  j["temperature"] = r.options.sampling.temperature;
  j["top_k"] = r.options.sampling.top_k;
  j["top_p"] = r.options.sampling.top_p;
  j["min_p"] = r.options.sampling.min_p;
  j["sampling_seed"] = r.options.sampling.seed;
  if (r.options.sampling.penalized()) j["penalties"] = decode::penalties_json(r.options.sampling);
  if (!r.options.sampling.logit_bias.empty()) j["logit_bias"] = decode::logit_bias_json(r.options.sampling);
  j["enable_thinking"] = r.options.think;
  j["path"] = r.fast_path ? "cuda-fast" : "reference";
  if (r.interrupted) j["interrupted"] = true;  // stopped before its last sample
  if (!r.turns_left_out.empty()) j["turns_left_out"] = r.turns_left_out;  // later turns that outgrew the context
  if (r.resumed > 0) j["resumed_records"] = r.resumed;  // their timings are from the run that made them
  if (r.plain_reused > 0) j["plain_reused_records"] = r.plain_reused;  // plain decoding from an earlier block size
  nlohmann::ordered_json s;
  s["speedup"] = r.speedup;
  s["speedup_ci95"] = {r.speedup_lo, r.speedup_hi};
  s["tau"] = r.tau;
  s["tau_ci95"] = {r.tau_lo, r.tau_hi};
  s["ci95_samples"] = r.interval_samples;  // the bootstrap's unit (mt-bench: a sample of two turns)
  s["plain_tpot_ms"] = r.plain_tpot_ms;
  s["dflash_tpot_ms"] = r.dflash_tpot_ms;
  s["plain_tokens_per_s"] = r.plain_tokens_per_s;
  s["dflash_tokens_per_s"] = r.dflash_tokens_per_s;
  s["plain_ttft_ms"] = r.plain_ttft_ms;
  s["dflash_ttft_ms"] = r.dflash_ttft_ms;
  s["identical_outputs"] = r.identical_outputs;
  s["acceptance_histogram"] = r.histogram;
  s["per_position_acceptance"] = r.per_position_acceptance;
  if (r.answered > 0) {
    s["answers_checked"] = r.answered;
    s["answers_agree"] = r.answers_agree;
    s["plain_accuracy"] = r.plain_accuracy;
    s["dflash_accuracy"] = r.dflash_accuracy;
  }
  if (r.options.compress.enabled()) {
    const auto& f = r.fidelity;
    nlohmann::ordered_json c = compress::policy_json(r.options.compress);
    c["span_ratio"] = r.span_ratio;  // null where no slot is kept for compressed units
    c["effective_ratio"] = r.effective_ratio;
    c["kv_bytes_per_slot"] = r.slot_bytes;
    c["kv_bytes_saved_per_sample"] = r.kv_bytes_saved;
    c["peak_slots"] = r.peak_slots;
    c["kv_cache_bytes"] = {{"uncompressed", r.kv_cache_bytes_uncompressed},
                           {"compressed", r.kv_cache_bytes_compressed}};
    auto or_null = [](const std::optional<int64_t>& v) { return v ? nlohmann::ordered_json(*v) : nullptr; };
    c["peak_device_memory_bytes"] = {{"uncompressed", or_null(r.peak_device_bytes_uncompressed)},
                                     {"compressed", or_null(r.peak_device_bytes_compressed)}};
    c["tau_compressed"] = r.compressed_tau;
    c["tau_ratio"] = r.tau_ratio;
    c["verify_steps_per_answer"] = {{"uncompressed", r.dflash_steps_per_answer},
                                    {"compressed", r.compressed_steps_per_answer}};
    c["compressed_tpot_ms"] = r.compressed_tpot_ms;
    c["compressed_tokens_per_s"] = r.compressed_tokens_per_s;
    c["overhead_ms_per_event"] = r.overhead_ms_per_event;
    c["identical_outputs"] = r.identical_compressed;
    c["mean_first_divergence"] = r.mean_first_divergence;
    c["top1_agreement"] = f.mean_top1();
    c["mean_kl"] = f.mean_kl();
    c["mean_tv"] = f.mean_tv();
    c["perplexity_delta"] = f.perplexity_delta();
    c["fidelity_pairs"] = f.pairs();  // 0: no compression event, and the means above are null
    std::vector<double> top1, kl;  // NaN (null) at an offset no event reached
    const double none = std::numeric_limits<double>::quiet_NaN();
    for (size_t d = 0; d < f.count.size(); ++d) {
      top1.push_back(f.count[d] > 0 ? f.top1[d] / static_cast<double>(f.count[d]) : none);
      kl.push_back(f.count[d] > 0 ? f.kl[d] / static_cast<double>(f.count[d]) : none);
    }
    c["top1_by_offset"] = top1;
    c["kl_by_offset"] = kl;
    c["pairs_by_offset"] = f.count;
    if (r.answered > 0) {  // task accuracy of the compressed output, paired with uncompressed DFlash's
      c["accuracy"] = r.compressed_accuracy;
      c["mcnemar_vs_dflash"] = {{"dflash_only_correct", r.dflash_only_correct},
                                {"compressed_only_correct", r.compressed_only_correct},
                                {"p_value", r.mcnemar_p}};
    }
    s["compression"] = c;
  }
  j["summary"] = s;
  nlohmann::ordered_json recs = nlohmann::ordered_json::array();
  for (const auto& rec : r.records) {
    nlohmann::ordered_json x;
    x["id"] = rec.id;
    x["turn"] = rec.turn;
    x["prompt_tokens"] = rec.prompt_tokens;
    x["plain"] = {{"output_tokens", rec.plain.output_ids.size()}, {"ttft_ms", rec.plain.prefill_ms},
                  {"tpot_ms", rec.plain.tpot_ms()}, {"stop_reason", rec.plain.stopped ? "stop" : "length"}};
    x["dflash"] = {{"output_tokens", rec.dflash.output_ids.size()}, {"ttft_ms", rec.dflash.prefill_ms},
                   {"first_draft_ms", rec.dflash.first_draft_ms}, {"tpot_ms", rec.dflash.tpot_ms()},
                   {"draft_ms", rec.dflash.draft_ms}, {"verify_ms", rec.dflash.verify_ms},
                   {"tau", rec.dflash.mean_acceptance_length()}, {"acceptance_lengths", rec.dflash.acceptance_lengths},
                   {"stop_reason", rec.dflash.stopped ? "stop" : "length"}};
    x["outputs_equal"] = rec.outputs_equal;
    if (rec.resumed) x["resumed"] = true;
    if (rec.plain_reused) x["plain_reused"] = true;
    if (rec.has_compression)
      x["compressed"] = {{"output_tokens", rec.compressed.output_ids.size()}, {"tau", rec.compressed.mean_acceptance_length()},
                         {"tpot_ms", rec.compressed.tpot_ms()}, {"first_divergence", rec.first_divergence},
                         {"events", rec.compression.events}, {"effective_ratio", rec.compression.effective_ratio()},
                         {"top1_agreement", rec.fidelity.mean_top1()}, {"mean_kl", rec.fidelity.mean_kl()},
                         {"perplexity_delta", rec.fidelity.perplexity_delta()}};
    if (rec.has_answers) {
      x["answers"] = {{"plain", rec.plain_answer}, {"dflash", rec.dflash_answer}, {"reference", rec.reference_answer}};
      if (rec.has_compression) x["answers"]["compressed"] = rec.compressed_answer;
    }
    recs.push_back(x);
  }
  j["records"] = recs;
  return j;
}

namespace {
// The decoding settings of a report's line: the temperature, and what else is on (top-k/p, min-p, seed, penalties,
// logit bias).
std::string sampling_text(const decode::SamplingParams& s) {
  std::string text = fmt::format("temperature {}", s.temperature);
  if (!s.greedy()) {
    if (s.top_k > 0) text += fmt::format(", top-k {}", s.top_k);
    if (s.top_p < 1) text += fmt::format(", top-p {}", s.top_p);
    if (s.min_p > 0) text += fmt::format(", min-p {}", s.min_p);
    text += fmt::format(", sampling seed {}", s.seed);
  }
  if (s.penalized())
    text += fmt::format(", repeat penalty {} / presence {} / frequency {} over the last {} tokens", s.repeat_penalty,
                        s.presence_penalty, s.frequency_penalty, s.repeat_last_n);
  if (!s.logit_bias.empty()) text += fmt::format(", logit bias on {} token(s)", s.logit_bias.size());
  return text;
}

// "identical outputs": token for token only where both decodings are greedy; sampled ones draw apart.
std::string identical_text(const BenchReport& r, double share) {
  return r.options.sampling.greedy() ? fmt::format("{:.0f}%", 100 * share)
                                     : fmt::format("{:.0f}% (sampled: equal in distribution, not token for token)",
                                                   100 * share);
}
}  // namespace

std::string bench_markdown(const BenchReport& r) {
  std::string md = fmt::format("## specpress bench: {}\n\n", r.options.dataset);
  if (!r.options.draft.empty()) md += fmt::format("draft {}\n\n", r.options.draft);
  const int64_t samples = distinct_samples(r.records), turns = static_cast<int64_t>(r.records.size());
  md += fmt::format("{} samples{}, block size {}, max new tokens {}, {}, thinking {}, {} path\n\n", samples,
                    turns != samples ? fmt::format(" ({} turns, each a record)", turns) : "", r.block_size,
                    r.options.max_new_tokens, sampling_text(r.options.sampling), r.options.think ? "on" : "off",
                    r.fast_path ? "CUDA fast" : "reference");
  if (r.interrupted)
    md += "stopped by a signal before its last sample: the numbers below cover the samples decoded until then\n\n";
  if (!r.turns_left_out.empty()) {
    md += fmt::format("{} later turns left out (with the turns after them), their prompts and the answers before them "
                      "too long:\n\n", r.turns_left_out.size());
    for (const std::string& why : r.turns_left_out) md += "- " + why + "\n";
    md += "\n";
  }
  if (r.resumed > 0)
    md += fmt::format("{} of the {} records (a record a turn) resumed from --checkpoint (timed by the run that made "
                      "them)\n\n", r.resumed, r.records.size());
  if (r.plain_reused > 0)
    md += fmt::format("plain decoding of {} of the {} records from an earlier run of this bench or its --checkpoint "
                      "(the same prompt and path; it depends on neither the draft nor the block size)\n\n",
                      r.plain_reused, r.records.size());
  md += "| metric | plain (block 1) | DFlash |\n| --- | --- | --- |\n";
  md += fmt::format("| TPOT (ms) | {:.3f} | {:.3f} |\n", r.plain_tpot_ms, r.dflash_tpot_ms);
  md += fmt::format("| tokens/s | {:.1f} | {:.1f} |\n", r.plain_tokens_per_s, r.dflash_tokens_per_s);
  md += fmt::format("| TTFT (ms) | {:.2f} | {:.2f} |\n", r.plain_ttft_ms, r.dflash_ttft_ms);
  md += fmt::format("\n**speedup {:.2f}x, tau {:.2f}**, identical outputs {}\n", r.speedup, r.tau,
                    identical_text(r, r.identical_outputs));
  if (r.interval_samples >= kIntervalMinSamples)
    md += fmt::format("\n95% bootstrap intervals over the {} samples: speedup {:.2f}x to {:.2f}x, tau {:.2f} to "
                      "{:.2f}\n",
                      r.interval_samples, r.speedup_lo, r.speedup_hi, r.tau_lo, r.tau_hi);
  if (r.answered > 0)
    md += fmt::format("\nanswers: DFlash == plain {:.0f}% of {} (accuracy plain {:.1f}%, DFlash {:.1f}%{})\n",
                      100 * r.answers_agree, r.answered, 100 * r.plain_accuracy, 100 * r.dflash_accuracy,
                      r.options.compress.enabled()
                          ? fmt::format(", compressed {:.1f}%; McNemar against DFlash: {} right only uncompressed, {} "
                                        "only compressed, p = {:.3g}",
                                        100 * r.compressed_accuracy, r.dflash_only_correct, r.compressed_only_correct,
                                        r.mcnemar_p)
                          : "");
  if (r.options.compress.enabled()) {
    const compress::Policy& p = r.options.compress;
    const std::string fidelity =
        r.fidelity.pairs() == 0
            ? "no compression event, so no fidelity measured (outputs within the sinks, prompt and window)"
            : fmt::format("top-1 agreement {:.4f}, mean KL {:.4f} nats (pooled over {} event-offset pairs, offsets "
                          "1..{}), perplexity {:+.2f}%",
                          r.fidelity.mean_top1(), r.fidelity.mean_kl(), r.fidelity.pairs(), r.fidelity.max_offset,
                          100 * r.fidelity.perplexity_delta());
    constexpr double kMiB = 1024.0 * 1024.0;
    std::string memory = fmt::format("KV cache {:.2f} MiB allocated against {:.2f} MiB uncompressed",
                                     static_cast<double>(r.kv_cache_bytes_compressed) / kMiB,
                                     static_cast<double>(r.kv_cache_bytes_uncompressed) / kMiB);
    if (r.peak_device_bytes_compressed && r.peak_device_bytes_uncompressed)
      memory += fmt::format(", peak device memory {:.1f} MiB against {:.1f} MiB",
                            static_cast<double>(*r.peak_device_bytes_compressed) / kMiB,
                            static_cast<double>(*r.peak_device_bytes_uncompressed) / kMiB);
    md += fmt::format("\ncompression {} (window {}, sinks {}, merge {}): effective ratio {:.2f}x, span ratio {}, "
                      "{:.1f} KiB KV saved per sample ({}), {}, tau {:.2f} ({:.1f}% of uncompressed; verify steps per "
                      "answer {:.1f} against {:.1f}), identical outputs {}, {:.3f} ms per event\n",
                      compress::method_name(p.method), p.window, p.sinks, p.merge_tokens, r.effective_ratio,
                      std::isnan(r.span_ratio) ? std::string("- (no slot kept)") : fmt::format("{:.2f}", r.span_ratio),
                      r.kv_bytes_saved / 1024.0, memory, fidelity, r.compressed_tau, 100 * r.tau_ratio,
                      r.compressed_steps_per_answer, r.dflash_steps_per_answer,
                      r.options.sampling.greedy()
                          ? fmt::format("{:.0f}%", 100 * r.identical_compressed)
                          : fmt::format("{:.0f}% (sampled: each run draws its own tokens)", 100 * r.identical_compressed),
                      r.overhead_ms_per_event);
  }
  md += "\n| acceptance length | ";
  for (int64_t b = 1; b <= r.block_size; ++b) md += fmt::format("{} | ", b);
  md += "\n| --- |" + std::string() ;
  for (int64_t b = 1; b <= r.block_size; ++b) md += " --- |";
  md += "\n| fraction of steps | ";
  for (double h : r.histogram) md += fmt::format("{:.3f} | ", h);
  md += "\n\n| draft position | ";
  for (size_t i = 1; i <= r.per_position_acceptance.size(); ++i) md += fmt::format("{} | ", i);
  md += "\n| --- |";
  for (size_t i = 1; i <= r.per_position_acceptance.size(); ++i) md += " --- |";
  md += "\n| acceptance rate | ";
  for (double p : r.per_position_acceptance) md += fmt::format("{:.3f} | ", p);
  md += "\n";
  return md;
}

namespace {
// The (draft, block size) pairs of `reports`, in their first order, each with the unweighted mean speedup and tau of
// its runs.
struct BlockMean {
  std::string draft;
  int64_t block_size = 0;
  int64_t runs = 0;
  double speedup = 0, tau = 0;
};
std::vector<BlockMean> means_by_block(const std::vector<BenchReport>& reports) {
  std::vector<BlockMean> means;
  for (const BenchReport& r : reports) {
    auto it = std::find_if(means.begin(), means.end(), [&](const BlockMean& m) {
      return m.draft == r.options.draft && m.block_size == r.block_size;
    });
    if (it == means.end()) it = means.insert(means.end(), BlockMean{r.options.draft, r.block_size});
    it->runs += 1, it->speedup += r.speedup, it->tau += r.tau;
  }
  for (BlockMean& m : means) m.speedup /= static_cast<double>(m.runs), m.tau /= static_cast<double>(m.runs);
  return means;
}
bool several_drafts(const std::vector<BenchReport>& reports) {
  return std::any_of(reports.begin(), reports.end(),
                     [&](const BenchReport& r) { return r.options.draft != reports.front().options.draft; });
}
}  // namespace

std::vector<PairedComparison> paired_comparisons(const std::vector<BenchReport>& reports, int resamples) {
  std::vector<PairedComparison> out;
  for (size_t k = 0; k < reports.size(); ++k) {
    size_t base = 0;
    while (reports[base].options.dataset != reports[k].options.dataset) ++base;
    if (base == k) continue;  // the dataset's first run
    // the records both runs made, by sample id (a sample's turns together)
    std::vector<std::string> ids;
    std::vector<std::vector<std::pair<const BenchRecord*, const BenchRecord*>>> pairs;
    for (const BenchRecord& a : reports[base].records)
      for (const BenchRecord& b : reports[k].records)
        if (a.id == b.id && a.turn == b.turn) {
          auto it = std::find(ids.begin(), ids.end(), a.id);
          if (it == ids.end()) ids.push_back(a.id), pairs.emplace_back(), it = ids.end() - 1;
          pairs[static_cast<size_t>(it - ids.begin())].push_back({&a, &b});
        }
    if (ids.empty()) continue;
    // tau difference and speedup ratio over the drawn samples' records
    auto measure = [&](const std::vector<size_t>& drawn, double& tau_diff, double& ratio) {
      double n = 0, tau = 0, plain_a = 0, dflash_a = 0, plain_b = 0, dflash_b = 0;
      for (size_t i : drawn)
        for (const auto& [a, b] : pairs[i]) {
          tau += b->dflash.mean_acceptance_length() - a->dflash.mean_acceptance_length();
          plain_a += a->plain.tpot_ms(), dflash_a += a->dflash.tpot_ms();
          plain_b += b->plain.tpot_ms(), dflash_b += b->dflash.tpot_ms();
          n += 1;
        }
      tau_diff = tau / n;
      ratio = dflash_a > 0 && dflash_b > 0 && plain_a > 0 ? (plain_b / dflash_b) / (plain_a / dflash_a) : 0;
    };
    PairedComparison c;
    c.dataset = reports[k].options.dataset, c.base = base, c.run = k;
    c.samples = static_cast<int64_t>(ids.size());
    std::vector<size_t> all(ids.size());
    for (size_t i = 0; i < all.size(); ++i) all[i] = i;
    measure(all, c.tau_diff, c.speedup_ratio);
    std::mt19937_64 rng(20261205);
    std::uniform_int_distribution<size_t> pick(0, ids.size() - 1);
    std::vector<double> taus, ratios;
    std::vector<size_t> drawn(ids.size());
    for (int r = 0; r < resamples; ++r) {
      for (size_t& i : drawn) i = pick(rng);
      double t = 0, q = 0;
      measure(drawn, t, q);
      taus.push_back(t), ratios.push_back(q);
    }
    const Interval tau_ci = percentile_interval(taus), ratio_ci = percentile_interval(ratios);
    c.tau_diff_lo = tau_ci.lo, c.tau_diff_hi = tau_ci.hi;
    c.speedup_ratio_lo = ratio_ci.lo, c.speedup_ratio_hi = ratio_ci.hi;
    out.push_back(c);
  }
  return out;
}

std::string bench_summary_markdown(const std::vector<BenchReport>& reports) {
  const bool drafts = several_drafts(reports);
  const std::string draft_head = drafts ? "draft | " : "", draft_rule = drafts ? "--- | " : "";
  std::string md = fmt::format(
      "## specpress bench: summary\n\n(in parentheses: 95% bootstrap intervals over each run's samples, for runs of "
      "{} samples or more; two runs over the same prompts are compared paired, below)\n\n",
      kIntervalMinSamples);
  md += "| dataset | " + draft_head +
        "block | samples | speedup | tau | plain tokens/s | DFlash tokens/s | identical outputs | answers agree |\n";
  md += "| --- | " + draft_rule + "--- | --- | --- | --- | --- | --- | --- | --- |\n";
  for (const BenchReport& r : reports) {
    const std::string answers = r.answered > 0 ? fmt::format("{:.0f}% of {}", 100 * r.answers_agree, r.answered) : "-";
    const bool intervals = r.interval_samples >= kIntervalMinSamples;
    const std::string speedup_ci = intervals ? fmt::format(" ({:.2f}-{:.2f})", r.speedup_lo, r.speedup_hi) : "";
    const std::string tau_ci = intervals ? fmt::format(" ({:.2f}-{:.2f})", r.tau_lo, r.tau_hi) : "";
    const std::string identical =
        r.options.sampling.greedy() ? fmt::format("{:.0f}%", 100 * r.identical_outputs) : "- (sampled)";
    const int64_t samples = distinct_samples(r.records), turns = static_cast<int64_t>(r.records.size());
    md += fmt::format("| {} | {}{} | {}{} | {:.2f}x{} | {:.2f}{} | {:.1f} | {:.1f} | {} | {} |\n", r.options.dataset,
                      drafts ? r.options.draft + " | " : "", r.block_size, samples,
                      turns != samples ? fmt::format(" ({} turns)", turns) : "", r.speedup, speedup_ci,
                      r.tau, tau_ci, r.plain_tokens_per_s, r.dflash_tokens_per_s, identical, answers);
  }
  for (const BlockMean& m : means_by_block(reports))
    md += fmt::format("| mean of runs | {}{} | | {:.2f}x | {:.2f} | | | | |\n", drafts ? m.draft + " | " : "",
                      m.block_size, m.speedup, m.tau);
  if (!reports.empty() && reports[0].options.compress.enabled()) {  // one policy for every run of a bench
    const compress::Policy& p = reports[0].options.compress;
    md += fmt::format("\nCompressed DFlash ({}, window {}, sinks {}, merge {}) against uncompressed DFlash, each "
                      "run:\n\n| dataset | {}block | effective ratio | top-1 agreement | mean KL (nats) | perplexity | tau "
                      "compressed | identical outputs |\n| --- | {}--- | --- | --- | --- | --- | --- | --- |\n",
                      p.method == compress::Method::kBeacon ? p.beacon_dir : compress::method_name(p.method), p.window,
                      p.sinks, p.merge_tokens, draft_head, draft_rule);
    for (const BenchReport& r : reports) {
      const bool measured = r.fidelity.pairs() > 0;  // else no event: nothing compared
      md += fmt::format("| {} | {}{} | {:.2f}x | {} | {} | {:+.2f}% | {:.2f} | {} |\n", r.options.dataset,
                        drafts ? r.options.draft + " | " : "", r.block_size, r.effective_ratio,
                        measured ? fmt::format("{:.4f}", r.fidelity.mean_top1()) : "- (no event)",
                        measured ? fmt::format("{:.4f}", r.fidelity.mean_kl()) : "-",
                        100 * r.fidelity.perplexity_delta(), r.compressed_tau,
                        r.options.sampling.greedy() ? fmt::format("{:.0f}%", 100 * r.identical_compressed)
                                                    : "- (sampled)");
    }
  }
  const std::vector<PairedComparison> comparisons = paired_comparisons(reports);
  if (comparisons.empty()) return md;
  md += fmt::format("\nEach run against its dataset's first, paired over the samples both decoded (95% bootstrap "
                    "intervals from {} samples up):\n\n",
                    kIntervalMinSamples);
  md += "| dataset | run | against | samples | tau difference | speedup ratio |\n";
  md += "| --- | --- | --- | --- | --- | --- |\n";
  const auto label = [&](const BenchReport& r) {
    return drafts ? fmt::format("{} block {}", r.options.draft, r.block_size) : fmt::format("block {}", r.block_size);
  };
  for (const PairedComparison& c : comparisons) {
    const bool intervals = c.samples >= kIntervalMinSamples;
    md += fmt::format("| {} | {} | {} | {} | {:+.2f}{} | {:.3f}x{} |\n", c.dataset, label(reports[c.run]),
                      label(reports[c.base]), c.samples, c.tau_diff,
                      intervals ? fmt::format(" ({:+.2f} to {:+.2f})", c.tau_diff_lo, c.tau_diff_hi) : "",
                      c.speedup_ratio,
                      intervals ? fmt::format(" ({:.3f}-{:.3f})", c.speedup_ratio_lo, c.speedup_ratio_hi) : "");
  }
  return md;
}

nlohmann::ordered_json bench_summary_json(const std::vector<BenchReport>& reports) {
  nlohmann::ordered_json rows = nlohmann::ordered_json::array(), means = nlohmann::ordered_json::array();
  for (const BenchReport& r : reports) {
    nlohmann::ordered_json row = {{"dataset", r.options.dataset},
                                  {"draft", r.options.draft},
                                  {"block_size", r.block_size},
                                  {"samples", distinct_samples(r.records)},
                                  {"turns", r.records.size()},
                                  {"speedup", r.speedup},
                                  {"speedup_ci95", {r.speedup_lo, r.speedup_hi}},
                                  {"tau", r.tau},
                                  {"tau_ci95", {r.tau_lo, r.tau_hi}},
                                  {"ci95_samples", r.interval_samples},
                                  {"plain_tokens_per_s", r.plain_tokens_per_s},
                                  {"dflash_tokens_per_s", r.dflash_tokens_per_s},
                                  {"identical_outputs", r.identical_outputs}};
    if (r.answered > 0) row["answers_agree"] = r.answers_agree;
    if (r.options.compress.enabled())  // the dataset's own report holds the rest (its summary's "compression")
      row["compression"] = {{"effective_ratio", r.effective_ratio},
                            {"fidelity_pairs", r.fidelity.pairs()},
                            {"top1_agreement", r.fidelity.mean_top1()},  // NaN, written null, where no pair
                            {"mean_kl", r.fidelity.mean_kl()},
                            {"perplexity_delta", r.fidelity.perplexity_delta()},
                            {"tau_compressed", r.compressed_tau},
                            {"identical_outputs", r.identical_compressed}};
    rows.push_back(std::move(row));
  }
  for (const BlockMean& m : means_by_block(reports))
    means.push_back({{"draft", m.draft},
                     {"block_size", m.block_size},
                     {"runs", m.runs},
                     {"mean_speedup", m.speedup},
                     {"mean_tau", m.tau}});
  nlohmann::ordered_json comparisons = nlohmann::ordered_json::array();
  for (const PairedComparison& c : paired_comparisons(reports))
    comparisons.push_back({{"dataset", c.dataset},
                           {"run_index", c.run},       // into "datasets"
                           {"against_index", c.base},
                           {"samples", c.samples},
                           {"tau_difference", c.tau_diff},
                           {"tau_difference_ci95", {c.tau_diff_lo, c.tau_diff_hi}},
                           {"speedup_ratio", c.speedup_ratio},
                           {"speedup_ratio_ci95", {c.speedup_ratio_lo, c.speedup_ratio_hi}}});
  return {{"datasets", rows}, {"means", means}, {"paired", comparisons}};
}

}  // namespace specpress::tools
