// common.cpp — see common.h.
#include "cli/common.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <random>
#include <filesystem>

#include <ATen/Parallel.h>
#include <fmt/format.h>

#include "cli/escapes.h"
#include "cli/id_list.h"
#include "core/error.h"
#include "io/mapped_file.h"
#include "model/config_json.h"
#include "model/qwen3.h"
#include "tokenizer/utf8.h"

namespace specpress::cli {
namespace fs = std::filesystem;

std::vector<int64_t> default_stop_ids(const std::string& model_dir) {
  for (const char* name : {"generation_config.json", "config.json"}) {
    fs::path p = fs::path(model_dir) / name;
    if (!fs::exists(p)) continue;
    nlohmann::json j = model::ConfigReader::parse_file(p.string());
    model::ConfigReader r{j, p.string()};
    std::vector<int64_t> ids = r.integer_list("eos_token_id");
    if (ids.empty()) continue;
    // checked here, naming the file, before the weights load (config.json's own ids are checked with the model's
    // config; a bad one would otherwise be reported later as a --stop-ids the user never gave)
    const fs::path config = fs::path(model_dir) / "config.json";
    const nlohmann::json cj = fs::exists(config) ? model::ConfigReader::parse_file(config.string()) : nlohmann::json();
    // (a vocab_size that is not a positive integer is config.json's error, reported with the model's config)
    const bool sized = cj.is_object() && cj.contains("vocab_size") && cj["vocab_size"].is_number_integer() &&
                       cj["vocab_size"].get<int64_t>() > 0;
    const int64_t vocab = sized ? cj["vocab_size"].get<int64_t>() : INT64_MAX;
    for (int64_t id : ids) {
      if (id < 0 && !sized) fail("{}: field 'eos_token_id': {} is negative (token ids count from 0)", p.string(), id);
      if (id < 0 || id >= vocab)
        fail("{}: field 'eos_token_id': {} is outside the vocabulary 0..{}", p.string(), id, vocab - 1);
    }
    return ids;
  }
  return {};
}

std::optional<tok::Tokenizer> load_tokenizer_if_present(const std::string& model_dir) {
  model::config_path_in(model_dir, "an HF model directory");  // a missing directory is named as such
  if (!fs::exists(fs::path(model_dir) / "tokenizer.json")) return std::nullopt;
  return tok::Tokenizer::from_dir(model_dir);
}

void print_timings(const decode::GenerationResult& r) {
  const double n_prompt = static_cast<double>(r.prompt_tokens), n_out = static_cast<double>(r.output_ids.size());
  std::fprintf(stderr, "\nprompt eval time = %10.2f ms / %5lld tokens (%8.2f ms per token, %8.2f tokens per second)\n",
               r.prefill_ms, static_cast<long long>(r.prompt_tokens), n_prompt > 0 ? r.prefill_ms / n_prompt : 0.0,
               r.prefill_ms > 0 ? 1e3 * n_prompt / r.prefill_ms : 0.0);
  std::fprintf(stderr, "       eval time = %10.2f ms / %5lld tokens (%8.2f ms per token, %8.2f tokens per second)\n",
               r.decode_ms, static_cast<long long>(r.output_ids.size()), r.tpot_ms(),
               r.decode_ms > 0 ? 1e3 * n_out / r.decode_ms : 0.0);
  std::fprintf(stderr, "      total time = %10.2f ms / %5lld tokens\n", r.prefill_ms + r.first_draft_ms + r.decode_ms,
               static_cast<long long>(r.prompt_tokens + static_cast<int64_t>(r.output_ids.size())));
  if (r.block_size > 1) {
    const int64_t drafted = r.drafted_tokens(), accepted = r.accepted_tokens();
    std::fprintf(stderr, "draft acceptance rate = %.5f (%lld accepted / %lld generated)\n",
                 drafted > 0 ? static_cast<double>(accepted) / drafted : 0.0, static_cast<long long>(accepted),
                 static_cast<long long>(drafted));
    std::fprintf(stderr, "mean accepted length (tau) = %.3f over %zu steps (block size %lld)\n",
                 r.mean_acceptance_length(), r.acceptance_lengths.size(), static_cast<long long>(r.block_size));
    std::fprintf(stderr, "draft time = %.2f ms (first call %.2f ms), verify time = %.2f ms\n", r.draft_ms,
                 r.first_draft_ms, r.verify_ms);
  }
}

nlohmann::ordered_json result_json(const decode::GenerationResult& r) {
  nlohmann::ordered_json j;
  j["output_ids"] = r.output_ids;
  const double n_prompt = static_cast<double>(r.prompt_tokens), n_out = static_cast<double>(r.output_ids.size());
  nlohmann::ordered_json t;
  t["prompt_n"] = r.prompt_tokens;
  t["prompt_ms"] = r.prefill_ms;
  t["prompt_per_token_ms"] = n_prompt > 0 ? r.prefill_ms / n_prompt : 0.0;
  t["prompt_per_second"] = r.prefill_ms > 0 ? 1e3 * n_prompt / r.prefill_ms : 0.0;
  t["predicted_n"] = r.output_ids.size();
  t["predicted_ms"] = r.decode_ms;
  t["predicted_per_token_ms"] = r.tpot_ms();
  t["predicted_per_second"] = r.decode_ms > 0 ? 1e3 * n_out / r.decode_ms : 0.0;
  t["draft_n"] = r.block_size > 1 ? r.drafted_tokens() : 0;
  t["draft_n_accepted"] = r.block_size > 1 ? r.accepted_tokens() : 0;
  if (r.block_size > 1) {
    t["first_draft_ms"] = r.first_draft_ms;
    t["draft_ms"] = r.draft_ms;
    t["verify_ms"] = r.verify_ms;
  }
  j["timings"] = t;
  j["stop_reason"] = r.stopped ? "stop" : "length";
  if (r.block_size > 1) {
    j["block_size"] = r.block_size;
    j["acceptance_lengths"] = r.acceptance_lengths;
    j["mean_acceptance_length"] = r.mean_acceptance_length();
    std::vector<double> histogram(r.block_size, 0.0);
    for (int64_t len : r.acceptance_lengths) histogram[len - 1] += 1.0;
    for (auto& h : histogram) h /= r.acceptance_lengths.empty() ? 1.0 : static_cast<double>(r.acceptance_lengths.size());
    j["acceptance_histogram"] = histogram;  // index k: fraction of steps with acceptance length k+1
    j["per_position_acceptance"] = r.per_position_acceptance();
    if (!r.steps.empty()) {
      nlohmann::ordered_json steps = nlohmann::ordered_json::array();
      for (const auto& s : r.steps)
        steps.push_back({{"start", s.start}, {"block", s.block}, {"posterior", s.posterior}, {"accepted", s.accepted}});
      j["steps"] = steps;
    }
  }
  return j;
}

namespace {

// A flag's callback runs inside CLI11's parse, which takes its own errors only: ours (naming the flag) become a
// ValidationError.
template <typename F>
void as_validation_error(const F& f) {
  try {
    f();
  } catch (const Error& e) {
    throw CLI::ValidationError(std::string(e.what()));
  }
}

}  // namespace

void add_device_flag(CLI::App& cmd, std::string& device) {
  cmd.add_option("--device", device,
                 "auto (cuda where this build and machine have a GPU, else cpu), cpu, cuda or cuda:N")
      ->capture_default_str();
  // LibTorch's intra-op threads, set as the flag is read (before any operator runs), as llama.cpp's -t
  cmd.add_option_function<int64_t>(
         "-t,--threads", [](const int64_t& n) { if (n > 0) at::set_num_threads(static_cast<int>(n)); },
         fmt::format("CPU threads for the operators: -1 (the default) LibTorch's own choice, one a core or "
                     "OMP_NUM_THREADS; else 1 .. {}", kMaxCpuThreads))
      ->default_str("-1")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {  // the numeric transform has made it a plain decimal integer
            const long long n = std::strtoll(text.c_str(), nullptr, 10);
            if (n == -1 || (n >= 1 && n <= kMaxCpuThreads)) return "";
            return fmt::format("expected -1 (LibTorch's choice) or a thread count of 1 .. {}, found {}",
                               kMaxCpuThreads, text);
          },
          ""));
}

