// cmd_generate.cpp — `specpress generate -m TARGET [-md DRAFT] (-p TEXT | -f FILE | --prompt-ids IDS |
// --prompt-ids-file FILE) -n N ...`.
// Streams committed tokens to stdout (ids, or text when the model directory has a tokenizer), prints
// llama.cpp-style timings to stderr, and with --json prints one JSON object to stdout instead (with --logprobs,
// each output token's log-probability in llama.cpp's completion_probabilities form). --stop strings end the text
// as the server's "stop" does; a first Ctrl-C or SIGTERM ends the generation after the commit in flight and still
// prints the output so far (and its timings), exiting 128 + the signal.
#include "cli/cmd_generate.h"

#include <c10/core/InferenceMode.h>

#include <atomic>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/common.h"
#include "cli/id_list.h"
#include "cli/prompt_flags.h"
#include "compress/beacon.h"
#include "compress/kv_compressor.h"
#include "core/error.h"
#include "decode/generation.h"
#include "model/dflash_draft.h"
#include "model/qwen3.h"
#include "server/logprobs_json.h"
#include "server/stop_strings.h"
#include "tokenizer/stream_decoder.h"
#include "tools/prompting.h"
#include "tools/runner.h"
#include "tools/stop_signals.h"

namespace specpress::cli {
namespace {

struct GenerateOptions {
  std::string model_dir, draft_dir, system, stop_ids;
  std::vector<std::string> stop_strings;  // --stop / -r: the text ends right before the first to complete
  RawPromptFlags prompt;
  bool chat = false, think = false;
  int64_t reasoning_budget = -1;  // as serve's: -1 no cap, 0 thinking off, N > 0 thinking on and capped at N tokens
  bool reasoning_budget_given = false;
  std::string compress = "none";
  compress::Policy policy;
  std::string device = "auto", dtype = "auto";
  int64_t n_predict = 128;
  int64_t block_size = 0;
  int64_t logprobs = -1;
  bool ignore_eos = false, json = false, reference_path = false;
  decode::SamplingParams sampling;
  std::string seed = "0";  // -s (parse_seed_flag): -1 or 4294967295 draws a fresh one
};

int run_generate(const GenerateOptions& options) {
  c10::InferenceMode inference_mode;
  GenerateOptions o = options;
  // the escapes of the typed text (-p's are read with the prompt), before anything reads it
  if (!o.system.empty()) o.system = typed_text(o.system, o.prompt.escape, "--system");
  for (std::string& stop : o.stop_strings) stop = typed_text(stop, o.prompt.escape, "--stop");
  if (o.reasoning_budget_given) {
    if (o.reasoning_budget < -1)
      fail("--reasoning-budget: expected -1 (no cap), 0 (thinking off) or a token count, found {}", o.reasoning_budget);
    if (o.reasoning_budget == 0 && o.think) fail("--reasoning-budget 0 (thinking off) contradicts --think");
    o.think = o.reasoning_budget != 0;
  }
  if (o.reasoning_budget > 0 && o.logprobs >= 0)
    fail("--reasoning-budget: cannot be combined with --logprobs (the tokens forced at the budget have none)");
  if (o.reasoning_budget > 0 && o.compress != "none")
    fail("--reasoning-budget: cannot be combined with --compress (the compressor follows one generation)");
  const char* think_flag = o.reasoning_budget_given && o.reasoning_budget != 0 ? "--reasoning-budget" : "--think";
  const auto [device, dtype] = parse_placement(o.device, o.dtype);
  check_one_raw_prompt(o.prompt, "generate");
  std::optional<tok::Tokenizer> tokenizer = load_tokenizer_if_present(o.model_dir);
  if (!o.stop_strings.empty() && !tokenizer)
    fail("--stop: a stop string is found in the output's text, but {} has no tokenizer.json; --stop-ids stops at "
         "token ids", o.model_dir);
  std::vector<int64_t> prompt;
  if (raw_prompt_is_ids(o.prompt)) {
    const char* flag = raw_prompt_flag(o.prompt);
    if (o.chat || !o.system.empty()) fail("--chat/--system: need a text prompt (-p or -f), not {}", flag);
    if (o.think) fail("{}: only applies with --chat (and a text prompt)", think_flag);
    prompt = raw_prompt_ids(o.prompt);
    if (prompt.empty()) fail("{}: empty (expected at least one token id)", flag);
  } else {
    if (!tokenizer)
      fail("{}: -p/-f need the model's tokenizer, but the directory has no tokenizer.json; pass --prompt-ids", o.model_dir);
    const std::string origin = o.prompt.file.empty() ? "-p/--prompt" : "-f/--file " + o.prompt.file;
    const std::string text = read_prompt_text(o.prompt.text, o.prompt.file, o.prompt.escape);
    if (o.chat || !o.system.empty()) {
      std::vector<tok::ChatMessage> messages;
      if (!o.system.empty()) messages.push_back({"system", o.system, std::nullopt});
      messages.push_back({"user", text, std::nullopt});
      prompt = tools::chat_prompt_ids(*tokenizer, messages, o.think);
    } else {
      if (o.think) fail("{}: only applies with --chat", think_flag);
      std::vector<int32_t> ids = tokenizer->encode(text);
      prompt.assign(ids.begin(), ids.end());
    }
    if (prompt.empty()) fail("{}: the text encodes to no tokens", origin);
  }

  decode::GenerationParams params;
  params.max_new_tokens = o.n_predict;
  params.sampling = o.sampling;
  const std::optional<uint64_t> seed = parse_seed_flag(o.seed, "-s/--seed");
  params.sampling.seed = seed ? *seed : fresh_seed();
  if (!seed && !params.sampling.greedy())  // so that the run can be repeated
    std::fprintf(stderr, "generate: sampling seed %llu\n", static_cast<unsigned long long>(params.sampling.seed));
  params.block_size = o.block_size;
  params.record_steps = o.json;
  if (o.logprobs != -1 && !o.json) fail("--logprobs: needs --json (the log-probabilities are printed in its object)");
  params.logprobs = o.logprobs;
  if (!o.stop_ids.empty()) {
    params.stop_ids = parse_id_list(o.stop_ids, "--stop-ids");
  } else if (!o.ignore_eos) {
    params.stop_ids = default_stop_ids(o.model_dir);
  }

  if (!o.draft_dir.empty()) model::draft_config_for_dirs(o.draft_dir, o.model_dir);  // before the weights load
  model::Qwen3Model target = model::Qwen3Model::load(o.model_dir, dtype, device);
  if (raw_prompt_is_ids(o.prompt)) check_raw_prompt_vocab(o.prompt, prompt, target.config().vocab_size);
  std::unique_ptr<model::DFlashDraft> draft;
  if (!o.draft_dir.empty())
    draft = std::make_unique<model::DFlashDraft>(model::DFlashDraft::load(o.draft_dir, target, dtype, device));
  else if (o.block_size != 0)
    fail("--block-size: needs a draft model (-md DIR)");

  // Stream committed tokens: text when the model has a tokenizer (never a broken UTF-8 sequence),
  // else ids. Ids past the tokenizer's vocabulary (embedding padding rows) print nothing, as HF drops them.
  std::unique_ptr<tok::StreamDecoder> text_stream;
  if (tokenizer) text_stream = std::make_unique<tok::StreamDecoder>(*tokenizer, /*skip_special=*/true);
  compress::Policy policy = compress::resolve_compress(o.compress, "--compress", o.policy, target);
  compress::validate(policy);
  if (const std::string note = compress::no_saving_note(policy, draft == nullptr); !note.empty())
    std::fprintf(stderr, "%s\n", note.c_str());
  std::unique_ptr<compress::KVCompressor> compressor;
  if (policy.enabled()) {
    compressor = std::make_unique<compress::KVCompressor>(policy, target, static_cast<int64_t>(prompt.size()));
    params.observer = compressor.get();
  }
  // Committed tokens as they come: through the stop strings (none: all of it at once) to stdout, or kept for --json.
  // `counted`: the output's tokens up to the one that completed a stop string (the rest of its block is dropped).
  server::StopStrings stops(o.stop_strings);
  std::string stop_text;  // --json: the text the stop strings released
  size_t counted = 0;
  std::atomic<bool> cancel{false};
  params.cancel = &cancel;
  // From the generation's start to the end of the output: a signal during the load ends the process at once.
  std::optional<tools::StopSignals> signals;
  int stopped_by = 0;  // the signal that asked the generation to end (0: none did, or it came once it had ended)
  auto emit = [&](const std::string& text) {
    if (o.json) {
      stop_text += text;
    } else {
      std::fwrite(text.data(), 1, text.size(), stdout);
    }
  };
  const decode::TokenCallback stream = [&](const std::vector<int64_t>& tokens,
                                           const std::vector<decode::TokenLogprob>&) {
    std::string released;
    for (int64_t t : tokens) {
      if (stops.stopped()) break;
      ++counted;
      if (!text_stream) {
        if (!o.json) std::printf("%lld ", static_cast<long long>(t));
      } else if (t >= 0 && t < tokenizer->vocab_size()) {
        released += stops.push(text_stream->push(static_cast<int32_t>(t)));
      }
    }
    emit(released);
    if (!o.json) std::fflush(stdout);
    if (stops.stopped()) cancel = true;
    if (!cancel && signals && signals->received() != 0) stopped_by = signals->received(), cancel = true;
  };
  // --device cuda --dtype bf16: the CUDA-graph fast path (kernels/, model/qwen3_fast.h) unless asked not
  // to; KV compression edits the reference cache, so it always runs on the reference path.
  decode::ThinkingBudget budget;
  if (o.reasoning_budget > 0)
    budget = tools::qwen3_thinking_budget(*tokenizer, o.reasoning_budget, "--reasoning-budget");
  tools::GenerationRunner runner(target, draft.get(), o.reference_path);
  // where it runs, as the defaults (--device auto --dtype auto) chose it; on a GPU, why not on the fast path
  const bool fast_path = runner.fast() && params.observer == nullptr;
  std::string path = fast_path ? "CUDA fast path" : "reference path";
  if (!fast_path && device.is_cuda())
    path += fmt::format(" ({})",
                        runner.fast() ? "--compress edits the reference path's KV cache" : runner.why_not_fast());
  signals.emplace("after the commit in flight, with the output so far printed");
  std::fprintf(stderr, "generate: %s, %s, %s\n", tools::device_description(device).c_str(),
               model::compute_dtype_name(dtype).c_str(), path.c_str());
  const decode::GenerateFn run = [&](const std::vector<int64_t>& ids, const decode::GenerationParams& p,
                                     const decode::TokenCallback& on_tokens) {
    return draft ? runner.dflash(ids, p, on_tokens) : runner.plain(ids, p, on_tokens);
  };
  decode::GenerationResult result = decode::generate_with_thinking_budget(run, prompt, params, budget, stream);
  // cut short by it: not where the commit that asked to stop also ended the output (the token limit or a stop id)
  const int interrupted_by =
      !result.stopped && static_cast<int64_t>(result.output_ids.size()) < params.max_new_tokens ? stopped_by : 0;
  if (text_stream && !stops.stopped()) {  // the bytes held back for a whole character, then for a stop string
    std::string rest = stops.push(text_stream->flush());
    if (!stops.stopped()) rest += stops.flush();
    emit(rest);
  }
  if (stops.stopped()) {  // the tokens after the one that completed the stop string are not part of the output
    result.output_ids.resize(counted);
    if (result.logprobs.size() > counted) result.logprobs.resize(counted);
  }
  if (o.json) {
    nlohmann::ordered_json j = result_json(result);
    j["device"] = tools::device_description(device);
    j["dtype"] = model::compute_dtype_name(dtype);
    j["path"] = fast_path ? "cuda-fast" : "reference";
    if (!params.sampling.greedy()) j["seed"] = params.sampling.seed;
    if (stops.stopped()) j["stop_reason"] = "stop", j["stopping_word"] = stops.stopping_word();
    if (interrupted_by != 0)
      j["stop_reason"] = "interrupted", j["interrupted_by"] = tools::StopSignals::name(interrupted_by);
    if (tokenizer) {
      tools::DecodedText text = tools::decode_output(*tokenizer, result.output_ids);
      j["text"] = stops.stopped() ? stop_text : text.text;
      if (text.dropped_ids > 0) j["ids_outside_tokenizer"] = text.dropped_ids;
    }
    if (params.logprobs >= 0) {
      std::vector<server::LoggedToken> tokens;
      for (size_t i = 0; i < result.output_ids.size(); ++i) tokens.push_back({result.output_ids[i], result.logprobs[i]});
      j["logprobs"] = server::LogprobsJson(tokenizer).native(tokens);
    }
    if (compressor) j["compression"] = compression_json(*compressor);
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::printf("\n");
  }
  std::fflush(stdout);
  print_timings(result);
  if (compressor) {
    const auto& st = compressor->stats();
    std::fprintf(stderr,
                 "compression %s: %lld events, %lld tokens -> %lld slots freed, effective ratio %.2fx, peak %lld "
                 "slots; KV cache %lld slots allocated (%.2f MiB) against %lld (%.2f MiB) uncompressed\n",
                 compress::method_name(policy.method), static_cast<long long>(st.events),
                 static_cast<long long>(st.tokens_compressed), static_cast<long long>(st.slots_freed), st.effective_ratio(),
                 static_cast<long long>(st.peak_slots), static_cast<long long>(st.cache_capacity),
                 static_cast<double>(st.cache_bytes) / (1024.0 * 1024.0), static_cast<long long>(st.cache_positions),
                 static_cast<double>(st.cache_positions * st.kv_bytes_per_slot) / (1024.0 * 1024.0));
  }
  if (interrupted_by != 0)
    throw Interrupted(interrupted_by, fmt::format("generate: stopped by {} after {} tokens; the output so far is printed",
                                                  tools::StopSignals::name(interrupted_by), result.output_ids.size()));
  return 0;
}

}  // namespace

void add_generate_command(CLI::App& app, std::function<int()>& run) {
  auto o = std::make_shared<GenerateOptions>();
  CLI::App* cmd = app.add_subcommand("generate", "generate with the target alone or with a DFlash draft");
  cmd->add_option("-m,--model", o->model_dir, "target model directory (HF Qwen3)")->required();
  cmd->add_option("--model-draft", o->draft_dir, "DFlash draft directory (also -md)")
      ->check(non_empty_check("expected a DFlash draft directory; leave the flag out for plain decoding"));
  add_raw_prompt_flags(*cmd, o->prompt, "the prompt", "-p, --system and --stop");
  cmd->add_flag("--chat", o->chat, "render the prompt as a user turn with the chat template (+ generation prompt)");
  cmd->add_option("--system", o->system, "system message for --chat (also -sys; implies --chat)")
      ->check(non_empty_check("expected the system message; leave the flag out for none"));
  cmd->add_flag("--think", o->think, "enable_thinking in the chat template (off by default: DFlash drafts need it off)");
  auto* budget = cmd->add_option("--reasoning-budget", o->reasoning_budget,
                                 "thinking tokens before the answer: -1 no cap, 0 thinking off, N > 0 thinking on and, "
                                 "after N tokens without </think>, \"\\n</think>\\n\\n\" forced and the answer "
                                 "generated (sets --think unless 0)");
  cmd->add_option("-n,--n-predict", o->n_predict, "maximum number of tokens to generate")->capture_default_str();
  add_sampling_flags(*cmd, o->sampling);
  cmd->add_option("-s,--seed", o->seed,
                  "sampling seed: runs with the same one repeat (as vLLM's default 0); -1 or 4294967295 draws a fresh "
                  "one, as llama-cli's default, printed on stderr and in --json's \"seed\"")
      ->capture_default_str();
  cmd->add_option("--stop-ids", o->stop_ids, "comma-separated stop token ids (default: the model's eos ids)");
  cmd->add_option("--stop,-r,--reverse-prompt", o->stop_strings,
                  "stop string (repeatable): the output ends right before the first to complete, as the server's "
                  "\"stop\" (the rest of its DFlash block is dropped; --json says it in \"stopping_word\")")
      ->check(non_empty_check("expected a stop string; --stop-ids stops at token ids"))
      ->allow_extra_args(false);  // one string a flag: `--stop a b` leaves b for the command line, not a second one
  cmd->add_flag("--ignore-eos", o->ignore_eos, "do not stop at the model's eos ids");
  cmd->add_option("--block-size", o->block_size, "DFlash block size (0, the default: the draft's trained size)");
  add_placement_flags(*cmd, o->device, o->dtype);
  cmd->add_flag("--reference-path", o->reference_path, "use the reference ATen path even where the CUDA fast path applies");
  cmd->add_flag("--json", o->json, "print one JSON object with output_ids, timings and statistics");
  cmd->add_option("--logprobs", o->logprobs,
                  "with --json: each output token's log-probability under the target and its N most likely "
                  "alternatives (0..20)")
      ->check(CLI::Range(int64_t{0}, decode::kMaxLogprobs));
  add_compression_flags(*cmd, o->compress, o->policy);
  cmd->callback([&run, o, budget]() {
    o->reasoning_budget_given = budget->count() > 0;
    run = [o]() { return run_generate(*o); };
  });
}

}  // namespace specpress::cli
