// thinking_budget.h — a cap on the tokens a thinking model spends before it answers (vLLM's thinking_token_budget,
// Anthropic's thinking.budget_tokens, llama.cpp's --reasoning-budget N). An output that opens with the think block's
// start (Qwen3's <think>, as its template leaves it to the model) is cut once `tokens` output tokens have come without
// the block's end (unless the last of them is a stop token); `forced` (the end of the block, e.g. "\n</think>\n\n"
// tokenized) follows, and generation resumes from the prompt, the output and the forced tokens with what is left of
// max_new_tokens, sampling with a seed derived from the request's (a fresh stream, not the thinking's again). Each
// phase is the target's own decoding of its prompt, so DFlash under a budget still equals plain decoding under it
// (greedy: the same tokens). An output that does not open the block (thinking off, a prefilled reply) is left alone.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "decode/generation.h"

namespace specpress::decode {

struct ThinkingBudget {
  int64_t tokens = -1;          // -1: no budget
  int64_t start_id = -1;        // the token that opens the think block (Qwen3's <think>)
  int64_t end_id = -1;          // the token that ends it (Qwen3's </think>)
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