void add_placement_flags(CLI::App& cmd, std::string& device, std::string& dtype) {
  add_device_flag(cmd, device);
  cmd.add_option("--dtype", dtype, "compute dtype: auto (bf16 on CUDA, f32 on the CPU), f32, bf16 or f16")
      ->capture_default_str();
}

Placement parse_placement(const std::string& device_name, const std::string& dtype_name) {
  const at::Device device = model::parse_device(device_name, "--device");
  const at::ScalarType dtype = model::parse_compute_dtype(dtype_name, device, "--dtype");
  model::check_dtype_on_device(dtype, device, "--dtype");
  return {device, dtype};
}

void add_sampling_flags(CLI::App& cmd, decode::SamplingParams& sampling, const std::string& prefix) {
  // numbers as every numeric flag reads them (numeric_flags.h: an empty value, an unset variable, is refused)
  cmd.add_option("--temp", sampling.temperature, prefix + "temperature (0 = greedy)")->capture_default_str();
  cmd.add_option("--top-k", sampling.top_k, prefix + "top-k (0 = off)")->capture_default_str();
  cmd.add_option("--top-p", sampling.top_p, prefix + "top-p (1 = off)")->capture_default_str();
  cmd.add_option("--min-p", sampling.min_p, prefix + "min-p (0 = off)")->capture_default_str();
  cmd.add_option("--repeat-penalty", sampling.repeat_penalty,
                 prefix + "repeat penalty over the last --repeat-last-n tokens: logit / p (x p where <= 0) (1 = off)")
      ->capture_default_str();
  cmd.add_option("--repeat-last-n", sampling.repeat_last_n,
                 prefix + "penalty window: the context's last N tokens, prompt included (0 = off, -1 = all)")
      ->capture_default_str();
  cmd.add_option("--presence-penalty", sampling.presence_penalty,
                 prefix + "presence penalty: lower every token in the window by this (0 = off)")
      ->capture_default_str();
  cmd.add_option("--frequency-penalty", sampling.frequency_penalty,
                 prefix + "frequency penalty: lower each token by this times its count in the window (0 = off)")
      ->capture_default_str();
  cmd.add_option_function<std::vector<std::string>>(
      "--logit-bias",
      [&sampling](const std::vector<std::string>& items) {
        for (const std::string& item : items) sampling.logit_bias.push_back(parse_logit_bias(item));
      },
      prefix + "logit bias: add BIAS to a token's logit, as llama.cpp's TOKEN_ID(+/-)BIAS (e.g. 15043+1.5, "
               "15043-inf: never); repeatable");
  // last: their callbacks run after the flags above are set, and turn off the samplers they leave out
  cmd.add_option_function<std::string>(
      "--samplers",
      [&sampling](const std::string& sequence) {
        std::vector<std::string> names;
        for (size_t start = 0; start <= sequence.size();) {
          const size_t end = std::min(sequence.find(';', start), sequence.size());
          if (end > start) names.push_back(sequence.substr(start, end - start));
          start = end + 1;
        }
        as_validation_error([&] { decode::apply_sampler_sequence(names, sampling, "--samplers"); });
      },
      prefix + "llama.cpp's sampler sequence, ';'-separated: penalties;temperature;top_k;top_p;min_p (transformers' "
               "order, the default) or penalties;top_k;top_p;min_p;temperature (llama.cpp's: top-p and min-p see "
               "the untempered logits); samplers left out are off");
  cmd.add_option_function<std::string>(
      "--sampling-seq",
      [&sampling](const std::string& letters) {
        as_validation_error([&] {
          decode::apply_sampler_sequence(decode::sampler_names_of_letters(letters, "--sampling-seq"), sampling,
                                         "--sampling-seq");
        });
      },
      prefix + "--samplers in llama.cpp's letters (e penalties, k top_k, p top_p, m min_p, t temperature; e.g. "
               "ekpmt)");
}

