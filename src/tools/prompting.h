// prompting.h — from chat turns to prompt ids and from generated ids back to text, as the DFlash
// benchmark does it: Qwen3 chat template with add_generation_prompt and enable_thinking=false by
// default, plain encode (no BOS); outputs decoded with skip_special_tokens. Ids past the tokenizer's
// vocabulary (the embedding's padding rows, which random or young models can emit) decode to nothing,
// as Hugging Face's decode drops them; the count is reported.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "decode/thinking_budget.h"
#include "tools/datasets.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace specpress::tools {

// tools: as render_qwen3_chat takes them (none by default)
std::vector<int64_t> chat_prompt_ids(const tok::Tokenizer& tokenizer, const std::vector<tok::ChatMessage>& messages,
                                     bool enable_thinking, const std::vector<std::string>& tools = {});

// A thinking budget of `tokens` output tokens for Qwen3 (decode/thinking_budget.h): the block opens with <think> and
// ends at </think>, and a
// cut is followed by "\n</think>\n\n" (the newline, the tag and the blank line the chat template writes after it).
// `flag` names the option in the error for a tokenizer without </think> or a budget below 1.
decode::ThinkingBudget qwen3_thinking_budget(const tok::Tokenizer& tokenizer, int64_t tokens, const char* flag);

// Why a turn's prompt of `prompt_tokens` leaves no room for --max-new-tokens and the block within the model's
// `max_positions` (naming the turn, `what`, e.g. "gsm8k sample 12 (row 13) turn 1", and the flag), or nothing.
std::optional<std::string> turn_overflow(int64_t prompt_tokens, int64_t max_new_tokens, int64_t block,
                                         int64_t max_positions, const std::string& what);
// turn_overflow for every sample's first turn before any sample runs (an error naming the first, and how many), so
// that a run does not stop at its first long prompt after the work before it (a later turn's prompt holds the earlier
// answers: bench checks it when it comes, and leaves it out).
// Returns the longest first turn's prompt tokens (what the fast path's engines are sized for up front).
int64_t check_first_turns_fit(const tok::Tokenizer& tokenizer, const std::vector<BenchSample>& samples, bool think,
                              int64_t max_new_tokens, int64_t block, int64_t max_positions,
                              const std::string& dataset);
// "gsm8k sample 12 (row 13) turn 1", as the checks name a turn.
std::string turn_name(const std::string& dataset, const BenchSample& sample, size_t turn);

struct DecodedText {
  std::string text;
  int64_t dropped_ids = 0;  // ids outside the tokenizer vocabulary
};
DecodedText decode_output(const tok::Tokenizer& tokenizer, const std::vector<int64_t>& ids, bool skip_special = true);

}  // namespace specpress::tools
