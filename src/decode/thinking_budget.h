// thinking_budget.h — a cap on the tokens a thinking model spends before it answers (vLLM's thinking_token_budget,
// Anthropic's thinking.budget_tokens, llama.cpp's --reasoning-budget N). The output of a thinking turn opens with its
// think block; once `tokens` output tokens have come without the block's end, the output is cut there, `forced` (the
// end of the block, e.g. "\n</think>\n\n" tokenized) follows, and generation resumes from the prompt, the output and
// the forced tokens with what is left of max_new_tokens. Each phase is the target's own decoding of its prompt, so
// DFlash under a budget still equals plain decoding under the same budget.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "decode/generation.h"

namespace specpress::decode {

struct ThinkingBudget {
  int64_t tokens = -1;          // -1: no budget
  int64_t end_id = -1;          // the token that ends the think block (Qwen3's </think>)
  std::vector<int64_t> forced;  // what follows a cut, end_id among them
  bool on() const { return tokens >= 0; }
};

// One generation from a prompt, as GenerationRunner::plain or ::dflash runs it.
using GenerateFn = std::function<GenerationResult(const std::vector<int64_t>& prompt, const GenerationParams& params,
                                                  const TokenCallback& on_tokens)>;

// `generate` under the budget (once, as is, without one). on_tokens sees the output as the user gets it: the first
// phase's tokens up to the cut, the forced tokens, then the second phase's. The result is the whole output's:
// prefill and the first draft call are the first phase's; the second phase's prefill counts as decoding time. A budget
// is refused (Error) with logprobs (the forced tokens have none) and with a commit observer (a KV compressor follows
// one generation's positions); a budget below 1 or a `forced` without end_id is an Error too.
GenerationResult generate_with_thinking_budget(const GenerateFn& generate, const std::vector<int64_t>& prompt,
                                               const GenerationParams& params, const ThinkingBudget& budget,
                                               const TokenCallback& on_tokens = {});

}  // namespace specpress::decode