std::pair<int64_t, double> parse_logit_bias(const std::string& item) {
  const size_t sign = item.find_first_of("+-", 1);
  auto bad = [&](const std::string& why) {
    return CLI::ValidationError("--logit-bias", fmt::format("'{}': {} (expected TOKEN_ID+BIAS or TOKEN_ID-BIAS, "
                                                            "e.g. 15043+1.5 or 15043-inf)", item, why));
  };
  if (sign == std::string::npos) throw bad("no + or - between the token id and the bias");
  const std::string id_text = item.substr(0, sign), bias_text = item.substr(sign);
  if (id_text.empty() || id_text.find_first_not_of("0123456789") != std::string::npos || id_text.size() > 12)
    throw bad("the token id is not a non-negative integer");
  double bias = 0;
  if (bias_text == "-inf") {
    bias = -std::numeric_limits<double>::infinity();
  } else {
    size_t used = 0;
    try {
      bias = std::stod(bias_text, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != bias_text.size() || !std::isfinite(bias)) throw bad("the bias is not a finite number or -inf");
  }
  return {std::stoll(id_text), bias};
}

void add_compression_flags(CLI::App& cmd, std::string& method, compress::Policy& policy) {
  CLI::Option* compress =
      cmd.add_option("--compress", method,
                     "KV compression of aged accepted spans: none, drop, keep-last, mean-merge, top-attention, "
                     "window-only, or a beacon compressor directory (specpress train-compressor)")
          ->capture_default_str();
  // the policy's flags only apply with --compress: given alone they are an error, not ignored; those not given take a
  // beacon compressor's trained values (compress::resolve_compress), else these defaults
  policy.given = {false, false, false};
  cmd.add_option("--compress-window", policy.window,
                 "recent generated tokens kept raw (default with a beacon: its trained value)")
      ->capture_default_str()
      ->needs(compress)
      ->each([&policy](const std::string&) { policy.given.window = true; });
  cmd.add_option("--compress-sinks", policy.sinks,
                 "first positions never compressed (default with a beacon: its trained value)")
      ->capture_default_str()
      ->needs(compress)
      ->each([&policy](const std::string&) { policy.given.sinks = true; });
  cmd.add_option("--compress-merge", policy.merge_tokens,
                 "0: one unit per verify span; m: units of m tokens (default with a beacon: its trained value)")
      ->capture_default_str()
      ->needs(compress)
      ->each([&policy](const std::string&) { policy.given.merge_tokens = true; });
  // and with `--compress none` they would be ignored: refused as they are given alone, while the line is parsed
  cmd.parse_complete_callback([&method, &policy] {
    for (const auto& [given, knob] : {std::pair{policy.given.window, "--compress-window"},
                                      std::pair{policy.given.sinks, "--compress-sinks"},
                                      std::pair{policy.given.merge_tokens, "--compress-merge"}})
      if (given && method == "none")
        throw CLI::ValidationError(knob, "has no effect with --compress none (expected a compression method or a "
                                         "compressor directory)");
  });
}

namespace {
void check_utf8(const std::string& text, const std::string& origin) {
  if (const size_t bad = tok::utf8::find_invalid(text); bad != tok::utf8::npos)
    fail("{}: invalid UTF-8 at byte {} (expected UTF-8 text)", origin, bad);
}
}  // namespace

std::string typed_text(const std::string& text, bool escape, const std::string& flag) {
  std::string result = escape ? process_escapes(text) : text;
  check_utf8(result, typed_text_origin(flag, result != text));
  return result;
}

std::string read_prompt_text(const std::string& prompt_text, const std::string& prompt_file, bool escape) {
  if (prompt_file.empty()) return typed_text(prompt_text, escape, "-p/--prompt");
  // -f - reads standard input, as tokenize -f - and --prompt-ids-file - do
  std::string text = read_input(prompt_file, "-f/--file", /*stdin_dash=*/true);
  check_utf8(text, "-f/--file " + prompt_file);
  return text;
}

uint64_t fresh_seed() { return (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}(); }

std::optional<uint64_t> parse_seed_flag(const std::string& text, const std::string& flag) {
  if (text == "-1" || text == "4294967295") return std::nullopt;
  uint64_t value = 0;
  const char* begin = text.data() + (text.size() > 1 && text[0] == '+' ? 1 : 0);  // "+5" as the numeric flags read it
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(begin, end, value);
  if (begin == end || ec != std::errc() || ptr != end)
    fail("{}: expected -1 (a fresh seed) or a decimal integer in 0..18446744073709551615, found '{}'", flag, text);
  return value;
}

nlohmann::ordered_json compression_json(const compress::KVCompressor& c) {
  const auto& st = c.stats();
  nlohmann::ordered_json j = compress::policy_json(c.policy());
  j["events"] = st.events;
  j["tokens_compressed"] = st.tokens_compressed;
  j["slots_freed"] = st.slots_freed;
  j["positions"] = st.positions;
  j["slots"] = st.slots;
  j["effective_ratio"] = st.effective_ratio();
  j["peak_slots"] = st.peak_slots;
  j["overhead_ms"] = st.overhead_ms;
  if (st.feature_buffer_bytes > 0) j["feature_buffer_bytes"] = st.feature_buffer_bytes;
  j["cache_slots"] = st.cache_capacity;  // allocated, the fused latents' headroom included
  j["cache_bytes"] = st.cache_bytes;     // its K/V and the policy's per-slot buffers
  j["uncompressed_cache_bytes"] = st.cache_positions * st.kv_bytes_per_slot;  // its K/V without compression
  return j;
}

}  // namespace specpress::cli
