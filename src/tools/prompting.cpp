// prompting.cpp — see prompting.h.
#include "tools/prompting.h"

#include <algorithm>
#include <optional>

#include "core/error.h"

namespace specpress::tools {

std::vector<int64_t> chat_prompt_ids(const tok::Tokenizer& tokenizer, const std::vector<tok::ChatMessage>& messages,
                                     bool enable_thinking, const std::vector<std::string>& tools) {
  std::vector<int32_t> ids = tokenizer.encode(tok::render_qwen3_chat(messages, true, enable_thinking, tools));
  return std::vector<int64_t>(ids.begin(), ids.end());
}

decode::ThinkingBudget qwen3_thinking_budget(const tok::Tokenizer& tokenizer, int64_t tokens, const char* flag) {
  if (tokens < 1) fail("{}: a thinking budget of at least 1 token, found {}", flag, tokens);
  const std::optional<int32_t> start = tokenizer.token_to_id("<think>"), end = tokenizer.token_to_id("</think>");
  if (!start || !end) fail("{}: the model's tokenizer has no <think> and </think> tokens to cap the thinking by", flag);
  decode::ThinkingBudget budget;
  budget.tokens = tokens;
  budget.start_id = *start;
  budget.end_id = *end;
  for (int32_t id : tokenizer.encode("\n</think>\n\n")) budget.forced.push_back(id);
  return budget;
}

DecodedText decode_output(const tok::Tokenizer& tokenizer, const std::vector<int64_t>& ids, bool skip_special) {
  DecodedText out;
  std::vector<int32_t> kept;
  kept.reserve(ids.size());
  for (int64_t id : ids) {
    if (id < 0 || id >= tokenizer.vocab_size()) {
      ++out.dropped_ids;
      continue;
    }
    kept.push_back(static_cast<int32_t>(id));
  }
  out.text = tokenizer.decode(kept, skip_special);
  return out;
}

std::string turn_name(const std::string& dataset, const BenchSample& sample, size_t turn) {
  return fmt::format("{} sample {} (row {}) turn {}", dataset, sample.id, sample.row + 1, turn + 1);
}

std::optional<std::string> turn_overflow(int64_t prompt_tokens, int64_t max_new_tokens, int64_t block,
                                         int64_t max_positions, const std::string& what) {
  if (max_new_tokens <= max_positions - prompt_tokens - block) return std::nullopt;
  return fmt::format("{}: the prompt ({} tokens) + --max-new-tokens {} + block {} exceed the model's "
                     "max_position_embeddings {}; lower --max-new-tokens or leave the sample out (--indices)",
                     what, prompt_tokens, max_new_tokens, block, max_positions);
}

int64_t check_first_turns_fit(const tok::Tokenizer& tokenizer, const std::vector<BenchSample>& samples, bool think,
                              int64_t max_new_tokens, int64_t block, int64_t max_positions,
                              const std::string& dataset) {
  int64_t too_long = 0, longest = 0;
  std::string first;
  for (const BenchSample& sample : samples) {
    if (sample.turns.empty()) continue;
    const auto prompt = chat_prompt_ids(tokenizer, {{"user", sample.turns[0], std::nullopt}}, think);
    longest = std::max(longest, static_cast<int64_t>(prompt.size()));
    const auto why = turn_overflow(static_cast<int64_t>(prompt.size()), max_new_tokens, block, max_positions,
                                   turn_name(dataset, sample, 0));
    if (why && too_long++ == 0) first = *why;
  }
  if (too_long == 1) fail("{}", first);
  if (too_long > 1) fail("{} of the {} selected samples do not fit, the first: {}", too_long, samples.size(), first);
  return longest;
}

}  // namespace specpress::tools
