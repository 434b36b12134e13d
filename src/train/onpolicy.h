// onpolicy.h — greedy generations of a frozen target (optionally with its DFlash draft) for the
// trainers' on-policy data. On CUDA the models are loaded again in bf16 and run through
// tools::GenerationRunner, i.e. the CUDA-graph fast path when the build has it; on CPU the float32
// reference loops run. On the H200 with the 103 M-parameter target the float32 eager loop generated
// about 180 tokens/s and the fast path about 4,000 (two separate runs, docs/PERF.md).
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "decode/generation.h"
#include "model/dflash_draft.h"
#include "model/qwen3.h"

namespace specpress::train {

// The generations of generate_greedy, and the signal that stopped them early (0: all ran).
struct Generations {
  std::vector<decode::GenerationResult> results;  // of the first results.size() prompts
  int stopped_by = 0;                             // SIGINT or SIGTERM (tools::StopSignals)
};

// One greedy generation per prompt (max_new_tokens, stopping at the target's eos), with a progress bar
// named `label`. `target` is the trainer's float32 copy of the model in `target_dir` (used as is on
// the CPU); `draft_dir` empty: plain decoding, else DFlash (acceptance lengths recorded). Ctrl-C or SIGTERM stops it
// after the generation in flight: the caller saves what ran (so that --resume continues there) and says so.
Generations generate_greedy(const model::Qwen3Model& target, const std::string& target_dir,
                            const std::string& draft_dir, const std::vector<std::vector<int64_t>>& prompts,
                            int64_t max_new_tokens, const std::string& label);

// OUT/generations.json records what each generation cache in OUT was made with ({file name: made_with}, e.g. the
// target, --gen-tokens, the device). A cache is reused (whole, or the part a stopped run saved) only where that record
// is the same; cache_made_otherwise names the first value that differs (none where OUT has no record of it, as in a
// folder of an older specpress), and record_cache writes the record before the generations start.
std::optional<std::string> cache_made_otherwise(const std::string& out, const std::string& file,
                                                const nlohmann::json& made_with);
void record_cache(const std::string& out, const std::string& file, const nlohmann::json& made_with);

// Where generations were stopped: the `done` saved in `file` (none: nothing saved), the trainer's message that the
// same command with --resume continues from them, thrown as Interrupted.
[[noreturn]] void generation_interrupted(const std::string& trainer, int signal, size_t done, size_t total,
                                         const std::string& file);

}  // namespace specpress::train
