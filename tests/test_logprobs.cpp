// test_logprobs.cpp — GenerationParams::logprobs on the reference loops (float32 golden pair): each output token's
// log-probability is the raw log_softmax of the target's row for it, as a teacher-forced forward of the prompt and
// the output computes it; DFlash reports plain decoding's (the bonus chain across cycles, stops and length cuts);
// sampling reports the raw distribution's, not the tempered one; the stream callback carries each commit's.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "core/error.h"
#include "decode/generation.h"
#include "decode/logprobs.h"
#include "golden_pair.h"
#include "test_util.h"

using namespace specpress;
using namespace specpress::test;

namespace {

using Logprobs = GoldenPair;
constexpr double kTol = 1e-4;

// log_softmax of the target's logits for every output token, from one forward of prompt + output[:-1]: [n, V].
at::Tensor teacher_forced(const model::Qwen3Model& target, const std::vector<int64_t>& prompt,
                          const std::vector<int64_t>& output) {
  std::vector<int64_t> ids = prompt;
  ids.insert(ids.end(), output.begin(), output.end() - 1);
  model::KVCache cache = target.make_cache(static_cast<int64_t>(ids.size()) + 1);
  model::ForwardOutput out = target.forward(at::tensor(ids, at::kLong).to(target.device()), 0, cache, {true});
  const int64_t n = static_cast<int64_t>(output.size());
  return at::log_softmax(out.logits.narrow(0, static_cast<int64_t>(prompt.size()) - 1, n).to(at::kCPU), -1);
}

// r's logprobs against the teacher-forced rows: the chosen token's, and the top entries (descending, each the
// row's value for its id, the k-th the row's k-th largest).
void expect_teacher_forced(const decode::GenerationResult& r, const at::Tensor& rows, int64_t top_n,
                           const std::string& where) {
  ASSERT_EQ(r.logprobs.size(), r.output_ids.size()) << where;
  const at::Tensor sorted = std::get<0>(rows.sort(-1, /*descending=*/true));
  for (size_t i = 0; i < r.output_ids.size(); ++i) {
    const auto& lp = r.logprobs[i];
    const int64_t row = static_cast<int64_t>(i);
    EXPECT_NEAR(lp.logprob, rows[row][r.output_ids[i]].item<double>(), kTol) << where << " token " << i;
    ASSERT_EQ(static_cast<int64_t>(lp.top.size()), top_n) << where << " token " << i;
    for (int64_t k = 0; k < top_n; ++k) {
      const auto& [id, value] = lp.top[k];
      EXPECT_NEAR(value, rows[row][id].item<double>(), kTol) << where << " token " << i << " top " << k;
      EXPECT_NEAR(value, sorted[row][k].item<double>(), kTol) << where << " token " << i << " top " << k;
      if (k > 0) EXPECT_GE(lp.top[k - 1].second, value) << where << " token " << i << " top " << k;
    }
  }
}

// Two runs' logprobs equal within kTol (ids compared where the values are kTol apart from their neighbours).
void expect_same_logprobs(const decode::GenerationResult& a, const decode::GenerationResult& b, const std::string& where) {
  ASSERT_EQ(a.output_ids, b.output_ids) << where;
  ASSERT_EQ(a.logprobs.size(), b.logprobs.size()) << where;
  for (size_t i = 0; i < a.logprobs.size(); ++i) {
    EXPECT_NEAR(a.logprobs[i].logprob, b.logprobs[i].logprob, kTol) << where << " token " << i;
    const auto &ta = a.logprobs[i].top, &tb = b.logprobs[i].top;
    ASSERT_EQ(ta.size(), tb.size()) << where << " token " << i;
    for (size_t k = 0; k < ta.size(); ++k) {
      EXPECT_NEAR(ta[k].second, tb[k].second, kTol) << where << " token " << i << " top " << k;
      const bool apart = (k == 0 || ta[k - 1].second - ta[k].second > kTol) &&
                         (k + 1 == ta.size() || ta[k].second - ta[k + 1].second > kTol);
      if (apart) EXPECT_EQ(ta[k].first, tb[k].first) << where << " token " << i << " top " << k;
    }
  }
}

TEST_F(Logprobs, PlainGreedyReportsTheTeacherForcedRows) {
  for (int index : {0, 5}) {
    const auto run = golden_runs()[index];
    decode::GenerationParams p;
    p.max_new_tokens = 24;
    p.logprobs = 5;
    decode::GenerationResult r = decode::generate_plain(*target_, run.prompt, p);
    ASSERT_EQ(r.output_ids.size(), 24u);
    const std::string where = "run " + std::to_string(index);
    expect_teacher_forced(r, teacher_forced(*target_, run.prompt, r.output_ids), 5, where);
    for (size_t i = 0; i < r.output_ids.size(); ++i)  // greedy: the chosen token is the row's most likely
      EXPECT_NEAR(r.logprobs[i].top[0].second, r.logprobs[i].logprob, 1e-6) << where << " token " << i;
  }
}

TEST_F(Logprobs, DFlashReportsPlainDecodingsAtEveryBlockSize) {
  for (const auto& run : golden_runs()) {
    decode::GenerationParams p;
    p.max_new_tokens = 40;
    p.stop_ids = run.stop_ids;
    p.logprobs = 3;
    const decode::GenerationResult plain = decode::generate_plain(*target_, run.prompt, p);
    for (int64_t b : {2, 5, 8}) {
      p.block_size = b;
      decode::GenerationResult r = decode::generate_dflash(*target_, *draft_, run.prompt, p);
      expect_same_logprobs(plain, r, "block size " + std::to_string(b));
    }
  }
}

TEST_F(Logprobs, DFlashKeepsTheChainAcrossStopsAndLengthCuts) {
  const auto run = golden_runs()[0];
  auto both = [&](decode::GenerationParams p, const std::string& where) {
    p.logprobs = 2;
    const decode::GenerationResult plain = decode::generate_plain(*target_, run.prompt, p);
    const decode::GenerationResult r = decode::generate_dflash(*target_, *draft_, run.prompt, p);
    expect_same_logprobs(plain, r, where);
    EXPECT_EQ(r.logprobs.size(), r.output_ids.size()) << where;
  };
  for (int64_t k : {0, 3, 7, 20}) {  // a stop token inside an accepted block, and as the bonus
    decode::GenerationParams p;
    p.max_new_tokens = 64;
    p.stop_ids = {run.ar_output[k]};
    both(p, "stop at output index " + std::to_string(k));
  }
  for (int64_t n : {1, 2, 7, 8, 9, 33}) {
    decode::GenerationParams p;
    p.max_new_tokens = n;
    both(p, "n " + std::to_string(n));
  }
}

TEST_F(Logprobs, SamplingReportsTheRawDistributionNotTheTemperedOne) {
  const auto run = golden_runs()[3];
  decode::GenerationParams p;
  p.max_new_tokens = 20;
  p.logprobs = 4;
  p.sampling.temperature = 0.6;
  p.sampling.top_k = 3;
  for (uint64_t seed : {7u, 8u}) {
    p.sampling.seed = seed;
    for (bool speculative : {false, true}) {
      const decode::GenerationResult r = speculative ? decode::generate_dflash(*target_, *draft_, run.prompt, p)
                                                     : decode::generate_plain(*target_, run.prompt, p);
      const std::string where = "seed " + std::to_string(seed) + (speculative ? " dflash" : " plain");
      const at::Tensor rows = teacher_forced(*target_, run.prompt, r.output_ids);
      expect_teacher_forced(r, rows, 4, where);
      // the tempered distribution would differ from the raw one for the chosen tokens: at least one is off by more
      const at::Tensor tempered = at::log_softmax(rows * (1.0 / 0.6), -1);
      double most = 0;
      for (size_t i = 0; i < r.output_ids.size(); ++i)
        most = std::max(most, std::abs(tempered[static_cast<int64_t>(i)][r.output_ids[i]].item<double>() -
                                       r.logprobs[i].logprob));
      EXPECT_GT(most, 1e-2) << where;
    }
  }
}

TEST_F(Logprobs, TheCallbackCarriesEachCommitsLogprobs) {
  const auto run = golden_runs()[1];
  for (int64_t logprobs : {-1, 0, 2}) {
    for (bool speculative : {false, true}) {
      decode::GenerationParams p;
      p.max_new_tokens = 30;
      p.logprobs = logprobs;
      std::vector<int64_t> ids;
      std::vector<decode::TokenLogprob> seen;
      decode::TokenCallback on_tokens = [&](const std::vector<int64_t>& tokens,
                                            const std::vector<decode::TokenLogprob>& lps) {
        EXPECT_EQ(lps.size(), logprobs >= 0 ? tokens.size() : 0u);
        ids.insert(ids.end(), tokens.begin(), tokens.end());
        seen.insert(seen.end(), lps.begin(), lps.end());
      };
      const decode::GenerationResult r = speculative ? decode::generate_dflash(*target_, *draft_, run.prompt, p, on_tokens)
                                                     : decode::generate_plain(*target_, run.prompt, p, on_tokens);
      const std::string where = "logprobs " + std::to_string(logprobs) + (speculative ? " dflash" : " plain");
      EXPECT_EQ(ids, r.output_ids) << where;
      ASSERT_EQ(seen.size(), r.logprobs.size()) << where;
      EXPECT_EQ(r.logprobs.size(), logprobs >= 0 ? r.output_ids.size() : 0u) << where;
      for (size_t i = 0; i < seen.size(); ++i) {
        EXPECT_EQ(seen[i].logprob, r.logprobs[i].logprob) << where << " token " << i;
        EXPECT_EQ(seen[i].top, r.logprobs[i].top) << where << " token " << i;
        EXPECT_EQ(static_cast<int64_t>(seen[i].top.size()), logprobs) << where << " token " << i;
      }
    }
  }
}

// The prompt's own logprobs (the server's echo): the teacher-forced rows, whatever pieces the forward runs in; over
// a generation's prompt + output, the output's entries are those the generation reported.
TEST_F(Logprobs, PromptLogprobsAreTheTeacherForcedRowsInAnyPieces) {
  const auto run = golden_runs()[0];
  decode::GenerationParams p;
  p.max_new_tokens = 20;
  p.logprobs = 4;
  const decode::GenerationResult generated = decode::generate_plain(*target_, run.prompt, p);
  ASSERT_EQ(generated.output_ids.size(), 20u);
  std::vector<int64_t> all = run.prompt;
  all.insert(all.end(), generated.output_ids.begin(), generated.output_ids.end());
  const int64_t n = static_cast<int64_t>(run.prompt.size()), total = static_cast<int64_t>(all.size());
  // every row's log_softmax from one forward of all but the last token
  decode::GenerationResult whole;
  whole.output_ids.assign(all.begin() + 1, all.end());
  const at::Tensor rows = teacher_forced(*target_, {all[0]}, whole.output_ids);
  for (int64_t chunk : std::vector<int64_t>{1, 3, 7, total - 1, 256}) {
    const std::string where = "pieces of " + std::to_string(chunk);
    const std::vector<decode::TokenLogprob> scored = decode::prompt_logprobs(*target_, all, 4, chunk);
    ASSERT_EQ(static_cast<int64_t>(scored.size()), total - 1) << where;
    whole.logprobs = scored;
    expect_teacher_forced(whole, rows, 4, where);
    decode::GenerationResult tail;  // the output's entries
    tail.output_ids = generated.output_ids;
    tail.logprobs.assign(scored.begin() + (n - 1), scored.end());
    expect_same_logprobs(generated, tail, where);
  }
  EXPECT_TRUE(decode::prompt_logprobs(*target_, {all[0]}, 2).empty()) << "nothing predicts a lone token";
  EXPECT_EQ(decode::prompt_logprobs(*target_, {all[0], all[1]}, 0)[0].top.size(), 0u);
}

// With next_logits the scoring forward also leaves the row after the prompt, and generate_one_from_logits draws from
// it what a one-token generation draws (the server's echo with max_tokens 1): the same token, stop and logprobs as
// generate_plain's, greedy, sampled and biased, whatever pieces the forward runs in; the prompt's entries unchanged.
TEST_F(Logprobs, OneTokenFromTheScoringForwardIsAOneTokenGeneration) {
  const auto run = golden_runs()[0];
  const int64_t n = static_cast<int64_t>(run.prompt.size());
  const std::vector<decode::TokenLogprob> entries = decode::prompt_logprobs(*target_, run.prompt, 4, 256);
  std::vector<decode::GenerationParams> settings(4);
  for (auto& p : settings) p.max_new_tokens = 1, p.logprobs = 4;
  settings[1].sampling.temperature = 0.8, settings[1].sampling.top_k = 20, settings[1].sampling.seed = 7;
  settings[2].sampling.temperature = 1.0, settings[2].sampling.seed = 11;
  settings[3].sampling.logit_bias = {{5, 1e4}};
  for (int64_t chunk : std::vector<int64_t>{1, 3, n - 1, n, 256}) {
    at::Tensor next;
    const std::vector<decode::TokenLogprob> scored = decode::prompt_logprobs(*target_, run.prompt, 4, chunk, {}, &next);
    const std::string where = "pieces of " + std::to_string(chunk);
    ASSERT_EQ(scored.size(), entries.size()) << where;
    for (size_t i = 0; i < scored.size(); ++i) EXPECT_NEAR(scored[i].logprob, entries[i].logprob, 1e-5) << where << i;
    ASSERT_TRUE(next.defined()) << where;
    for (size_t k = 0; k < settings.size(); ++k) {
      decode::GenerationParams p = settings[k];
      const decode::GenerationResult plain = decode::generate_plain(*target_, run.prompt, p);
      p.stop_ids = {plain.output_ids[0]};  // a stop token as the one token: stopped, as the loops say
      const decode::GenerationResult stopped = decode::generate_plain(*target_, run.prompt, p);
      for (const decode::GenerationResult* expected : {&plain, &stopped}) {
        p.stop_ids = expected == &plain ? std::vector<int64_t>{} : std::vector<int64_t>{plain.output_ids[0]};
        std::vector<int64_t> streamed;
        const decode::TokenCallback stream = [&](const std::vector<int64_t>& t, const auto&) {
          streamed.insert(streamed.end(), t.begin(), t.end());
        };
        const decode::GenerationResult one = decode::generate_one_from_logits(*target_, run.prompt, next, p, stream);
        const std::string at = where + " setting " + std::to_string(k) + (expected == &plain ? "" : " stop");
        expect_same_logprobs(one, *expected, at);
        EXPECT_EQ(one.stopped, expected->stopped) << at;
        EXPECT_EQ(one.prompt_tokens, n) << at;
        EXPECT_EQ(streamed, expected->output_ids) << at;
      }
    }
  }
  EXPECT_EQ(decode::generate_plain(*target_, run.prompt, settings[3]).output_ids[0], 5) << "the bias forces token 5";
  // a lone prompt token: nothing scored, its row still there
  at::Tensor lone;
  EXPECT_TRUE(decode::prompt_logprobs(*target_, {run.prompt[0]}, 2, 256, {}, &lone).empty());
  ASSERT_TRUE(lone.defined());
  expect_same_logprobs(decode::generate_one_from_logits(*target_, {run.prompt[0]}, lone, settings[0]),
                       decode::generate_plain(*target_, {run.prompt[0]}, settings[0]), "lone token");
  // stopped before the last row: no row; the one-token call refuses other lengths and shapes
  at::Tensor stopped_early = at::zeros({1});
  EXPECT_TRUE(decode::prompt_logprobs(*target_, run.prompt, 2, 256, [] { return false; }, &stopped_early).empty());
  EXPECT_FALSE(stopped_early.defined());
  decode::GenerationParams two = settings[0];
  two.max_new_tokens = 2;
  at::Tensor next;
  decode::prompt_logprobs(*target_, run.prompt, 0, 256, {}, &next);
  auto error_of = [&](const decode::GenerationParams& p, const at::Tensor& logits) -> std::string {
    try {
      decode::generate_one_from_logits(*target_, run.prompt, logits, p);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(error_of(two, next).find("but -n 2 asked"), std::string::npos);
  EXPECT_NE(error_of(settings[0], next.squeeze(0)).find("the prompt's last logits as [1, "), std::string::npos);
}

TEST_F(Logprobs, OutOfRangeCountsAreRefusedByFlagName) {
  const auto run = golden_runs()[0];
  for (int64_t bad : {-2, 21}) {
    decode::GenerationParams p;
    p.logprobs = bad;
    for (bool speculative : {false, true}) {
      try {
        if (speculative) decode::generate_dflash(*target_, *draft_, run.prompt, p);
        else decode::generate_plain(*target_, run.prompt, p);
        ADD_FAILURE() << "logprobs " << bad << " was accepted";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("--logprobs: must be 0..20"), std::string::npos) << e.what();
      }
    }
  }
}

}  // namespace
