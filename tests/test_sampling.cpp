// test_sampling.cpp — sampling transforms and the losslessness of DFlash at T>0. On the golden tiny
// pair at T=0.8, top-p 0.9: (1) the marginal of each of the first generated tokens under DFlash matches
// plain sampling (two-sample chi-square); (2) the token right after a rejection follows the target's
// distribution with the rejected draft token removed (goodness of fit against the exact residual), and
// a deliberately wrong residual is rejected by the same test, so the test has power. Fixed seeds.
#include <gtest/gtest.h>

#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <tuple>

#include "core/error.h"
#include "decode/generation.h"
#include "decode/sampler.h"
#include "model/dflash_draft.h"
#include "golden_pair.h"
#include "test_util.h"

using namespace specpress;
using namespace specpress::test;

namespace {

// Regularised upper incomplete gamma Q(a, x) (Numerical Recipes style series / continued fraction).
double gamma_q(double a, double x) {
  if (x <= 0) return 1.0;
  const double gln = std::lgamma(a);
  if (x < a + 1) {
    double sum = 1.0 / a, term = sum, ap = a;
    for (int n = 0; n < 500; ++n) {
      ap += 1;
      term *= x / ap;
      sum += term;
      if (std::fabs(term) < std::fabs(sum) * 1e-14) break;
    }
    return 1.0 - sum * std::exp(-x + a * std::log(x) - gln);
  }
  double b = x + 1 - a, c = 1e300, d = 1 / b, h = d;
  for (int i = 1; i < 500; ++i) {
    double an = -i * (i - a);
    b += 2;
    d = an * d + b;
    if (std::fabs(d) < 1e-300) d = 1e-300;
    c = b + an / c;
    if (std::fabs(c) < 1e-300) c = 1e-300;
    d = 1 / d;
    double delta = d * c;
    h *= delta;
    if (std::fabs(delta - 1) < 1e-14) break;
  }
  return std::exp(-x + a * std::log(x) - gln) * h;
}

// Two-sample chi-square p-value over categories; categories with < 10 pooled counts are merged.
double two_sample_p(const std::map<int64_t, int>& a, const std::map<int64_t, int>& b) {
  double na = 0, nb = 0;
  for (auto& [k, v] : a) na += v;
  for (auto& [k, v] : b) nb += v;
  std::map<int64_t, std::pair<double, double>> cells;
  for (auto& [k, v] : a) cells[k].first += v;
  for (auto& [k, v] : b) cells[k].second += v;
  std::vector<std::pair<double, double>> bins;
  std::pair<double, double> rare{0, 0};
  for (auto& [k, c] : cells) {
    if (c.first + c.second < 10) {
      rare.first += c.first;
      rare.second += c.second;
    } else {
      bins.push_back(c);
    }
  }
  if (rare.first + rare.second > 0) bins.push_back(rare);
  if (bins.size() < 2) return 1.0;
  double chi2 = 0;
  for (auto& [x, y] : bins) {
    const double total = x + y, ea = total * na / (na + nb), eb = total * nb / (na + nb);
    chi2 += (x - ea) * (x - ea) / ea + (y - eb) * (y - eb) / eb;
  }
  return gamma_q((bins.size() - 1) / 2.0, chi2 / 2.0);
}

// Goodness of fit of counts against probabilities; categories with expectation < 5 are merged.
double gof_p(const std::map<int64_t, int>& counts, const std::vector<double>& probs) {
  double n = 0;
  for (auto& [k, v] : counts) n += v;
  double chi2 = 0, rare_obs = 0, rare_exp = 0;
  int bins = 0;
  for (size_t t = 0; t < probs.size(); ++t) {
    const double e = probs[t] * n;
    const double o = counts.count(t) ? counts.at(t) : 0;
    if (e < 5) {
      rare_obs += o;
      rare_exp += e;
      continue;
    }
    chi2 += (o - e) * (o - e) / e;
    ++bins;
  }
  if (rare_exp > 0) {
    chi2 += (rare_obs - rare_exp) * (rare_obs - rare_exp) / std::max(rare_exp, 1e-12);
    ++bins;
  }
  return bins < 2 ? 1.0 : gamma_q((bins - 1) / 2.0, chi2 / 2.0);
}

TEST(Sampler, GreedyAndTransforms) {
  at::Tensor logits = at::tensor({1.0f, 3.0f, 3.0f, 0.5f, -2.0f}).unsqueeze(0);
  decode::Sampler greedy(decode::SamplingParams{});
  EXPECT_EQ(greedy.sample(logits)[0], 1);  // ties to the lowest index

  decode::SamplingParams p;
  p.temperature = 1.0;
  p.top_k = 2;
  at::Tensor probs = decode::Sampler(p).probabilities(logits)[0];
  EXPECT_NEAR(probs[1].item<double>(), 0.5, 1e-12);
  EXPECT_EQ(probs[0].item<double>(), 0.0);

  p.top_k = 0;
  p.min_p = 0.1;  // p = [.061 .450 .450 .037 .003]: drops tokens below 0.045
  probs = decode::Sampler(p).probabilities(logits)[0];
  EXPECT_GT(probs[0].item<double>(), 0.0);
  EXPECT_EQ(probs[3].item<double>(), 0.0);
  EXPECT_EQ(probs[4].item<double>(), 0.0);

  p.min_p = 0.0;
  p.top_p = 0.5;  // the two tied top tokens hold ~0.86 together; one alone is < 0.5 of the mass
  probs = decode::Sampler(p).probabilities(logits)[0];
  EXPECT_EQ((probs > 0).sum().item<int64_t>(), 2);

  p.top_p = 1.0;
  decode::Sampler sampler(p);
  std::map<int64_t, int> counts;
  at::Tensor many = logits.expand({4000, 5}).contiguous();
  for (int64_t t : sampler.sample(many)) counts[t]++;
  std::vector<double> expected(5);
  at::Tensor pr = at::softmax(logits[0].to(at::kDouble), 0);
  for (int i = 0; i < 5; ++i) expected[i] = pr[i].item<double>();
  EXPECT_GT(gof_p(counts, expected), 1e-3);
  EXPECT_THROW(decode::Sampler(decode::SamplingParams{1.0, 0, 1.5, 0.0, 0}), Error);
}

// llama.cpp's penalties: a token seen c times in the window of the last repeat_last_n context tokens (the prompt's
// included) has its logit divided by repeat_penalty (multiplied where <= 0), then lowered by c * frequency_penalty +
// presence_penalty; row r of a verify block also sees block[1..r].
TEST(Sampler, PenaltiesAreLlamaCppsOverTheWindowAndEachRowsPrefix) {
  const at::Tensor logits = at::tensor({2.0f, -1.0f, 0.5f, 3.0f, 0.0f, 1.0f}).unsqueeze(0).repeat({3, 1});
  decode::SamplingParams p;
  p.repeat_penalty = 2.0;
  p.frequency_penalty = 0.25;
  p.presence_penalty = 0.5;
  p.repeat_last_n = 4;
  ASSERT_TRUE(p.penalized());
  decode::Sampler sampler(p);
  sampler.begin({3, 3, 5, 0});  // the window of 4: 3 twice, 5, 0
  sampler.accept(1);           // now 3, 5, 0, 1: one 3 left the window
  auto expect_row = [](const at::Tensor& row, const std::vector<float>& want, const std::string& what) {
    for (size_t t = 0; t < want.size(); ++t) EXPECT_FLOAT_EQ(row[t].item<float>(), want[t]) << what << ", token " << t;
  };
  // counts 3:1 5:1 0:1 1:1; x > 0: x / 2 - (0.25 + 0.5); x <= 0: x * 2 - 0.75
  const std::vector<float> row0 = {2.0f / 2 - 0.75f, -1.0f * 2 - 0.75f, 0.5f, 3.0f / 2 - 0.75f, 0.0f, 1.0f / 2 - 0.75f};
  at::Tensor out = sampler.adjusted(logits.narrow(0, 0, 1));
  expect_row(out[0], row0, "one row after the accepted tokens");
  // a verify block [bonus=1, 4, 4]: row 1 sees 5 0 1 4 (3 left), row 2 sees 0 1 4 4 (5 left, 4 twice)
  out = sampler.adjusted(logits, {1, 4, 4});
  expect_row(out[0], row0, "row 0");
  expect_row(out[1], {2.0f / 2 - 0.75f, -1.0f * 2 - 0.75f, 0.5f, 3.0f, 0.0f * 2 - 0.75f, 1.0f / 2 - 0.75f}, "row 1");
  expect_row(out[2], {2.0f / 2 - 0.75f, -1.0f * 2 - 0.75f, 0.5f, 3.0f, 0.0f * 2 - 2 * 0.25f - 0.5f, 1.0f}, "row 2");
  EXPECT_TRUE(logits.equal(at::tensor({2.0f, -1.0f, 0.5f, 3.0f, 0.0f, 1.0f}).unsqueeze(0).repeat({3, 1})))
      << "the input is not modified";
  // greedy follows the penalised logits: in row 0 token 3 falls to 0.75, still above token 0's 0.25
  EXPECT_EQ(sampler.sample(logits.narrow(0, 0, 1))[0], 3);
  EXPECT_EQ(sampler.sample(logits, {1, 4, 4}), (std::vector<int64_t>{3, 3, 3}));
  p.presence_penalty = 2.0;  // now 3.0 / 2 - 2.25 = -0.75: token 0 (2.0, not in the context {3}) wins
  decode::Sampler strong(p);
  strong.begin({3});
  EXPECT_EQ(strong.sample(logits.narrow(0, 0, 1))[0], 0);
  // the distribution sampled from is the penalised one
  p.temperature = 1.0;
  decode::Sampler warm(p);
  warm.begin({3});
  at::Tensor pen = logits[0].to(at::kDouble).clone();
  pen[3] = 3.0 / 2 - 2.25;
  EXPECT_TRUE(at::allclose(warm.probabilities(logits.narrow(0, 0, 1))[0], at::softmax(pen, 0), 1e-6, 1e-9));
  // -1: the whole context; 0: off (as 1 / 0 / 0 are)
  p = decode::SamplingParams{};
  p.repeat_penalty = 2.0;
  p.repeat_last_n = -1;
  decode::Sampler whole(p);
  std::vector<int64_t> long_context(100, 0);  // 3 first, 99 tokens before the window's end: past the default 64
  long_context[0] = 3;
  whole.begin(long_context);
  whole.accept(0);
  EXPECT_FLOAT_EQ(whole.adjusted(logits.narrow(0, 0, 1))[0][3].item<float>(), 1.5f);
  p.repeat_last_n = 64;
  decode::Sampler default_window(p);
  default_window.begin(long_context);
  EXPECT_FLOAT_EQ(default_window.adjusted(logits.narrow(0, 0, 1))[0][3].item<float>(), 3.0f) << "3 left the window";
  // a window shorter than the block: row 2 of [x, 4, 4] with a window of 1 sees only the last 4
  p.repeat_last_n = 1;
  p.frequency_penalty = 0.25;
  p.presence_penalty = 0.5;
  decode::Sampler tiny(p);
  tiny.begin({3});
  const at::Tensor rows = tiny.adjusted(logits, {3, 4, 4});
  EXPECT_FLOAT_EQ(rows[0][3].item<float>(), 3.0f / 2 - 0.75f);
  EXPECT_FLOAT_EQ(rows[1][3].item<float>(), 3.0f) << "3 left the window of 1";
  EXPECT_FLOAT_EQ(rows[1][4].item<float>(), -0.75f);
  EXPECT_FLOAT_EQ(rows[2][4].item<float>(), -0.75f) << "4 twice in the block, once in the window";
  EXPECT_FLOAT_EQ(rows[2][2].item<float>(), 0.5f);
  p.repeat_last_n = 2;
  decode::Sampler near(p);
  near.begin({3, 0, 0});
  EXPECT_FLOAT_EQ(near.adjusted(logits.narrow(0, 0, 1))[0][3].item<float>(), 3.0f) << "3 is outside the window";
  p.repeat_last_n = 0;
  EXPECT_FALSE(p.penalized());
  decode::Sampler off(p);
  off.begin({3});
  EXPECT_TRUE(off.adjusted(logits).equal(logits));
  // a verify block must cover its rows
  p.repeat_last_n = 64;
  decode::Sampler short_block(p);
  EXPECT_THROW(short_block.sample(logits, {1}), Error);
  // bad values name their flags
  const std::vector<std::pair<decode::SamplingParams, std::string>> bad = {
      {[] { decode::SamplingParams b; b.repeat_penalty = 0; return b; }(), "--repeat-penalty: must be > 0"},
      {[] { decode::SamplingParams b; b.frequency_penalty = 2.5; return b; }(), "--frequency-penalty: must be in"},
      {[] { decode::SamplingParams b; b.presence_penalty = -3; return b; }(), "--presence-penalty: must be in [-2, 2]"},
      {[] { decode::SamplingParams b; b.repeat_last_n = -2; return b; }(), "--repeat-last-n: must be >= 0 tokens"},
  };
  for (const auto& [params, message] : bad) {
    try {
      decode::validate(params);
      ADD_FAILURE() << message;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  }
}

// The logit bias comes first (llama.cpp's order): added to every row, a token named twice gets both, -inf bans a token
// for good, and the penalties then see the biased logits.
TEST(Sampler, LogitBiasComesFirstAndBansWithMinusInfinity) {
  const at::Tensor logits = at::tensor({2.0f, -1.0f, 0.5f, 3.0f}).unsqueeze(0).repeat({2, 1});
  decode::SamplingParams p;
  p.logit_bias = {{3, -std::numeric_limits<double>::infinity()}, {1, 1.0}, {1, 1.5}, {2, -1.0}};
  ASSERT_TRUE(p.adjusts_logits());
  ASSERT_FALSE(p.penalized());
  decode::Sampler biased(p);
  const at::Tensor out = biased.adjusted(logits, {0, 0});
  for (int64_t r = 0; r < 2; ++r) {
    EXPECT_FLOAT_EQ(out[r][0].item<float>(), 2.0f);
    EXPECT_FLOAT_EQ(out[r][1].item<float>(), 1.5f) << "both biases of token 1";
    EXPECT_FLOAT_EQ(out[r][2].item<float>(), -0.5f);
    EXPECT_TRUE(std::isinf(out[r][3].item<float>()) && out[r][3].item<float>() < 0);
  }
  EXPECT_EQ(biased.sample(logits.narrow(0, 0, 1))[0], 0) << "greedy: the banned 3 cannot win";
  p.temperature = 1.0;
  decode::Sampler warm(p);
  std::map<int64_t, int> counts;
  for (int64_t t : warm.sample(logits.narrow(0, 0, 1).expand({2000, 4}).contiguous())) counts[t]++;
  EXPECT_EQ(counts.count(3), 0u) << "never drawn";
  // the penalties see the biased logit: token 2 at -0.5 is multiplied, not divided
  p = decode::SamplingParams{};
  p.logit_bias = {{2, -1.0}};
  p.repeat_penalty = 2.0;
  decode::Sampler both(p);
  both.begin({2});
  EXPECT_FLOAT_EQ(both.adjusted(logits.narrow(0, 0, 1))[0][2].item<float>(), -1.0f);
  p.logit_bias = {{0, std::numeric_limits<double>::quiet_NaN()}};
  EXPECT_THROW(decode::validate(p), Error);
  p.logit_bias = {{0, std::numeric_limits<double>::infinity()}};
  EXPECT_THROW(decode::validate(p), Error);
  p.logit_bias = {{-1, 1.0}};
  EXPECT_THROW(decode::validate(p), Error);
}

// The candidate path (the row's largest scores, transformed on the host) against the whole-vocabulary transform:
// the same distribution over the same tokens, the same draw for the same seed, and a fall-back where the candidates
// cannot hold the nucleus.
namespace {

decode::SamplingParams sampling(double temperature, double top_p, int64_t top_k, double min_p, uint64_t seed = 1) {
  decode::SamplingParams p;
  p.temperature = temperature, p.top_p = top_p, p.top_k = top_k, p.min_p = min_p, p.seed = seed;
  return p;
}

// A trained LM's shape: standard normal logits, a few hundred of them boosted far above the rest.
at::Tensor peaked_logits(int64_t rows, int64_t V, uint64_t seed) {
  at::Generator g = at::detail::createCPUGenerator(seed);
  at::Tensor logits = at::randn({rows, V}, g) * 2.0;
  logits.narrow(1, 1000, 300).add_(at::randn({rows, 300}, g) * 2.0 + 8.0);
  return logits;
}

// Every row's nucleus equals the whole-vocabulary distribution: its tokens are exactly those of nonzero
// probability, each with the same probability.
void expect_nuclei_match(const decode::SamplingParams& p, const at::Tensor& logits, const char* what) {
  decode::Sampler sampler(p);
  const auto nuclei = sampler.nuclei(logits);
  ASSERT_TRUE(nuclei.has_value()) << what << ": the candidates should hold the nucleus";
  const at::Tensor whole = sampler.probabilities(logits);
  for (int64_t r = 0; r < logits.size(0); ++r) {
    const decode::Sampler::Nucleus& nu = (*nuclei)[static_cast<size_t>(r)];
    const at::Tensor nonzero = whole[r].nonzero().squeeze(1);
    ASSERT_EQ(static_cast<int64_t>(nu.ids.size()), nonzero.size(0)) << what << ", row " << r;
    for (size_t i = 0; i < nu.ids.size(); ++i) {
      ASSERT_EQ(nu.ids[i], nonzero[static_cast<int64_t>(i)].item<int64_t>()) << what << ", row " << r;
      EXPECT_NEAR(nu.probs[i], whole[r][nu.ids[i]].item<double>(), 1e-12) << what << ", row " << r;
    }
  }
}

}  // namespace

TEST(Sampler, CandidatePathHoldsTheWholeVocabularysNucleus) {
  const at::Tensor logits = peaked_logits(16, 20000, 7);
  expect_nuclei_match(sampling(0.6, 0.95, 20, 0.0), logits, "qwen3 thinking");
  expect_nuclei_match(sampling(0.7, 0.8, 20, 0.0), logits, "qwen3 non-thinking");
  expect_nuclei_match(sampling(1.0, 1.0, 50, 0.0), logits, "top-k alone");
  expect_nuclei_match(sampling(0.8, 0.95, 0, 0.0), logits, "top-p alone");
  expect_nuclei_match(sampling(1.0, 1.0, 0, 0.05), logits, "min-p alone");
  expect_nuclei_match(sampling(1.0, 0.9, 40, 0.1), logits, "all three");
  expect_nuclei_match(sampling(1.0, 1.0, 20000, 0.02), logits, "top-k of the whole vocabulary, min-p");
  // bf16 logits tie often: every token tied with the k-th score stays, as the whole-vocabulary mask keeps it
  const at::Tensor tied = logits.to(at::kBFloat16).to(at::kFloat);
  expect_nuclei_match(sampling(0.6, 1.0, 20, 0.0), tied, "ties at the k-th score");
  expect_nuclei_match(sampling(0.6, 1.0, 20, 0.01), tied, "ties, min-p");
  // a vocabulary no larger than the candidates: the whole of it
  expect_nuclei_match(sampling(0.8, 0.9, 0, 0.0), peaked_logits(4, 1500, 3).narrow(1, 900, 200), "small vocabulary");

  // No truncation, or a nucleus wider than the candidates: the whole vocabulary.
  EXPECT_FALSE(decode::Sampler(sampling(1.0, 1.0, 0, 0.0)).nuclei(logits).has_value()) << "temperature alone";
  const at::Tensor flat = at::randn({2, 20000}) * 0.01;
  EXPECT_FALSE(decode::Sampler(sampling(1.0, 0.95, 0, 0.0)).nuclei(flat).has_value()) << "top-p over a flat row";
  EXPECT_FALSE(decode::Sampler(sampling(1.0, 1.0, 0, 0.5)).nuclei(flat).has_value()) << "min-p over a flat row";
  at::Tensor all_tied = at::zeros({1, 20000});
  all_tied.narrow(1, 0, 10).fill_(5.0f);
  EXPECT_FALSE(decode::Sampler(sampling(1.0, 1.0, 5000, 0.0)).nuclei(at::zeros({1, 20000})).has_value())
      << "a k-th score tied past the candidates";
  EXPECT_TRUE(decode::Sampler(sampling(1.0, 1.0, 5, 0.0)).nuclei(all_tied).has_value()) << "ties within them";
}

// Sets the candidate switch for a scope and restores the default after it, whatever the test does.
struct CandidatesOn {
  explicit CandidatesOn(bool on) { decode::set_sampler_candidates(on); }
  ~CandidatesOn() { decode::set_sampler_candidates(true); }
};

// The tokens of `calls` successive samples of `logits` by a sampler on the candidate path and by one on the whole
// vocabulary, both seeded alike: equal.
void expect_same_draws(const decode::SamplingParams& p, const at::Tensor& logits, int calls, const std::string& what) {
  decode::Sampler candidates(p), whole(p);
  for (int call = 0; call < calls; ++call) {  // the RNG stream advances alike
    std::vector<int64_t> a, b;
    {
      CandidatesOn on(true);
      a = candidates.sample(logits);
    }
    {
      CandidatesOn off(false);
      b = whole.sample(logits);
    }
    ASSERT_EQ(a, b) << what << ": T " << p.temperature << ", top-p " << p.top_p << ", top-k " << p.top_k << ", min-p "
                    << p.min_p << ", seed " << p.seed << ", call " << call;
  }
}

// `check` for each setting with each seed 1..seeds.
template <typename Check>
void for_each_seed(const std::vector<decode::SamplingParams>& settings, uint64_t seeds, const Check& check) {
  for (decode::SamplingParams p : settings)
    for (p.seed = 1; p.seed <= seeds; ++p.seed) check(p);
}

// A bias or penalty that pushes a logit past its type's range saturates there (the token takes the mass) instead of
// making it +inf, whose softmax is NaN: a server request with a bias of 1e300 drew the vocabulary's last id.
TEST(Sampler, LogitsPushedPastTheirRangeSaturateAndForceTheirTokens) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  const at::Tensor logits = at::tensor({2.0f, -1.0f, 0.5f, 3.0f, 1.0f, 0.0f}).unsqueeze(0);
  for (const at::ScalarType type : {at::kFloat, at::kBFloat16}) {
    const at::Tensor row = logits.to(type);
    for (const bool candidates : {true, false}) {
      CandidatesOn on(candidates);
      for (const auto& [temperature, top_k, top_p] : std::vector<std::tuple<double, int64_t, double>>{
               {0.0, 0, 1.0}, {1.0, 0, 1.0}, {0.7, 2, 1.0}, {0.7, 0, 0.9}, {1e-4, 3, 0.5}}) {
        decode::SamplingParams p = sampling(temperature, top_p, top_k, 0.0, 5);
        const std::string what = fmt::format("{} T {} top-k {} top-p {} candidates {}", c10::toString(type),
                                             temperature, top_k, top_p, candidates);
        p.logit_bias = {{1, 1e300}};  // past float's range: forced
        decode::Sampler forced(p);
        const at::Tensor adjusted = forced.adjusted(row);
        EXPECT_TRUE(std::isfinite(adjusted[0][1].item<double>())) << what;
        for (int64_t t : forced.sample(row.expand({64, 6}).contiguous())) ASSERT_EQ(t, 1) << what;
        p.logit_bias = {{4, 1e300}, {1, 1e300}, {3, -kInf}, {3, 1e308}, {3, 1e308}};  // two forced, 3 banned
        decode::Sampler two(p);
        std::map<int64_t, int> counts;
        for (int64_t t : two.sample(row.expand({400, 6}).contiguous())) counts[t]++;
        if (temperature == 0.0) {
          EXPECT_EQ(counts[1], 400) << what << ": greedy takes the lowest id of the tied";
        } else if (top_p < 0.9) {
          EXPECT_EQ(counts[4], 400) << what;  // a cut between equal scores keeps the higher id
        } else {
          EXPECT_EQ(counts.size(), 2u) << what;
          EXPECT_GT(counts[1], 150) << what;
          EXPECT_GT(counts[4], 150) << what;
        }
        // a repeat penalty of 1e-40 divides token 0's logit 2 past the range too
        p.logit_bias.clear();
        p.repeat_penalty = 1e-40;
        decode::Sampler penalised(p);
        penalised.begin({0, 1});
        for (int i = 0; i < 32; ++i) ASSERT_EQ(penalised.sample(row)[0], 0) << what;
      }
    }
  }
  // a row with every token banned cannot be sampled: an error, not an arbitrary id (greedy, the candidate path and
  // the whole vocabulary alike)
  for (const auto& [temperature, top_k] : std::vector<std::pair<double, int64_t>>{{0.0, 0}, {1.0, 0}, {1.0, 3}}) {
    decode::SamplingParams p = sampling(temperature, 1.0, top_k, 0.0);
    for (int64_t id = 0; id < 6; ++id) p.logit_bias.push_back({id, -kInf});
    decode::Sampler none(p);
    EXPECT_THROW(none.sample(logits), Error) << "T " << temperature << " top-k " << top_k;
  }
}

TEST(Sampler, CandidatePathDrawsTheWholeVocabularysTokens) {
  const at::Tensor logits = peaked_logits(16, 20000, 11);
  for_each_seed({sampling(0.6, 0.95, 20, 0.0), sampling(0.8, 0.95, 0, 0.0), sampling(1.0, 1.0, 0, 0.05),
                 sampling(1.0, 0.95, 0, 0.0)},
                10, [&](const decode::SamplingParams& p) { expect_same_draws(p, logits, 3, "peaked rows"); });
  // Rows whose candidates cannot hold the nucleus take the whole vocabulary, each with its own uniform, beside rows
  // that do not: a flat row among peaked ones, in either place.
  const at::Tensor flat = at::randn({1, 20000}) * 0.01;
  const at::Tensor flat_last = at::cat({logits.narrow(0, 0, 3), flat}, 0);
  for (const at::Tensor& mixed : {flat_last, at::cat({flat, logits.narrow(0, 3, 3)}, 0)}) {
    EXPECT_FALSE(decode::Sampler(sampling(1.0, 0.95, 0, 0.0)).nuclei(mixed).has_value());
    for (uint64_t seed = 1; seed <= 5; ++seed) expect_same_draws(sampling(1.0, 0.95, 0, 0.0, seed), mixed, 2, "mixed");
  }
}

// bf16 logits tie often. Where equal scores straddle the top-p cut, the whole vocabulary's stable sort drops the lower
// ids of them first, and the candidate path keeps the same ones: a row falls back only where the tied scores may go
// on past its candidates, or where the mass at the cut lies within rounding of top_p (the two paths sum it from
// opposite ends); every draw equals the whole-vocabulary path's.
TEST(Sampler, TiesAtTheTopPCutKeepTheHigherIdsOnBothPaths) {
  // n equal scores from id `first`, the rest far below
  auto ties = [](int64_t first, int64_t n) {
    at::Tensor row = (at::arange(20000, at::kFloat) * -0.0001f - 20.0f).unsqueeze(0);
    row.narrow(1, first, n).fill_(3.0f);
    return row;
  };
  // four equal scores (0.25 each): top-p 0.4 keeps two of them, ids 102 and 103, on both paths
  const at::Tensor four = ties(100, 4);
  for (const int64_t top_k : {int64_t{0}, int64_t{20}}) {
    const at::Tensor probs = decode::Sampler(sampling(1.0, 0.4, top_k, 0.0)).probabilities(four)[0];
    EXPECT_TRUE(probs.nonzero().squeeze(1).equal(at::tensor({102, 103}, at::kLong))) << "top-k " << top_k;
  }
  for (const bool candidates : {true, false}) {
    CandidatesOn on(candidates);
    for (const int64_t top_k : {int64_t{0}, int64_t{20}}) {
      const std::string what = fmt::format("candidates {} top-k {}", candidates, top_k);
      std::map<int64_t, int> counts;
      decode::Sampler sampler(sampling(1.0, 0.4, top_k, 0.0, 3));
      for (int64_t t : sampler.sample(four.expand({400, 20000}).contiguous())) counts[t]++;
      EXPECT_EQ(counts.size(), 2u) << what;
      EXPECT_GT(counts[102], 150) << what;
      EXPECT_GT(counts[103], 150) << what;
    }
  }
  // ten equal scores that top-p 0.45 cuts through: the candidates hold the five it keeps
  const at::Tensor ten = ties(100, 10);
  const auto cut = decode::Sampler(sampling(1.0, 0.45, 20, 0.0)).nuclei(ten);
  ASSERT_TRUE(cut.has_value()) << "a cut among equal scores, all of them candidates";
  EXPECT_EQ((*cut)[0].ids, (std::vector<int64_t>{105, 106, 107, 108, 109}));
  // top-p alone over 300 equal scores: its first 256 candidates cannot show which of them the cut keeps, its 4096 can;
  // over 5000, neither
  // twelve equal scores, nothing else (-inf): at top-p 0.5 the cut's mass is 6/12 from either end, which the two
  // paths round differently, so the row falls back
  at::Tensor twelve = at::full({1, 20000}, -std::numeric_limits<float>::infinity());
  twelve.narrow(1, 100, 12).fill_(3.0f);
  EXPECT_FALSE(decode::Sampler(sampling(1.0, 0.5, 0, 0.0)).nuclei(twelve).has_value()) << "a cut at top_p exactly";
  const at::Tensor wide = ties(1000, 300), wider = ties(1000, 5000);
  EXPECT_TRUE(decode::Sampler(sampling(1.0, 0.45, 0, 0.0)).nuclei(wide).has_value()) << "300 equal scores";
  EXPECT_FALSE(decode::Sampler(sampling(1.0, 0.01, 0, 0.0)).nuclei(wider).has_value()) << "5000 equal scores";
  const at::Tensor rounded = peaked_logits(16, 20000, 13).to(at::kBFloat16).to(at::kFloat);
  for_each_seed({sampling(0.6, 0.95, 20, 0.0), sampling(0.7, 0.8, 20, 0.0), sampling(0.8, 0.9, 0, 0.0),
                 sampling(1.0, 0.45, 0, 0.02), sampling(1.0, 0.01, 0, 0.0)},
                5, [&](const decode::SamplingParams& p) {
                  expect_same_draws(p, rounded, 3, "bf16 scores");
                  for (const auto& [row, what] :
                       {std::pair{four, "four"}, {ten, "ten"}, {twelve, "twelve"}, {wide, "300"}, {wider, "5000"}})
                    expect_same_draws(p, row, 3, std::string(what) + " equal scores");
                });
}

// llama.cpp's default order: top-k, top-p and min-p see the untempered logits, the temperature applies to what they
// keep. The whole-vocabulary distribution against that computed by hand; the candidate path against it.
TEST(Sampler, TemperatureLastIsLlamaCppsOrder) {
  const at::Tensor row = at::tensor({3.0, 2.5, 2.0, 1.0, 0.0, -1.0}, at::kDouble).unsqueeze(0);
  decode::SamplingParams p = sampling(0.5, 0.8, 0, 0.0);
  p.temperature_last = true;
  // untempered softmax: 0.459, 0.278, 0.169, 0.062, ...: top-p 0.8 keeps the first three (0.459 + 0.278 < 0.8)
  const at::Tensor kept = row.narrow(1, 0, 3);
  const at::Tensor expected = (kept / 0.5).softmax(-1);
  const at::Tensor got = decode::Sampler(p).probabilities(row.to(at::kFloat));
  for (int64_t i = 0; i < 6; ++i)
    EXPECT_NEAR(got[0][i].item<double>(), i < 3 ? expected[0][i].item<double>() : 0.0, 1e-6) << i;
  // transformers' order tempers first: at T 0.5 the first two hold 0.8 of the mass
  const at::Tensor first = decode::Sampler(sampling(0.5, 0.8, 0, 0.0)).probabilities(row.to(at::kFloat));
  EXPECT_GT(first[0][1].item<double>(), 0.0);
  EXPECT_EQ(first[0][2].item<double>(), 0.0);
  // min-p likewise sees the untempered probabilities: 0.3 x 0.459 keeps 3 of them (0.169), at T 0.5 only 2
  p = sampling(0.5, 1.0, 0, 0.3);
  p.temperature_last = true;
  EXPECT_GT(decode::Sampler(p).probabilities(row.to(at::kFloat))[0][2].item<double>(), 0.0);
  EXPECT_EQ(decode::Sampler(sampling(0.5, 1.0, 0, 0.3)).probabilities(row.to(at::kFloat))[0][2].item<double>(), 0.0);

  const at::Tensor logits = peaked_logits(16, 20000, 17);
  std::vector<decode::SamplingParams> settings = {sampling(0.6, 0.95, 20, 0.0), sampling(0.7, 0.8, 0, 0.0),
                                                  sampling(1.5, 1.0, 0, 0.05), sampling(0.5, 0.9, 40, 0.1)};
  for (decode::SamplingParams& q : settings) {
    q.temperature_last = true;
    expect_nuclei_match(q, logits, "temperature last");
  }
  for_each_seed(settings, 5, [&](const decode::SamplingParams& q) { expect_same_draws(q, logits, 2, "temp last"); });
}

TEST(Sampler, SamplerSequencesPickTheOrderAndTurnOffWhatTheyLeaveOut) {
  auto applied = [](const std::vector<std::string>& names) {
    decode::SamplingParams p = sampling(0.7, 0.9, 40, 0.05);
    p.repeat_penalty = 1.1;
    decode::apply_sampler_sequence(names, p, "--samplers");
    return p;
  };
  decode::SamplingParams p = applied({"penalties", "dry", "top_k", "typ_p", "top_p", "min_p", "xtc", "temperature"});
  EXPECT_TRUE(p.temperature_last);  // llama.cpp's default sequence
  EXPECT_EQ(p.top_k, 40);
  EXPECT_DOUBLE_EQ(p.repeat_penalty, 1.1);
  EXPECT_EQ(decode::sampler_sequence(p).back(), "temperature");
  p = applied({"temp", "top-k", "top-p", "min-p"});  // transformers' order; no penalties named: off
  EXPECT_FALSE(p.temperature_last);
  EXPECT_DOUBLE_EQ(p.repeat_penalty, 1.0);
  EXPECT_EQ(decode::sampler_sequence(p), (std::vector<std::string>{"temperature", "top_k", "top_p", "min_p"}));
  p = applied({"top_k", "temperature"});  // top-p and min-p left out: off
  EXPECT_DOUBLE_EQ(p.top_p, 1.0);
  EXPECT_DOUBLE_EQ(p.min_p, 0.0);
  EXPECT_EQ(p.top_k, 40);
  EXPECT_EQ(decode::sampler_names_of_letters("ekpmt", "x"),
            (std::vector<std::string>{"penalties", "top_k", "top_p", "min_p", "temperature"}));
  const std::vector<std::pair<std::vector<std::string>, std::string>> bad = {
      {{"top_k", "top_p"}, "the sequence must name the temperature"},
      {{"top_k", "mirostat", "temperature"}, "unknown sampler 'mirostat'"},
      {{"top_p", "top_k", "temperature"}, "top_k, top_p and min_p must come in that order"},
      {{"top_p", "temperature", "min_p"}, "the temperature must come before top_p and min_p"},
      {{"temperature", "penalties"}, "the penalties must come before"},
      {{"temperature", "top_k", "top_k"}, "'top_k' is named twice"},
  };
  for (const auto& [names, expected] : bad) {
    decode::SamplingParams q;
    try {
      decode::apply_sampler_sequence(names, q, "--samplers");
      ADD_FAILURE() << expected;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--samplers: " + expected), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(decode::sampler_names_of_letters("kq", "x"), Error);
}

using DFlashSampling = GoldenPair;

TEST_F(DFlashSampling, MatchesPlainSamplingIncludingAfterRejections) {
  const std::vector<int64_t> full_prompt = golden_runs()[3].prompt;
  std::vector<int64_t> prompt(full_prompt.begin(), full_prompt.begin() + 12);
  const int kRuns = 500, kPositions = 4;
  decode::GenerationParams p;
  p.max_new_tokens = kPositions;
  p.block_size = 4;
  p.record_steps = true;
  p.sampling.temperature = 0.8;
  p.sampling.top_p = 0.9;

  std::vector<std::map<int64_t, int>> spec(kPositions), plain(kPositions);
  // x0 -> the token after a rejection at draft position 1 of the first step, and the rejected draft
  std::map<int64_t, std::map<int64_t, int>> after_reject;
  std::map<int64_t, int64_t> rejected_draft;
  int rejections = 0;
  for (int i = 0; i < kRuns; ++i) {
    p.sampling.seed = 1000 + i;
    decode::GenerationResult s = decode::generate_dflash(*target_, *draft_, prompt, p);
    ASSERT_EQ(static_cast<int>(s.output_ids.size()), kPositions);
    for (int k = 0; k < kPositions; ++k) spec[k][s.output_ids[k]]++;
    const auto& step = s.steps[0];
    for (int64_t a = 0; a < p.block_size - 1; ++a)
      if (step.accepted == a) ++rejections;
    if (step.accepted == 0) {
      after_reject[step.block[0]][step.posterior[0]]++;
      rejected_draft[step.block[0]] = step.block[1];
    }
    p.sampling.seed = 500000 + i;
    decode::GenerationResult g = decode::generate_plain(*target_, prompt, p);
    for (int k = 0; k < kPositions; ++k) plain[k][g.output_ids[k]]++;
  }
  for (int k = 0; k < kPositions; ++k) EXPECT_GT(two_sample_p(spec[k], plain[k]), 1e-3) << "position " << k;
  EXPECT_GT(rejections, kRuns / 10) << "the test needs rejections to be meaningful";

  // Exact residual after a rejection at draft position 1, for the most frequent first token.
  int64_t x0 = -1;
  int most = 0;
  for (auto& [tok, counts] : after_reject) {
    int n = 0;
    for (auto& [t, c] : counts) n += c;
    if (n > most) most = n, x0 = tok;
  }
  ASSERT_GE(most, 60) << "too few rejections at position 1 to test the residual";
  std::vector<int64_t> ctx = prompt;
  ctx.push_back(x0);
  model::KVCache cache = target_->make_cache(static_cast<int64_t>(ctx.size()));
  at::Tensor logits = target_->forward(at::tensor(ctx, at::kLong), 0, cache, {}).logits;
  at::Tensor probs = decode::Sampler(p.sampling).probabilities(logits)[0];
  std::vector<double> p_full(probs.size(0));
  for (int64_t t = 0; t < probs.size(0); ++t) p_full[t] = probs[t].item<double>();
  std::printf("%d runs: %d first-step rejections, %d at position 1 after x0=%lld (rejected draft %lld, p=%.3f)\n",
              kRuns, rejections, most, static_cast<long long>(x0), static_cast<long long>(rejected_draft[x0]),
              p_full[rejected_draft[x0]]);
  std::vector<double> residual = p_full;
  residual[rejected_draft[x0]] = 0;
  double z = 0;
  for (double r : residual) z += r;
  for (double& r : residual) r /= z;
  EXPECT_GT(gof_p(after_reject[x0], residual), 1e-3);
  // Power check: the same counts against the unconditioned distribution must be rejected when the
  // rejected token carries real mass.
  if (p_full[rejected_draft[x0]] > 0.2) {
    EXPECT_LT(gof_p(after_reject[x0], p_full), 1e-3);
  }
}

// Under penalties DFlash stays lossless: greedy, its output is plain decoding's at every block size (and differs from
// the unpenalised output, so the penalties act); sampled, the first tokens' marginals match plain sampling's.
TEST_F(DFlashSampling, PenaltiesKeepDFlashLossless) {
  const std::vector<int64_t> repetitive = golden_runs()[5].prompt;  // 36 of its 64 greedy tokens repeat its context
  decode::GenerationParams p;
  p.max_new_tokens = 64;
  p.sampling.repeat_penalty = 4.0;  // strong: the tiny target's logits have wide margins
  p.sampling.frequency_penalty = 1.0;
  p.sampling.presence_penalty = 2.0;
  p.sampling.repeat_last_n = -1;
  const decode::GenerationResult plain = decode::generate_plain(*target_, repetitive, p);
  decode::GenerationParams unpenalized = p;
  unpenalized.sampling = decode::SamplingParams{};
  EXPECT_NE(plain.output_ids, decode::generate_plain(*target_, repetitive, unpenalized).output_ids)
      << "the penalties change the greedy output";
  for (int64_t block : std::vector<int64_t>{2, 4, 8, draft_->config().block_size}) {
    p.block_size = block;
    const decode::GenerationResult spec = decode::generate_dflash(*target_, *draft_, repetitive, p);
    EXPECT_EQ(spec.output_ids, plain.output_ids) << "block size " << block;
    EXPECT_GT(spec.acceptance_lengths.size(), 0u);
  }
  const std::vector<int64_t> full_prompt = golden_runs()[3].prompt;
  const std::vector<int64_t> prompt(full_prompt.begin(), full_prompt.begin() + 12);
  p.sampling.repeat_penalty = 1.3;
  p.sampling.frequency_penalty = 0.3;
  p.sampling.presence_penalty = 0.4;
  p.sampling.repeat_last_n = 8;
  const int kRuns = 300, kPositions = 4;
  p.max_new_tokens = kPositions;
  p.block_size = 4;
  p.sampling.temperature = 0.8;
  std::vector<std::map<int64_t, int>> spec(kPositions), reference(kPositions);
  for (int i = 0; i < kRuns; ++i) {
    p.sampling.seed = 2000 + i;
    const decode::GenerationResult s = decode::generate_dflash(*target_, *draft_, prompt, p);
    p.sampling.seed = 700000 + i;
    const decode::GenerationResult g = decode::generate_plain(*target_, prompt, p);
    ASSERT_EQ(static_cast<int>(s.output_ids.size()), kPositions);
    for (int k = 0; k < kPositions; ++k) spec[k][s.output_ids[k]]++, reference[k][g.output_ids[k]]++;
  }
  for (int k = 0; k < kPositions; ++k) EXPECT_GT(two_sample_p(spec[k], reference[k]), 1e-3) << "position " << k;
}

// A logit bias keeps DFlash lossless too: banning the token greedy decoding would pick most often changes the output,
// and DFlash's output is still plain decoding's.
TEST_F(DFlashSampling, LogitBiasKeepsDFlashLossless) {
  const std::vector<int64_t> prompt = golden_runs()[0].prompt;
  decode::GenerationParams p;
  p.max_new_tokens = 48;
  const std::vector<int64_t> free_output = decode::generate_plain(*target_, prompt, p).output_ids;
  std::map<int64_t, int> counts;
  for (int64_t t : free_output) counts[t]++;
  const int64_t most = std::max_element(counts.begin(), counts.end(), [](const auto& a, const auto& b) {
                         return a.second < b.second;
                       })->first;
  p.sampling.logit_bias = {{most, -std::numeric_limits<double>::infinity()}, {free_output[0], -3.0}};
  const decode::GenerationResult plain = decode::generate_plain(*target_, prompt, p);
  EXPECT_NE(plain.output_ids, free_output);
  EXPECT_EQ(std::count(plain.output_ids.begin(), plain.output_ids.end(), most), 0) << "banned";
  for (int64_t block : std::vector<int64_t>{4, draft_->config().block_size}) {
    p.block_size = block;
    EXPECT_EQ(decode::generate_dflash(*target_, *draft_, prompt, p).output_ids, plain.output_ids) << "block " << block;
  }
  p.sampling.logit_bias = {{target_->config().vocab_size, 1.0}};
  EXPECT_THROW(decode::generate_plain(*target_, prompt, p), Error) << "an id outside the vocabulary";
}

}  // namespace
