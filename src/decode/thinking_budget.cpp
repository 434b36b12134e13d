// thinking_budget.cpp — see thinking_budget.h.
#include "decode/thinking_budget.h"

#include <algorithm>
#include <atomic>

#include "core/error.h"

namespace specpress::decode {
namespace {

// splitmix64's finaliser: the answer's seed after a cut, a stream of its own yet the same for the same request seed.
uint64_t answer_seed(uint64_t seed) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

GenerationResult generate_with_thinking_budget(const GenerateFn& generate, const std::vector<int64_t>& prompt,
                                               const GenerationParams& params, const ThinkingBudget& budget,
                                               const TokenCallback& on_tokens) {
  if (!budget.on()) return generate(prompt, params, on_tokens);
  if (budget.tokens < 1) fail("thinking budget: expected at least 1 token, found {}", budget.tokens);
  if (std::find(budget.forced.begin(), budget.forced.end(), budget.end_id) == budget.forced.end())
    fail("thinking budget: the forced tokens do not contain the think block's end (token {})", budget.end_id);
  if (params.logprobs >= 0)
    fail("a thinking budget cannot be combined with logprobs (the tokens forced at the budget have none)");
  if (params.observer != nullptr)
    fail("a thinking budget cannot be combined with KV compression (the compressor follows one generation)");
  auto outer_cancelled = [&] { return params.cancel != nullptr && params.cancel->load(); };

  // Phase 1: until the block ends or the budget is spent; tokens past the cut (the rest of a DFlash block) are
  // dropped, and the generation ends at its next commit. An output that does not open the block has none to cap.
  int64_t kept = 0;
  bool closed = false, cut = false;
  auto stops = [&](int64_t t) {
    return std::find(params.stop_ids.begin(), params.stop_ids.end(), t) != params.stop_ids.end();
  };
  std::atomic<bool> stop_first{false};
  GenerationParams first = params;
  first.cancel = &stop_first;
  const TokenCallback count = [&](const std::vector<int64_t>& tokens, const std::vector<TokenLogprob>&) {
    std::vector<int64_t> pass;
    for (int64_t t : tokens) {
      if (cut) break;
      pass.push_back(t);
      ++kept;
      if (t == budget.end_id || (kept == 1 && t != budget.start_id)) closed = true;
      if (!closed && kept == budget.tokens && !stops(t)) cut = true;
    }
    if (on_tokens && !pass.empty()) on_tokens(pass, {});
    if (cut || outer_cancelled()) stop_first = true;
  };
  GenerationResult result = generate(prompt, first, count);
  if (!cut) return result;
  result.output_ids.resize(static_cast<size_t>(kept));
  result.stopped = false;  // a stop token past the cut was dropped with it
  if (outer_cancelled()) return result;

  // The forced end of the block, as far as max_new_tokens allows.
  const int64_t left = params.max_new_tokens - kept;
  const std::vector<int64_t> forced(budget.forced.begin(),
                                    budget.forced.begin() + std::min<int64_t>(left, budget.forced.size()));
  if (on_tokens && !forced.empty()) on_tokens(forced, {});
  result.output_ids.insert(result.output_ids.end(), forced.begin(), forced.end());
  const int64_t rest = left - static_cast<int64_t>(forced.size());
  if (rest <= 0 || outer_cancelled()) return result;

  // Phase 2: the answer, from the prompt + the output so far.
  std::vector<int64_t> resumed = prompt;
  resumed.insert(resumed.end(), result.output_ids.begin(), result.output_ids.end());
  GenerationParams second = params;
  second.max_new_tokens = rest;
  second.sampling.seed = answer_seed(params.sampling.seed);
  GenerationResult answer = generate(resumed, second, on_tokens);
  result.output_ids.insert(result.output_ids.end(), answer.output_ids.begin(), answer.output_ids.end());
  result.acceptance_lengths.insert(result.acceptance_lengths.end(), answer.acceptance_lengths.begin(),
                                   answer.acceptance_lengths.end());
  result.steps.insert(result.steps.end(), answer.steps.begin(), answer.steps.end());
  result.decode_ms += answer.prefill_ms + answer.first_draft_ms + answer.decode_ms;
  result.draft_ms += answer.draft_ms;
  result.verify_ms += answer.verify_ms;
  result.stopped = answer.stopped;
  return result;
}

}  // namespace specpress::decode
