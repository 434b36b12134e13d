// test_thinking_budget.cpp — decode::generate_with_thinking_budget against a scripted generator: a block that ends
// within the budget, or an output that does not open one, is left alone; a cut keeps the first `budget` tokens,
// appends the forced end and resumes from the prompt + that output with what max_new_tokens leaves and a seed of its
// own; the token callback sees exactly the output; a stop token past the cut is dropped, one at the cut ends the
// output; a cancel, or max_new_tokens ending inside the forced tokens, ends it early; bad budgets and logprobs are
// refused. The CLI test runs it on a real pair (DFlash equal to plain under a budget).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <vector>

#include "core/error.h"
#include "decode/thinking_budget.h"

using namespace specpress;

namespace {

constexpr int64_t kStart = 98, kEnd = 99;  // the think block's start and end

// A generator that writes token 1000 + p + i at output position i for a prompt of p tokens (kStart first for the
// 3-token prompt the tests start from, or the script's tokens where one is given for that prompt length), committing
// blocks of `block` tokens, each to the callback; it stops at a stop id, at max_new_tokens, or after the commit
// during which cancel was set, as the real loops do.
struct Scripted {
  int64_t block = 4;
  std::vector<std::pair<size_t, std::vector<int64_t>>> scripts;  // prompt length -> its output
  std::vector<std::vector<int64_t>> prompts;                       // every call's prompt
  std::vector<uint64_t> seeds;                                     // and its sampling seed
  decode::GenerationResult operator()(const std::vector<int64_t>& prompt, const decode::GenerationParams& p,
                                      const decode::TokenCallback& on_tokens) {
    prompts.push_back(prompt);
    seeds.push_back(p.sampling.seed);
    const std::vector<int64_t>* script = nullptr;
    for (const auto& [length, out] : scripts)
      if (length == prompt.size()) script = &out;
    decode::GenerationResult r;
    r.prompt_tokens = static_cast<int64_t>(prompt.size());
    r.prefill_ms = 1.0, r.decode_ms = 10.0;
    int64_t i = 0;
    while (i < p.max_new_tokens) {
      std::vector<int64_t> commit;
      for (int64_t j = 0; j < block && i < p.max_new_tokens; ++j, ++i) {
        const int64_t t = script != nullptr && i < static_cast<int64_t>(script->size())
                              ? (*script)[static_cast<size_t>(i)]
                          : i == 0 && prompt.size() == 3 ? kStart
                                                          : 1000 + static_cast<int64_t>(prompt.size()) + i;
        commit.push_back(t);
        r.output_ids.push_back(t);
        if (std::find(p.stop_ids.begin(), p.stop_ids.end(), t) != p.stop_ids.end()) {
          r.stopped = true;
          break;
        }
      }
      r.acceptance_lengths.push_back(static_cast<int64_t>(commit.size()));
      if (on_tokens) on_tokens(commit, {});
      if (r.stopped || (p.cancel != nullptr && p.cancel->load())) break;
    }
    return r;
  }
};

decode::ThinkingBudget budget_of(int64_t tokens) {
  decode::ThinkingBudget b;
  b.tokens = tokens, b.start_id = kStart, b.end_id = kEnd, b.forced = {7, kEnd, 8};
  return b;
}

struct Outcome {
  decode::GenerationResult result;
  std::vector<int64_t> seen;  // what the callback saw
};

Outcome run(Scripted& gen, const decode::ThinkingBudget& budget, decode::GenerationParams p,
        const std::vector<int64_t>& prompt = {1, 2, 3}) {
  Outcome out;
  const decode::GenerateFn fn = [&gen](const std::vector<int64_t>& pr, const decode::GenerationParams& pp,
                                       const decode::TokenCallback& cb) { return gen(pr, pp, cb); };
  out.result = decode::generate_with_thinking_budget(
      fn, prompt, p, budget,
      [&out](const std::vector<int64_t>& t, const std::vector<decode::TokenLogprob>&) {
        out.seen.insert(out.seen.end(), t.begin(), t.end());
      });
  return out;
}

}  // namespace

TEST(ThinkingBudget, BlockEndingWithinTheBudgetIsLeftAlone) {
  Scripted gen;
  gen.scripts = {{3, {kStart, 6, kEnd, 11, 12, 13, 14, 15, 16, 17}}};
  decode::GenerationParams p;
  p.max_new_tokens = 10;
  const Outcome r = run(gen, budget_of(3), p);  // the end is the 3rd token: within the budget
  EXPECT_EQ(r.result.output_ids, (std::vector<int64_t>{kStart, 6, kEnd, 11, 12, 13, 14, 15, 16, 17}));
  EXPECT_EQ(r.seen, r.result.output_ids);
  EXPECT_EQ(gen.prompts.size(), 1u);
  // an output that does not open the block (thinking off, a prefill): nothing to cap
  Scripted unopened;
  unopened.scripts = {{3, {5, 6, 7, 8, 9, 10, 11, 12, 13, 14}}};
  EXPECT_EQ(run(unopened, budget_of(2), p).result.output_ids.size(), 10u);
  EXPECT_EQ(unopened.prompts.size(), 1u);
  // no budget: the generator once, as is
  Scripted plain;
  const Outcome none = run(plain, decode::ThinkingBudget{}, p);
  EXPECT_EQ(none.result.output_ids.size(), 10u);
  EXPECT_EQ(plain.prompts.size(), 1u);
}

