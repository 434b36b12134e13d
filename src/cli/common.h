// common.h — pieces every subcommand shares: id-list flags, model-directory extras
// (generation_config.json eos ids), llama.cpp-style timing lines and the --json summary.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <optional>

#include <CLI/CLI.hpp>

#include "cli/id_list.h"
#include "compress/kv_compressor.h"
#include "decode/generation.h"
#include "tokenizer/tokenizer.h"

namespace specpress::cli {


// eos ids of a model directory: generation_config.json's eos_token_id, else config.json's.
std::vector<int64_t> default_stop_ids(const std::string& model_dir);

// The model directory's tokenizer (tokenizer.json [+ tokenizer_config.json, generation_config.json]),
// or nothing when the directory has no tokenizer.json. Fails, naming model_dir, where it is not a model directory
// (missing, not a directory, or without config.json: model::config_path_in).
std::optional<tok::Tokenizer> load_tokenizer_if_present(const std::string& model_dir);

// Text typed on the command line (-p, --system, --stop): its escapes processed (cli/escapes.h) unless `escape` is
// false (--no-escape), then checked to be UTF-8; errors name `flag`.
std::string typed_text(const std::string& text, bool escape, const std::string& flag);
// The text of -p/--prompt (as typed_text reads it), or of -f/--file when `prompt_file` is set (its exact bytes, never
// escaped), checked to be UTF-8; errors name the flag (and the file).
std::string read_prompt_text(const std::string& prompt_text, const std::string& prompt_file, bool escape);

// Prints llama.cpp-style timings (and DFlash acceptance lines when block_size > 1) to stderr.
void print_timings(const decode::GenerationResult& result);

// The --json summary: output_ids, timings (llama.cpp names) and, for DFlash, acceptance statistics.
nlohmann::ordered_json result_json(const decode::GenerationResult& result);

// --device (default auto: model::parse_device) into `device`, and -t/--threads (LibTorch's CPU threads, set as it is
// read; -1 or 1 .. kMaxCpuThreads); with --dtype (default auto: model::parse_compute_dtype) into `dtype` too.
constexpr long long kMaxCpuThreads = 1024;
void add_device_flag(CLI::App& cmd, std::string& device);
void add_placement_flags(CLI::App& cmd, std::string& device, std::string& dtype);
// Their values resolved, the dtype checked on the device (model::check_dtype_on_device); errors name the flag.
struct Placement {
  at::Device device;
  at::ScalarType dtype;
};
Placement parse_placement(const std::string& device, const std::string& dtype);

// --temp, --top-k, --top-p and --min-p into `sampling`; `prefix` starts each help text (serve: "default ").
// A -s/--seed value: -1 or llama.cpp's 4294967295 (LLAMA_DEFAULT_SEED) for a fresh seed (nullopt), else a decimal
// integer in 0..2^64-1; errors name `flag`.
std::optional<uint64_t> parse_seed_flag(const std::string& text, const std::string& flag);
// A fresh 64-bit sampling seed (std::random_device), for -s -1 and the server's requests without a seed.
uint64_t fresh_seed();

void add_sampling_flags(CLI::App& cmd, decode::SamplingParams& sampling, const std::string& prefix = "");
// llama.cpp's --logit-bias item: TOKEN_ID+BIAS or TOKEN_ID-BIAS (BIAS a number, or inf after '-'); a
// CLI::ValidationError naming the flag otherwise.
std::pair<int64_t, double> parse_logit_bias(const std::string& item);

// --compress METHOD and the policy knobs (--compress-window, --compress-sinks, --compress-merge).
void add_compression_flags(CLI::App& cmd, std::string& method, compress::Policy& policy);
// The --json "compression" object: method, events, ratio, KV bytes saved, peak slots, overhead.
nlohmann::ordered_json compression_json(const compress::KVCompressor& compressor);

}  // namespace specpress::cli