TEST(ThinkingBudget, CutKeepsTheBudgetForcesTheEndAndResumes) {
  Scripted gen;
  gen.block = 4;
  decode::GenerationParams p;
  p.max_new_tokens = 20;
  p.sampling.seed = 42;
  p.stop_ids = {1006};  // output position 3 of a 3-token prompt's phase 1 (1000 + 3 + 3): past a cut at 2
  const Outcome r = run(gen, budget_of(2), p);
  // phase 1 commits 4 tokens [kStart 1004 1005 1006(stop)]; the cut keeps 2, the stop past it is dropped
  ASSERT_EQ(gen.prompts.size(), 2u);
  const std::vector<int64_t> resumed = {1, 2, 3, kStart, 1004, 7, kEnd, 8};
  EXPECT_EQ(gen.prompts[1], resumed);
  EXPECT_EQ(gen.seeds[0], 42u);
  EXPECT_NE(gen.seeds[1], 42u) << "the answer samples a stream of its own";
  std::vector<int64_t> expected = {kStart, 1004, 7, kEnd, 8};
  for (int64_t i = 0; i < 15; ++i) expected.push_back(1000 + 8 + i);  // phase 2: 20 - 5 tokens
  EXPECT_EQ(r.result.output_ids, expected);
  EXPECT_EQ(r.seen, expected) << "the callback sees the output, nothing past the cut";
  EXPECT_FALSE(r.result.stopped);
  EXPECT_EQ(r.result.prompt_tokens, 3);
  EXPECT_DOUBLE_EQ(r.result.prefill_ms, 1.0);
  EXPECT_DOUBLE_EQ(r.result.decode_ms, 10.0 + 1.0 + 10.0) << "phase 2's prefill counts as decoding";
  EXPECT_EQ(r.result.acceptance_lengths.size(), 1u + 4u);  // phase 1's one commit, phase 2's four
  // a stop token in phase 2 ends the whole
  Scripted stops;
  p.stop_ids = {1010};
  const Outcome s = run(stops, budget_of(2), p);
  EXPECT_TRUE(s.result.stopped);
  EXPECT_EQ(s.result.output_ids.back(), 1010);
  EXPECT_EQ(s.result.output_ids.size(), 5u + 3u);
  // a stop token as the budget's last token ends the output there: no cut
  Scripted at_cut;
  p.stop_ids = {1005};
  const Outcome c = run(at_cut, budget_of(3), p);
  EXPECT_EQ(c.result.output_ids, (std::vector<int64_t>{kStart, 1004, 1005}));
  EXPECT_TRUE(c.result.stopped);
  EXPECT_EQ(at_cut.prompts.size(), 1u);
}

TEST(ThinkingBudget, MaxTokensInsideTheForcedEndAndCancelsStopEarly) {
  Scripted gen;
  decode::GenerationParams p;
  p.max_new_tokens = 4;  // 2 kept + 2 of the 3 forced
  const Outcome r = run(gen, budget_of(2), p);
  EXPECT_EQ(r.result.output_ids, (std::vector<int64_t>{kStart, 1004, 7, kEnd}));
  EXPECT_EQ(r.seen, r.result.output_ids);
  EXPECT_EQ(gen.prompts.size(), 1u) << "no room left for an answer";
  // the caller cancels (a client gone, a stop string) during phase 1: no forced tokens, no phase 2
  Scripted cancelled;
  std::atomic<bool> cancel{false};
  p.max_new_tokens = 20;
  p.cancel = &cancel;
  cancel = true;
  const Outcome c = run(cancelled, budget_of(2), p);
  EXPECT_EQ(c.result.output_ids, (std::vector<int64_t>{kStart, 1004}));
  EXPECT_EQ(cancelled.prompts.size(), 1u);
  // set before the budget is reached: the commit in progress ends phase 1, which never reaches the cut
  Scripted early;
  const Outcome e = run(early, budget_of(10), p);
  EXPECT_EQ(e.result.output_ids, (std::vector<int64_t>{kStart, 1004, 1005, 1006}));
  EXPECT_EQ(e.seen, e.result.output_ids);
  EXPECT_EQ(early.prompts.size(), 1u);
}

TEST(ThinkingBudget, BadBudgetsAndLogprobsAreRefused) {
  Scripted gen;
  decode::GenerationParams p;
  EXPECT_THROW(run(gen, budget_of(0), p), Error);
  decode::ThinkingBudget no_end = budget_of(2);
  no_end.forced = {7, 8};
  EXPECT_THROW(run(gen, no_end, p), Error);
  p.logprobs = 0;
  EXPECT_THROW(run(gen, budget_of(2), p), Error);
  EXPECT_TRUE(gen.prompts.empty()) << "refused before generating";
}
