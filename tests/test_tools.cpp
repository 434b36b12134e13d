// test_tools.cpp — bench and diagnose: dataset readers (shared copies and original formats), prompt
// formats, sample selection, answer extraction, and both tools end to end on a small random Qwen3
// target + DFlash draft with the real Qwen3 vocabulary and tokenizer, checking the report structure
// and that the metric definitions hold (tau = mean of per-sample means, histogram sums to 1,
// speedup = TPOT ratio, lossless greedy outputs). Bad input gives clear errors.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <regex>
#include <set>
#include <tuple>

#include "core/error.h"
#include "golden_pair.h"
#include "io/mapped_file.h"
#include "model_fixtures.h"
#include "test_util.h"
#include "tools/answers.h"
#include "tools/bench.h"
#include "tools/bench_checkpoint.h"
#include "tools/datasets.h"
#include "tools/jsonl_checkpoint.h"
#include "tools/perplexity.h"

using namespace specpress;
using namespace specpress::test;
namespace fs = std::filesystem;

namespace {

// The shared data folder and a file in it (append, not operator+: GCC 12 warns falsely on the inlined concatenation).
std::string data_dir() { return shared_dir().append("/data"); }
std::string data(const std::string& file) { return data_dir().append("/").append(file); }

struct DatasetFile {
  std::string name, file;
  size_t rows;
};
const DatasetFile kSets[] = {{"gsm8k", "gsm8k_test.jsonl", 1319}, {"math500", "math500.jsonl", 500},
                             {"humaneval", "humaneval.jsonl", 164}, {"mbpp", "mbpp_sanitized_test.jsonl", 257},
                             {"mt-bench", "mt_bench.jsonl", 80},     {"alpaca", "alpaca_first335.jsonl", 335}};

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Datasets, SharedCopiesLoadAndMatchTheirTurns) {
  SPECPRESS_REQUIRE_SHARED();
  for (const auto& s : kSets) {
    // load_dataset re-applies the DFlash format to each record's "source" and fails if it differs from "turns".
    auto all = tools::load_dataset(s.name, data(s.file));
    EXPECT_EQ(all.size(), s.rows) << s.name;
  }
  auto gsm = tools::load_dataset("gsm8k", data("gsm8k_test.jsonl"));
  EXPECT_EQ(gsm[0].answer.value_or(""), "18");
  EXPECT_NE(gsm[0].turns[0].find("\nPlease reason step by step, and put your final answer within \\boxed{}."), std::string::npos);
  EXPECT_EQ(tools::load_dataset("mt-bench", data("mt_bench.jsonl"))[0].turns.size(), 2u);
}

TEST(Datasets, OriginalFormats) {
  ScratchDir d("datasets");
  write_text(d.path / "gsm.jsonl", R"({"question": "What is 2+3?", "answer": "2+3=<<2+3=5>>5\n#### 5"})" "\n");
  auto g = tools::load_dataset("gsm8k", (d.path / "gsm.jsonl").string());
  EXPECT_EQ(g[0].turns[0], "What is 2+3?\nPlease reason step by step, and put your final answer within \\boxed{}.");
  EXPECT_EQ(g[0].answer.value_or(""), "5");
  write_text(d.path / "alpaca.json", R"([{"instruction": "Add.", "input": "1 2", "output": "3"}, {"instruction": "Hi.", "input": "", "output": ""}])");
  auto a = tools::load_dataset("alpaca", (d.path / "alpaca.json").string());
  EXPECT_EQ(a[0].turns[0], "Add.\n\nInput:\n1 2");
  EXPECT_EQ(a[1].turns[0], "Hi.");
  write_text(d.path / "mbpp.json", R"([{"task_id": 2, "prompt": "train"}, {"task_id": 11, "prompt": "Write f."}, {"task_id": 511, "prompt": "x"}])");
  auto m = tools::load_dataset("mbpp", (d.path / "mbpp.json").string());
  ASSERT_EQ(m.size(), 1u);  // the sanitized test split is task ids 11..510
  EXPECT_EQ(m[0].turns[0], "Write f.");
  write_text(d.path / "he.jsonl", R"({"task_id": "HumanEval/0", "prompt": "def f():\n"})" "\n");
  EXPECT_EQ(tools::load_dataset("humaneval", (d.path / "he.jsonl").string())[0].turns[0],
            "Write a solution to the following problem and make sure that it passes the tests:\n```python\ndef f():\n\n```");
}

TEST(Datasets, BadInputIsNamed) {
  ScratchDir d("datasets-bad");
  EXPECT_NE(error_of([] { tools::check_dataset_name("gsm9k"); }).find("unknown dataset 'gsm9k'"), std::string::npos);
  EXPECT_NE(error_of([&] { tools::load_dataset("gsm8k", (d.path / "missing.jsonl").string()); }).find("missing.jsonl: cannot open"),
            std::string::npos);
  write_text(d.path / "bad.jsonl", "{\"question\": \"a\", \"answer\": \"#### 1\"}\n{\"question\": \n");
  EXPECT_NE(error_of([&] { tools::load_dataset("gsm8k", (d.path / "bad.jsonl").string()); }).find("bad.jsonl:2: invalid JSON line"),
            std::string::npos);
  write_text(d.path / "field.jsonl", "{\"problem\": \"a\"}\n");
  EXPECT_NE(error_of([&] { tools::load_dataset("gsm8k", (d.path / "field.jsonl").string()); })
                .find("field.jsonl:1: missing string field 'question'"),
            std::string::npos);
  write_text(d.path / "empty.jsonl", "\n\n");
  EXPECT_NE(error_of([&] { tools::load_dataset("gsm8k", (d.path / "empty.jsonl").string()); }).find("empty data file"),
            std::string::npos);
  // reports and checkpoints tell samples apart by id
  write_text(d.path / "ids.jsonl", "{\"id\": \"q\", \"question\": \"a\", \"answer\": \"#### 1\"}\n"
                                   "{\"id\": \"r\", \"question\": \"b\", \"answer\": \"#### 2\"}\n"
                                   "{\"id\": \"q\", \"question\": \"c\", \"answer\": \"#### 3\"}\n");
  EXPECT_NE(error_of([&] { tools::load_dataset("gsm8k", (d.path / "ids.jsonl").string()); })
                .find("ids.jsonl:3: the sample id 'q' is also the id of " + (d.path / "ids.jsonl").string() + ":1"),
            std::string::npos);
}

TEST(Datasets, Selection) {
  SPECPRESS_REQUIRE_SHARED();
  auto all = tools::load_dataset("gsm8k", data("gsm8k_test.jsonl"));
  tools::Selection sel;
  sel.max_samples = 5;
  sel.seed = 7;
  auto a = tools::select_samples(all, "gsm8k", sel);
  auto b = tools::select_samples(all, "gsm8k", sel);
  ASSERT_EQ(a.size(), 5u);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].row, b[i].row);  // deterministic
  sel.indices_file = data("dflash_subsets.json");
  sel.max_samples = 0;
  auto sub = tools::select_samples(all, "gsm8k", sel);
  EXPECT_EQ(sub.size(), 128u);
  EXPECT_EQ(sub[0].row, 264);  // first of hf_shuffle_seed0
  auto he = tools::select_samples(tools::load_dataset("humaneval", data("humaneval.jsonl")), "humaneval", sel);
  EXPECT_EQ(he.size(), 164u);  // the reference runs every row
  ScratchDir d("selection");
  write_text(d.path / "empty.json", "[]");
  sel.indices_file = (d.path / "empty.json").string();
  EXPECT_NE(error_of([&] { tools::select_samples(all, "gsm8k", sel); }).find("is empty"), std::string::npos);
  write_text(d.path / "far.json", "[1, 5000]");
  sel.indices_file = (d.path / "far.json").string();
  EXPECT_NE(error_of([&] { tools::select_samples(all, "gsm8k", sel); }).find("row index 5000 is outside the 1319 rows"),
            std::string::npos);
}

// A record with one sample id and turn, its plain and DFlash TPOT (ms) and its DFlash acceptance lengths.
tools::BenchRecord bench_record(const std::string& id, double plain_tpot, double dflash_tpot, std::vector<int64_t> lengths) {
  tools::BenchRecord r;
  r.id = id;
  r.plain.output_ids.assign(10, 1);
  r.plain.decode_ms = 10 * plain_tpot;
  r.dflash.output_ids.assign(10, 1);
  r.dflash.decode_ms = 10 * dflash_tpot;
  r.dflash.block_size = 4;
  r.dflash.acceptance_lengths = std::move(lengths);
  return r;
}

// tools::perplexity (float32 golden target) against llama-perplexity's rule computed here from one forward a chunk:
// the second half of each chunk scored, PPL = exp(mean NLL), its error the standard error of the mean times PPL.
using Perplexity = GoldenPair;
TEST_F(Perplexity, IsLlamaPerplexitysRuleOverChunks) {
  std::vector<int64_t> tokens;
  for (const auto& run : golden_runs()) {
    tokens.insert(tokens.end(), run.prompt.begin(), run.prompt.end());
    tokens.insert(tokens.end(), run.ar_output.begin(), run.ar_output.end());
  }
  const int64_t n_ctx = 24;
  ASSERT_GE(static_cast<int64_t>(tokens.size()), 3 * n_ctx + 5) << "golden runs too short for three chunks";
  const int64_t chunks = static_cast<int64_t>(tokens.size()) / n_ctx;
  const model::Qwen3Model bf16 = model::Qwen3Model::load(golden_dir() + "/target", at::kBFloat16, target_->device());
  // every row's log_softmax (float64) from one forward of a chunk less its last token (no row predicts past it; the
  // same GEMM shapes as the tool's, whose bfloat16 products another M may round otherwise, as oneDNN's do on Zen 4)
  auto rows_of = [&](const model::Qwen3Model& m, const std::vector<int64_t>& chunk) {
    model::KVCache cache = m.make_cache(n_ctx - 1);
    const std::vector<int64_t> inputs(chunk.begin(), chunk.end() - 1);
    const at::Tensor logits = m.forward(at::tensor(inputs, at::kLong).to(m.device()), 0, cache, {true}).logits;
    return at::log_softmax(logits.to(at::kCPU).to(at::kDouble), -1);
  };
  std::vector<double> nlls, running, klds;  // klds: KL(float32 || bfloat16) a scored row
  std::vector<double> low_nlls, dps, same;  // the bfloat16 copy's NLLs, its Δp against float32, argmax agreement
  for (int64_t c = 0; c < chunks; ++c) {
    const std::vector<int64_t> chunk(tokens.begin() + c * n_ctx, tokens.begin() + (c + 1) * n_ctx);
    const at::Tensor rows = rows_of(*target_, chunk), low = rows_of(bf16, chunk);
    for (int64_t j = n_ctx / 2; j < n_ctx - 1; ++j) {
      nlls.push_back(-rows[j][chunk[j + 1]].item<double>());
      klds.push_back((rows[j].exp() * (rows[j] - low[j])).sum().item<double>());
      low_nlls.push_back(-low[j][chunk[j + 1]].item<double>());
      dps.push_back(std::exp(-low_nlls.back()) - std::exp(-nlls.back()));
      same.push_back(rows[j].argmax().item<int64_t>() == low[j].argmax().item<int64_t>() ? 1.0 : 0.0);
    }
    double sum = 0;
    for (double x : nlls) sum += x;
    running.push_back(std::exp(sum / static_cast<double>(nlls.size())));
  }
  double mean = 0, sq = 0;
  for (double x : nlls) mean += x, sq += x * x;
  const double n = static_cast<double>(nlls.size());
  mean /= n;
  const double stderr_nll = std::sqrt((sq / n - mean * mean) / (n - 1));

  std::vector<std::pair<int64_t, double>> progress;
  auto on_chunk = [&](int64_t done, const tools::PerplexityResult& so_far) {
    progress.push_back({done, so_far.ppl});
    EXPECT_FALSE(so_far.kl.has_value());
  };
  const tools::PerplexityResult r = tools::perplexity(*target_, tokens, n_ctx, 0, on_chunk);
  EXPECT_EQ(r.chunks, chunks);
  EXPECT_EQ(r.tokens_scored, chunks * (n_ctx - n_ctx / 2 - 1));
  EXPECT_FALSE(r.kl.has_value());
  EXPECT_NEAR(r.nll_mean, mean, 1e-5);
  EXPECT_NEAR(r.ppl, std::exp(mean), 1e-5 * std::exp(mean));
  EXPECT_NEAR(r.nll_stderr, stderr_nll, 1e-5);
  EXPECT_NEAR(r.ppl_stderr, std::exp(mean) * stderr_nll, 1e-4 * std::exp(mean) * stderr_nll);
  ASSERT_EQ(r.running_ppl.size(), running.size());
  ASSERT_EQ(progress.size(), running.size());
  for (size_t c = 0; c < running.size(); ++c) {
    EXPECT_NEAR(r.running_ppl[c], running[c], 1e-5 * running[c]) << c;
    EXPECT_EQ(progress[c].first, static_cast<int64_t>(c) + 1);
    EXPECT_EQ(progress[c].second, r.running_ppl[c]);
  }
  // the checkpoint against itself: no divergence; against its bfloat16 copy, a small one, with PPL and the ratio
  const tools::PerplexityResult itself = tools::perplexity(*target_, tokens, n_ctx, 0, {}, target_.get());
  ASSERT_TRUE(itself.kl.has_value());
  EXPECT_EQ(itself.ppl, r.ppl);
  EXPECT_EQ(itself.kl->base_ppl, r.ppl);
  EXPECT_EQ(itself.kl->ppl_ratio, 1.0);
  EXPECT_EQ(itself.kl->kld.mean, 0.0);
  EXPECT_EQ(itself.kl->kld.quantiles.front(), 0.0);
  EXPECT_EQ(itself.kl->delta_p.quantiles.front(), 0.0);
  EXPECT_EQ(itself.kl->delta_p.quantiles.back(), 0.0);
  EXPECT_EQ(itself.kl->ppl_diff, 0.0);
  EXPECT_NEAR(itself.kl->ln_ppl_ratio_stderr, 0.0, 1e-7);
  EXPECT_NEAR(itself.kl->nll_correlation, 1.0, 1e-12);
  EXPECT_EQ(itself.kl->same_top, 1.0);
  EXPECT_EQ(itself.kl->same_top_stderr, 0.0);
  std::vector<tools::PerplexityResult> kl_progress;  // each chunk's statistics so far, without quantiles
  const tools::PerplexityResult against = tools::perplexity(
      bf16, tokens, n_ctx, 0, [&](int64_t, const tools::PerplexityResult& so_far) { kl_progress.push_back(so_far); },
      target_.get());
  ASSERT_EQ(kl_progress.size(), static_cast<size_t>(chunks));
  for (const tools::PerplexityResult& p : kl_progress) {
    ASSERT_TRUE(p.kl.has_value());
    EXPECT_TRUE(p.kl->kld.quantiles.empty());
  }
  EXPECT_EQ(kl_progress.back().kl->kld.mean, against.kl->kld.mean);
  EXPECT_EQ(kl_progress.back().kl->same_top, against.kl->same_top);
  EXPECT_EQ(kl_progress[0].tokens_scored, n_ctx - n_ctx / 2 - 1);
  ASSERT_TRUE(against.kl.has_value());
  EXPECT_NEAR(against.kl->base_ppl, r.ppl, 1e-9 * r.ppl) << "the base's perplexity is the float32 run's";
  EXPECT_NEAR(against.kl->ppl_ratio, against.ppl / r.ppl, 1e-12);
  double kld_mean = 0, kld_max = 0;
  for (double k : klds) kld_mean += k / static_cast<double>(klds.size()), kld_max = std::max(kld_max, k);
  EXPECT_NEAR(against.kl->kld.mean, kld_mean, 1e-9 + 1e-6 * kld_mean);
  EXPECT_GT(against.kl->kld.mean, 0.0);
  EXPECT_LT(against.kl->kld.mean, 0.05) << "bfloat16 rounding, not another model";
  EXPECT_GT(against.kl->same_top, 0.8);
  EXPECT_LE(against.kl->same_top, 1.0);
  // llama-perplexity --kl-divergence's other statistics, against ATen's correlation, quantiles and variances
  const at::Tensor model_nll = at::tensor(low_nlls, at::kDouble), base_nll = at::tensor(nlls, at::kDouble);
  const at::Tensor kld_t = at::tensor(klds, at::kDouble), dp_t = at::tensor(dps, at::kDouble);
  const double rows_n = static_cast<double>(nlls.size());
  auto stderr_of = [&](const at::Tensor& x) {
    return at::std(x, /*unbiased=*/false).item<double>() / std::sqrt(rows_n - 1);
  };
  const tools::KlDivergence& kl = *against.kl;
  EXPECT_NEAR(kl.base_ppl_stderr, r.ppl_stderr, 1e-9 * r.ppl_stderr);
  EXPECT_NEAR(kl.nll_correlation, at::corrcoef(at::stack({model_nll, base_nll}))[0][1].item<double>(), 1e-9);
  EXPECT_GT(kl.nll_correlation, 0.99) << "bfloat16 rounding, not another model";
  EXPECT_NEAR(kl.ln_ppl_ratio, (model_nll - base_nll).mean().item<double>(), 1e-9);
  EXPECT_NEAR(kl.ln_ppl_ratio_stderr, stderr_of(model_nll - base_nll), 1e-7) << "the error of the paired difference";
  EXPECT_NEAR(kl.ppl_ratio_stderr, kl.ppl_ratio * kl.ln_ppl_ratio_stderr, 1e-12);
  EXPECT_NEAR(kl.ppl_diff, against.ppl - kl.base_ppl, 1e-9 * against.ppl);
  EXPECT_GT(kl.ppl_diff_stderr, 0.0);
  EXPECT_LT(kl.ppl_diff_stderr, 0.5 * (against.ppl_stderr + kl.base_ppl_stderr)) << "paired: far under the two errors";
  EXPECT_NEAR(kl.kld.stderr_mean, stderr_of(kld_t), 1e-9);
  EXPECT_NEAR(kl.delta_p.mean, dp_t.mean().item<double>(), 1e-9);
  EXPECT_NEAR(kl.delta_p.stderr_mean, stderr_of(dp_t), 1e-9);
  EXPECT_NEAR(kl.rms_delta_p, std::sqrt((dp_t * dp_t).mean().item<double>()), 1e-9);
  EXPECT_NEAR(kl.rms_delta_p_stderr, 0.5 * stderr_of(dp_t * dp_t) / kl.rms_delta_p, 1e-9);
  const double same_top = at::tensor(same, at::kDouble).mean().item<double>();
  EXPECT_NEAR(kl.same_top, same_top, 1e-12);
  EXPECT_NEAR(kl.same_top_stderr, std::sqrt(same_top * (1 - same_top) / (rows_n - 1)), 1e-12);
  ASSERT_EQ(kl.kld.quantiles.size(), tools::kPerplexityQuantiles.size());
  ASSERT_EQ(kl.delta_p.quantiles.size(), tools::kPerplexityQuantiles.size());
  for (size_t i = 0; i < tools::kPerplexityQuantiles.size(); ++i) {
    const double q = tools::kPerplexityQuantiles[i];  // at::quantile's default: linear between the nearest ranks
    EXPECT_NEAR(kl.kld.quantiles[i], at::quantile(kld_t, q).item<double>(), 1e-9 + 1e-6 * kld_mean) << q;
    EXPECT_NEAR(kl.delta_p.quantiles[i], at::quantile(dp_t, q).item<double>(), 1e-9) << q;
  }
  EXPECT_NEAR(kl.kld.quantiles.front(), kld_max, 1e-9 + 1e-6 * kld_max) << "the 1 quantile is the maximum";
  // pieces of 5 tokens (several forwards a chunk, the first pieces unscored, the base kept in step): the same numbers
  const tools::PerplexityResult pieces = tools::perplexity(bf16, tokens, n_ctx, -1, {}, target_.get(), 5);
  EXPECT_EQ(pieces.tokens_scored, against.tokens_scored);
  EXPECT_NEAR(pieces.ppl, against.ppl, 1e-3 * against.ppl) << "bfloat16 forwards of other lengths round differently";
  EXPECT_NEAR(pieces.kl->base_ppl, against.kl->base_ppl, 1e-6 * against.kl->base_ppl);  // float32 GEMMs of other shapes
  EXPECT_NEAR(pieces.kl->kld.mean, against.kl->kld.mean, 0.2 * against.kl->kld.mean);
  const tools::PerplexityResult f32_pieces = tools::perplexity(*target_, tokens, n_ctx, 0, {}, nullptr, 5);
  EXPECT_NEAR(f32_pieces.ppl, r.ppl, 1e-6 * r.ppl);
  for (size_t c = 0; c < running.size(); ++c) EXPECT_NEAR(f32_pieces.running_ppl[c], r.running_ppl[c], 1e-6 * running[c]);
  const tools::PerplexityResult two = tools::perplexity(*target_, tokens, n_ctx, 2);
  EXPECT_EQ(two.chunks, 2);
  EXPECT_EQ(two.ppl, r.running_ppl[1]) << "--chunks 2 is the first two chunks' running value";

  const std::vector<std::pair<std::function<void()>, std::string>> bad = {
      {[&] { tools::perplexity(*target_, tokens, 3); }, "-c/--ctx-size: 3 is too small"},
      {[&] { tools::perplexity(*target_, tokens, 1 << 30); }, "exceeds the model's max_position_embeddings"},
      {[&] { tools::perplexity(*target_, {1, 2, 3, 4, 5}, 8); }, "the input has 5 tokens, fewer than one chunk"},
      {[&] { tools::perplexity(*target_, {1, 2, 99999999}, 8); },  // short too, but the bad id is what to fix
       "token id 99999999 at index 2 is outside the vocabulary"},
      {[&] { tools::perplexity(*target_, tokens, n_ctx, -2); }, "--chunks: must be >= 0 (0 or -1: all), got -2"},
      {[&] {
         std::vector<int64_t> outside = tokens;
         outside[30] = target_->config().vocab_size;
         tools::perplexity(*target_, outside, n_ctx);
       },
       "token id " + std::to_string(target_->config().vocab_size) + " at index 30 is outside the vocabulary"},
  };
  for (const auto& [fn, message] : bad) EXPECT_NE(error_of(fn).find(message), std::string::npos) << error_of(fn);
}

// A new --checkpoint file is created locked and never over a file: two runs beginning the same one cannot both hold
// it, since the second's link into place fails and it takes the file as an existing one, whose lock the first holds.
// A dangling link's file is created. A checkpoint whose opening fails after taking the lock lets go of it.
TEST(JsonlCheckpoint, NewFilesAreCreatedLockedAndNeverReplaced) {
  ScratchDir d("ckpt-create");
  const std::string path = (d.path / "new.ckpt").string();
  auto locked_elsewhere = [](const std::string& file) {
    const int fd = ::open(file.c_str(), O_RDONLY);
    const bool held = fd >= 0 && ::flock(fd, LOCK_EX | LOCK_NB) != 0;
    if (fd >= 0) ::close(fd);
    return held;
  };
  const int fd = io::create_file_locked(path, "first\n");
  ASSERT_GE(fd, 0);
  EXPECT_EQ(io::read_text_file(path), "first\n");
  EXPECT_TRUE(locked_elsewhere(path));
  EXPECT_EQ(io::create_file_locked(path, "second\n"), -1) << "made meanwhile: not replaced";
  EXPECT_EQ(io::read_text_file(path), "first\n");
  ::close(fd);
  EXPECT_FALSE(locked_elsewhere(path));
  EXPECT_EQ(std::distance(fs::directory_iterator(d.path), fs::directory_iterator()), 1) << "no temporary file left";
  const fs::path link = d.path / "link.ckpt", target = d.path / "target.ckpt";
  fs::create_symlink(target, link);
  const int via_link = io::create_file_locked(link.string(), "x\n");
  ASSERT_GE(via_link, 0);
  ::close(via_link);
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_EQ(io::read_text_file(target.string()), "x\n");

  const tools::CheckpointFormat format{"specpress test checkpoint", 1, "bench", "", nullptr};
  const std::string ckpt = (d.path / "run.ckpt").string();
  {
    tools::JsonlCheckpoint c(ckpt, format, {{"max_new_tokens", 8}}, false);
    EXPECT_TRUE(locked_elsewhere(ckpt));
    c.append({{"id", "a"}});
  }
  EXPECT_FALSE(locked_elsewhere(ckpt));
  expect_error([&] { tools::JsonlCheckpoint(ckpt, format, {{"max_new_tokens", 9}}, true); }, "max_new_tokens");
  EXPECT_FALSE(locked_elsewhere(ckpt)) << "a refused resume let go of the file's lock";
  EXPECT_EQ(tools::JsonlCheckpoint(ckpt, format, {{"max_new_tokens", 8}}, true).lines().size(), 1u);
}

// The intervals: a point where every resample is the same, around the point value otherwise, the same draws every
// time, and a sample's records (mt-bench's turns) drawn together.
TEST(BenchIntervals, BootstrapOverSamples) {
  tools::Interval speedup, tau;
  tools::bootstrap_intervals({bench_record("a", 4, 2, {3, 1})}, speedup, tau);
  EXPECT_DOUBLE_EQ(speedup.lo, 2.0);
  EXPECT_DOUBLE_EQ(speedup.hi, 2.0);
  EXPECT_DOUBLE_EQ(tau.lo, 2.0);
  EXPECT_DOUBLE_EQ(tau.hi, 2.0);
  // two samples of two turns: a's turns tau 1 and 3, b's 2 and 2; every draw of whole samples has mean tau 2, while
  // turns drawn one by one would spread from 1 to 3
  tools::bootstrap_intervals({bench_record("a", 3, 1, {1}), bench_record("a", 3, 1, {3}), bench_record("b", 3, 1, {2}),
                              bench_record("b", 3, 1, {2})},
                             speedup, tau);
  EXPECT_DOUBLE_EQ(tau.lo, 2.0);
  EXPECT_DOUBLE_EQ(tau.hi, 2.0);
  EXPECT_DOUBLE_EQ(speedup.lo, 3.0);
  EXPECT_DOUBLE_EQ(speedup.hi, 3.0);
  // twenty samples of different speed: an interval that holds the point values, narrower than the samples' range
  std::vector<tools::BenchRecord> records;
  for (int i = 0; i < 20; ++i)
    records.push_back(bench_record(std::to_string(i), 2 + 0.1 * i, 1, {1 + i % 4, 1 + (i * 7) % 4}));
  tools::BenchReport report;
  report.block_size = 4;
  report.records = records;
  tools::aggregate(report);
  EXPECT_LT(report.speedup_lo, report.speedup);
  EXPECT_GT(report.speedup_hi, report.speedup);
  EXPECT_GT(report.speedup_lo, 2.3);  // the samples range over 2 .. 3.9
  EXPECT_LT(report.speedup_hi, 3.6);
  EXPECT_LT(report.tau_lo, report.tau);
  EXPECT_GT(report.tau_hi, report.tau);
  tools::bootstrap_intervals(records, speedup, tau);
  EXPECT_EQ(speedup.lo, report.speedup_lo);  // the same draws
  EXPECT_EQ(tau.hi, report.tau_hi);
  const auto j = tools::bench_json(report);
  EXPECT_EQ(j["summary"]["tau_ci95"][0], report.tau_lo);
  EXPECT_EQ(j["summary"]["speedup_ci95"][1], report.speedup_hi);
  EXPECT_NE(tools::bench_summary_markdown({report}).find(
                fmt::format("{:.2f}x ({:.2f}-{:.2f})", report.speedup, report.speedup_lo, report.speedup_hi)),
            std::string::npos);
}

// Paired comparisons: a run whose every sample gains exactly 1 in tau and halves its DFlash TPOT differs by exactly
// +1 and 2x in every draw, although each run's own intervals are wide (the prompts vary); runs of another dataset are
// compared with their own first run only.
TEST(BenchIntervals, PairedComparisonsAgainstTheDatasetsFirstRun) {
  std::vector<tools::BenchReport> reports(3);
  for (int i = 0; i < 20; ++i) {
    const std::vector<int64_t> lengths = {1 + i % 3, 1 + (i * 5) % 3};
    std::vector<int64_t> longer = lengths;
    for (int64_t& l : longer) l += 1;
    reports[0].records.push_back(bench_record(std::to_string(i), 2 + 0.1 * i, 1, lengths));
    reports[1].records.push_back(bench_record(std::to_string(i), 2 + 0.1 * i, 0.5, longer));
    reports[2].records.push_back(bench_record(std::to_string(i), 2, 1, lengths));
  }
  for (size_t k = 0; k < 3; ++k) {
    reports[k].options.dataset = k < 2 ? "gsm8k" : "mbpp";
    reports[k].block_size = 4;
    tools::aggregate(reports[k]);
  }
  EXPECT_GT(reports[0].tau_hi - reports[0].tau_lo, 0.2) << "each run's own interval spans the prompts' spread";
  const auto c = tools::paired_comparisons(reports);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].base, 0u);
  EXPECT_EQ(c[0].run, 1u);
  EXPECT_EQ(c[0].samples, 20);
  EXPECT_DOUBLE_EQ(c[0].tau_diff, 1.0);
  EXPECT_DOUBLE_EQ(c[0].tau_diff_lo, 1.0);
  EXPECT_DOUBLE_EQ(c[0].tau_diff_hi, 1.0);
  EXPECT_DOUBLE_EQ(c[0].speedup_ratio, 2.0);
  EXPECT_DOUBLE_EQ(c[0].speedup_ratio_lo, 2.0);
  EXPECT_DOUBLE_EQ(c[0].speedup_ratio_hi, 2.0);
  const auto j = tools::bench_summary_json(reports);
  ASSERT_EQ(j["paired"].size(), 1u);
  EXPECT_EQ(j["paired"][0]["run_index"], 1);
  EXPECT_EQ(j["paired"][0]["tau_difference_ci95"][0], 1.0);
  EXPECT_NE(tools::bench_summary_markdown(reports).find("| gsm8k | block 4 | block 4 | 20 | +1.00 (+1.00 to +1.00) | 2.000x "
                                                         "(2.000-2.000) |"),
            std::string::npos)
      << tools::bench_summary_markdown(reports);
}

// The KV memory a compressed bench saves is per sample: an mt-bench sample's two turns (two records, each a generation
// with its own cache) add up, rather than being averaged as two samples. Verify steps per answer are per record.
TEST(BenchAggregate, KvBytesSavedArePerSample) {
  tools::BenchReport report;
  report.block_size = 4;
  report.options.compress.method = compress::Method::kKeepLast;
  for (const auto& [id, positions, slots] : std::vector<std::tuple<std::string, int64_t, int64_t>>{
           {"a", 100, 60}, {"a", 200, 120}, {"b", 100, 80}, {"b", 100, 80}}) {
    tools::BenchRecord r = bench_record(id, 2, 1, {2, 2});
    r.has_compression = true;
    r.compressed = r.dflash;
    r.compression.positions = positions;
    r.compression.slots = slots;
    r.compression.kv_bytes_per_slot = 1024;
    report.records.push_back(r);
  }
  tools::aggregate(report);
  EXPECT_DOUBLE_EQ(report.kv_bytes_saved, (40 + 80 + 20 + 20) / 2.0 * 1024);  // two samples, not four records
  // each record's DFlash took 2 verify steps; the compressed copies too, but for one that took 3
  report.records[3].compressed.acceptance_lengths = {2, 1, 1};
  tools::aggregate(report);
  EXPECT_DOUBLE_EQ(report.dflash_steps_per_answer, 2.0);
  EXPECT_DOUBLE_EQ(report.compressed_steps_per_answer, 2.25);
  EXPECT_DOUBLE_EQ(tools::bench_json(report)["summary"]["compression"]["verify_steps_per_answer"]["compressed"]
                       .get<double>(), 2.25);
  EXPECT_NE(tools::bench_markdown(report).find("verify steps per answer 2.2 against 2.0"), std::string::npos);
  EXPECT_DOUBLE_EQ(tools::bench_json(report)["summary"]["compression"]["kv_bytes_saved_per_sample"].get<double>(),
                   report.kv_bytes_saved);
}

// Outputs too short for a compression event compare no (event, offset) pair: the fidelity means are null and the
// Markdown says nothing was measured, rather than a perfect top-1 agreement of 1 and a KL of 0.
TEST(BenchAggregate, NoCompressionEventMeasuresNoFidelity) {
  tools::BenchReport report;
  report.block_size = 4;
  report.options.compress.method = compress::Method::kMeanMerge;
  tools::BenchRecord r = bench_record("a", 2, 1, {2, 2});
  r.has_compression = true;
  r.compressed = r.dflash;
  r.fidelity.count.assign(64, 0);
  r.fidelity.top1 = r.fidelity.kl = r.fidelity.tv = std::vector<double>(64, 0.0);
  report.records.push_back(r);
  tools::aggregate(report);
  const auto j = nlohmann::json::parse(tools::bench_json(report).dump());  // as the file holds it: NaN written null
  const auto c = j["summary"]["compression"];
  EXPECT_EQ(c["fidelity_pairs"], 0);
  EXPECT_TRUE(c["top1_agreement"].is_null() && c["mean_kl"].is_null() && c["mean_tv"].is_null()) << c;
  EXPECT_TRUE(c["top1_by_offset"][0].is_null()) << c["top1_by_offset"];
  EXPECT_TRUE(j["records"][0]["compressed"]["top1_agreement"].is_null());
  const std::string md = tools::bench_markdown(report);
  EXPECT_NE(md.find("no compression event, so no fidelity measured"), std::string::npos) << md;
  EXPECT_EQ(md.find("top-1 agreement"), std::string::npos) << md;
}

// A compressed bench over several datasets: the summary carries each run's compression line (ratio, fidelity, tau
// compressed, compressed outputs identical to uncompressed DFlash's), not only the speed columns.
TEST(BenchSummary, CarriesEachRunsCompression) {
  std::vector<tools::BenchReport> reports(2);
  for (size_t i = 0; i < reports.size(); ++i) {
    tools::BenchReport& report = reports[i];
    report.block_size = 4;
    report.options.dataset = i == 0 ? "gsm8k" : "mbpp";
    report.options.compress.method = compress::Method::kKeepLast;
    tools::BenchRecord r = bench_record("a", 2, 1, {2, 2});
    r.has_compression = r.outputs_equal = true;
    r.compressed = r.dflash;
    r.compression.positions = 100;
    r.compression.slots = i == 0 ? 50 : 80;
    r.fidelity.count.assign(64, 0);
    r.fidelity.top1 = r.fidelity.kl = r.fidelity.tv = std::vector<double>(64, 0.0);
    if (i == 0) r.fidelity.count[0] = 4, r.fidelity.top1[0] = 3, r.fidelity.kl[0] = 0.2;  // mbpp: no event
    report.records.push_back(r);
    tools::aggregate(report);
  }
  const std::string md = tools::bench_summary_markdown(reports);
  EXPECT_NE(md.find("Compressed DFlash (keep-last, window 64, sinks 4, merge 0) against uncompressed DFlash"),
            std::string::npos) << md;
  EXPECT_NE(md.find("| gsm8k | 4 | 2.00x | 0.7500 | 0.0500 | +0.00% | 2.00 | 100% |"), std::string::npos) << md;
  EXPECT_NE(md.find("| mbpp | 4 | 1.25x | - (no event) | - |"), std::string::npos) << md;
  const auto j = nlohmann::json::parse(tools::bench_summary_json(reports).dump());
  EXPECT_DOUBLE_EQ(j["datasets"][0]["compression"]["top1_agreement"].get<double>(), 0.75);
  EXPECT_TRUE(j["datasets"][1]["compression"]["top1_agreement"].is_null());
  EXPECT_EQ(j["datasets"][1]["compression"]["fidelity_pairs"], 0);
}

// --check-answers with --compress: the compressed output's accuracy, and McNemar's exact test against uncompressed
// DFlash over the discordant samples (b right only uncompressed, c right only compressed).
TEST(BenchAggregate, CompressedAnswersArePairedWithDFlashs) {
  EXPECT_DOUBLE_EQ(tools::mcnemar_exact_p(0, 0), 1.0);
  EXPECT_DOUBLE_EQ(tools::mcnemar_exact_p(5, 5), 1.0);
  EXPECT_NEAR(tools::mcnemar_exact_p(10, 0), 2.0 / 1024, 1e-12);
  EXPECT_NEAR(tools::mcnemar_exact_p(1, 9), 2.0 * (1 + 10) / 1024, 1e-12);
  EXPECT_NEAR(tools::mcnemar_exact_p(9, 1), tools::mcnemar_exact_p(1, 9), 1e-15);
  EXPECT_NEAR(tools::mcnemar_exact_p(600, 500), 0.00281954499, 1e-9);  // 2 P(X <= 500), X ~ Bin(1100, 1/2): logs
  tools::BenchReport report;
  report.block_size = 4;
  report.options.compress.method = compress::Method::kKeepLast;
  // (DFlash's answer, the compressed output's): right/right, right/wrong twice, wrong/right, and one with no reference
  const std::vector<std::tuple<std::string, std::string, std::string>> answers = {
      {"4", "4", "4"}, {"4", "5", "4"}, {"7", "", "7"}, {"1", "2", "2"}, {"3", "3", ""}};
  for (size_t i = 0; i < answers.size(); ++i) {
    tools::BenchRecord r = bench_record("s" + std::to_string(i), 2, 1, {2, 2});
    r.has_answers = r.has_compression = r.outputs_equal = true;
    r.compressed = r.dflash;
    std::tie(r.dflash_answer, r.compressed_answer, r.reference_answer) = answers[i];
    r.plain_answer = r.dflash_answer;
    report.records.push_back(r);
  }
  tools::aggregate(report);
  EXPECT_EQ(report.answered, 5);
  EXPECT_DOUBLE_EQ(report.dflash_accuracy, 3.0 / 5);
  EXPECT_DOUBLE_EQ(report.compressed_accuracy, 2.0 / 5);
  EXPECT_EQ(report.dflash_only_correct, 2);
  EXPECT_EQ(report.compressed_only_correct, 1);
  EXPECT_DOUBLE_EQ(report.mcnemar_p, 1.0);  // 2 P(X <= 1), X ~ Bin(3, 1/2) = 2 * 4/8
  const auto j = tools::bench_json(report);
  EXPECT_DOUBLE_EQ(j["summary"]["compression"]["accuracy"].get<double>(), 0.4);
  EXPECT_EQ(j["summary"]["compression"]["mcnemar_vs_dflash"]["dflash_only_correct"], 2);
  EXPECT_EQ(j["records"][1]["answers"]["compressed"], "5");
  const std::string md = tools::bench_markdown(report);
  EXPECT_NE(md.find("compressed 40.0%; McNemar against DFlash: 2 right only uncompressed, 1 only compressed, p = 1"),
            std::string::npos) << md;
  // through a checkpoint record and back; a record of a compressed run without it is refused by name
  const nlohmann::json rec = tools::checkpoint_record_json(report.records[1]);
  EXPECT_EQ(tools::checkpoint_record_from_json(rec, "test").compressed_answer, "5");
  nlohmann::json old = rec;
  old["answers"].erase("compressed");
  expect_error([&] { tools::checkpoint_record_from_json(old, "ckpt:2"); }, "ckpt:2, answers: no field 'compressed'");
}

// A checkpoint record through JSON text and back: every number exact, and a value that is not finite (JSON has none;
// written as null) read back as NaN rather than making the file unreadable.
TEST(BenchCheckpointRecord, RoundTripsExactlyAndNonFiniteAsNaN) {
  tools::BenchRecord r = bench_record("s", 3.1, 1.0 / 3.0, {4, 1, 2});
  r.prompt_fingerprint = tools::prompt_fingerprint({1, 2, 3});
  r.outputs_equal = true;
  r.has_compression = true;
  r.compressed = r.dflash;
  r.compression.overhead_ms = std::numeric_limits<double>::infinity();
  r.fidelity.count = {2, 1};
  r.fidelity.top1 = {1.0, 0.1};
  r.fidelity.kl = {0.25, std::numeric_limits<double>::quiet_NaN()};
  r.fidelity.tv = {0.5, 0.7};
  const std::string text = tools::checkpoint_record_json(r).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  const tools::BenchRecord back = tools::checkpoint_record_from_json(nlohmann::json::parse(text), "test");
  EXPECT_EQ(back.dflash.decode_ms, r.dflash.decode_ms);  // 10/3, exactly
  EXPECT_EQ(back.plain.output_ids, r.plain.output_ids);   // left out of the text (equal to DFlash's), restored
  EXPECT_EQ(back.dflash.acceptance_lengths, r.dflash.acceptance_lengths);
  EXPECT_EQ(back.fidelity.top1, r.fidelity.top1);
  EXPECT_EQ(back.fidelity.kl[0], 0.25);
  EXPECT_TRUE(std::isnan(back.fidelity.kl[1]));
  EXPECT_TRUE(std::isnan(back.compression.overhead_ms));
  EXPECT_EQ(back.prompt_fingerprint, r.prompt_fingerprint);
}

TEST(Answers, BoxedAndNormalised) {
  EXPECT_EQ(tools::last_boxed("so \\boxed{1} then \\boxed{\\frac{1}{2}}.").value_or(""), "\\frac{1}{2}");
  EXPECT_FALSE(tools::last_boxed("no box here").has_value());
  EXPECT_FALSE(tools::last_boxed("cut \\boxed{\\frac{1").has_value());
  EXPECT_TRUE(tools::answers_match("1,000", "1000"));
  EXPECT_TRUE(tools::answers_match("$18$", "18.00"));
  EXPECT_TRUE(tools::answers_match("\\left( 3, \\frac{\\pi}{2} \\right)", "(3,\\frac{\\pi}{2})"));
  EXPECT_FALSE(tools::answers_match("17", "18"));
}

// A random tiny target (real Qwen3 vocabulary and tokenizer files) and a random DFlash draft.
class ToolsEndToEnd : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!have_shared()) return;
    dir_ = new ScratchDir("tools-e2e");
    TinyShape s;
    s.vocab = 151936;
    s.hidden = 32;
    s.layers = 3;
    write_random_qwen3((dir_->path / "target").string(), s, /*tied=*/true);
    for (const char* f : {"tokenizer.json", "tokenizer_config.json", "generation_config.json"})
      fs::copy_file(shared_dir() + "/data/qwen3-tokenizer/" + f, dir_->path / "target" / f);
    write_random_dflash((dir_->path / "draft").string(), s, 1, 4, 3, {0, 2}, 151669);
    write_random_dflash((dir_->path / "draft-b").string(), s, 2, 3, 3, {1}, 151669, /*seed=*/5);  // bench's draft list
  }
  static void TearDownTestSuite() { delete dir_; }
  void SetUp() override { SPECPRESS_REQUIRE_SHARED(); }
  static std::string models() {
    return "-m " + (dir_->path / "target").string() + " -md " + (dir_->path / "draft").string();
  }
  static ScratchDir* dir_;
};
ScratchDir* ToolsEndToEnd::dir_ = nullptr;

// One dataset's report (bench_json): its records and the metric definitions of its summary.
void check_bench_report(const nlohmann::json& j, const std::string& name) {
  SCOPED_TRACE(name);
  EXPECT_EQ(j["dataset"], name);
  const auto& recs = j["records"];
  ASSERT_EQ(recs.size(), name == "mt-bench" ? 4u : 2u);  // mt-bench: two turns per sample
  double tau = 0, plain_tpot = 0, dflash_tpot = 0;
  for (const auto& rec : recs) {
    tau += rec["dflash"]["tau"].get<double>() / recs.size();
    plain_tpot += rec["plain"]["tpot_ms"].get<double>() / recs.size();
    dflash_tpot += rec["dflash"]["tpot_ms"].get<double>() / recs.size();
    EXPECT_TRUE(rec["outputs_equal"].get<bool>());  // greedy DFlash is lossless
    double mean = 0;
    for (int64_t len : rec["dflash"]["acceptance_lengths"]) mean += static_cast<double>(len);
    mean /= rec["dflash"]["acceptance_lengths"].size();
    EXPECT_NEAR(rec["dflash"]["tau"].get<double>(), mean, 1e-9);
  }
  const auto& sum = j["summary"];
  EXPECT_NEAR(sum["tau"].get<double>(), tau, 1e-9) << "tau is the mean of per-sample means";
  EXPECT_NEAR(sum["speedup"].get<double>(), plain_tpot / dflash_tpot, 1e-9) << "speedup is the TPOT ratio";
  for (const char* key : {"speedup", "tau"}) {  // the bootstrap's interval holds the point value
    const auto& ci = sum[std::string(key) + "_ci95"];
    EXPECT_LE(ci[0].get<double>(), sum[key].get<double>() + 1e-12) << key;
    EXPECT_GE(ci[1].get<double>(), sum[key].get<double>() - 1e-12) << key;
  }
  double hist = 0;
  for (double h : sum["acceptance_histogram"]) hist += h;
  EXPECT_NEAR(hist, 1.0, 1e-9);
  EXPECT_EQ(sum["acceptance_histogram"].size(), 4u);
  EXPECT_EQ(sum["per_position_acceptance"].size(), 3u);
  EXPECT_DOUBLE_EQ(sum["identical_outputs"].get<double>(), 1.0);
  EXPECT_EQ(j["temperature"], 0.0);  // the sampling the report was made with
  EXPECT_EQ(j["min_p"], 0.0);
  // --check-answers applies where the set has final answers
  EXPECT_EQ(sum.contains("answers_agree"), name == "gsm8k" || name == "math500");
  if (sum.contains("answers_agree")) EXPECT_DOUBLE_EQ(sum["answers_agree"].get<double>(), 1.0);
}

// Every dataset in one run (the models load once; --data the shared folder), then one dataset alone (its report as
// the JSON's top level).
TEST_F(ToolsEndToEnd, BenchEveryDatasetAndCheckMetricDefinitions) {
  const std::string out = (dir_->path / "bench-all.json").string(), md = (dir_->path / "bench-all.md").string();
  CommandResult r = run_specpress("bench " + models() + " --dataset all --data " + data_dir() +
                                  " --max-samples 2 --max-new-tokens 6 --no-progress --check-answers --json " + out +
                                  " --markdown " + md);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream in(out);
  auto j = nlohmann::json::parse(in);
  ASSERT_EQ(j["datasets"].size(), std::size(kSets));
  double speedups = 0, taus = 0;
  for (size_t i = 0; i < std::size(kSets); ++i) {
    const auto& report = j["datasets"][i];
    check_bench_report(report, kSets[i].name);
    const auto& row = j["summary"]["datasets"][i];
    EXPECT_EQ(row["dataset"], kSets[i].name);
    EXPECT_EQ(row["samples"], report["samples"]);
    EXPECT_EQ(row["turns"], report["turns"]);
    EXPECT_EQ(report["samples"], 2);  // mt-bench's two samples are four turns, each a record
    EXPECT_EQ(report["turns"], kSets[i].name == "mt-bench" ? 4 : 2);
    EXPECT_EQ(row["speedup"], report["summary"]["speedup"]);
    EXPECT_EQ(row["tau"], report["summary"]["tau"]);
    speedups += row["speedup"].get<double>() / std::size(kSets);
    taus += row["tau"].get<double>() / std::size(kSets);
  }
  ASSERT_EQ(j["summary"]["means"].size(), 1u);  // one block size
  EXPECT_NEAR(j["summary"]["means"][0]["mean_speedup"].get<double>(), speedups, 1e-9) << "the paper's Avg.: a mean";
  EXPECT_NEAR(j["summary"]["means"][0]["mean_tau"].get<double>(), taus, 1e-9);
  EXPECT_EQ(j["summary"]["runs_planned"], std::size(kSets));
  EXPECT_EQ(j["summary"]["runs_finished"], std::size(kSets));
  // what measured it: the models, the data and how the samples were chosen
  EXPECT_TRUE(j["model"].is_string() && j["model_draft"].is_array() && j["data"].is_string())
      << j.dump().substr(0, 400);
  EXPECT_EQ(j["selection"]["max_samples"], 2);
  EXPECT_EQ(j["datasets"][0]["sampling_seed"], 0);
  // stdout and --markdown: every dataset's table, then the summary with a row each and the mean
  std::ifstream m(md);
  const std::string table((std::istreambuf_iterator<char>(m)), std::istreambuf_iterator<char>());
  for (const std::string& text : {r.out, table}) {
    for (const auto& s : kSets) {
      EXPECT_NE(text.find("## specpress bench: " + s.name + "\n"), std::string::npos) << s.name;
      EXPECT_NE(text.find("\n| " + s.name + " | "), std::string::npos) << s.name;
    }
    EXPECT_NE(text.find("## specpress bench: summary"), std::string::npos);
    EXPECT_NE(text.find("\n| mean of runs | 4 | | "), std::string::npos);
    EXPECT_EQ(text.find("planned runs finished so far"), std::string::npos) << "a finished bench's reports are whole";
    EXPECT_NE(text.find("identical outputs 100%\n"), std::string::npos) << "greedy: token for token";
    const std::string footer = "\nMeasured by specpress ";  // the last line: the build, the device, the dtype
    ASSERT_NE(text.rfind(footer), std::string::npos) << text;
    EXPECT_NE(text.substr(text.rfind(footer)).find(" build, LibTorch "), std::string::npos) << text;
    EXPECT_TRUE(text.ends_with(" on cpu, f32.\n")) << text;
  }

  const std::string one = (dir_->path / "bench-gsm8k.json").string();
  r = run_specpress("bench " + models() + " --dataset gsm8k --data " + data("gsm8k_test.jsonl") +
                    " --max-samples 2 --max-new-tokens 6 --no-progress --check-answers --json " + one);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream single(one);
  const auto report = nlohmann::json::parse(single);
  check_bench_report(report, "gsm8k");
  // the same samples, decoded the same way, whether the run holds one dataset or all of them
  for (size_t i = 0; i < report["records"].size(); ++i) {
    const auto &alone = report["records"][i], &among = j["datasets"][0]["records"][i];
    EXPECT_EQ(alone["id"], among["id"]);
    EXPECT_EQ(alone["dflash"]["acceptance_lengths"], among["dflash"]["acceptance_lengths"]);
    EXPECT_EQ(alone["answers"], among["answers"]);
  }
  EXPECT_NE(r.out.find("**speedup"), std::string::npos);
  EXPECT_EQ(r.out.find("summary"), std::string::npos) << "one dataset: no summary table";

  // sampled: the settings line names what is on, and the outputs are compared in distribution only
  r = run_specpress("bench " + models() + " --dataset gsm8k --data " + data("gsm8k_test.jsonl") +
                    " --max-samples 1 --max-new-tokens 6 --no-progress --temp 0.8 --top-k 5 --sampling-seed 7 --json " +
                    one);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("temperature 0.8, top-k 5, sampling seed 7, thinking off"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(sampled: equal in distribution, not token for token)"), std::string::npos) << r.out;
  std::ifstream sampled(one);
  EXPECT_EQ(nlohmann::json::parse(sampled)["sampling_seed"], 7);
}

// Block sizes swept in one run: each dataset at each size, in that order, each lossless with its own histogram.
TEST_F(ToolsEndToEnd, BenchSweepsBlockSizes) {
  const std::string out = (dir_->path / "bench-blocks.json").string();
  CommandResult r = run_specpress("bench " + models() + " --dataset gsm8k,humaneval --data " + data_dir() +
                                  " --block-size 2,4 --max-samples 1 --max-new-tokens 6 --no-progress --json " + out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream in(out);
  const auto j = nlohmann::json::parse(in);
  ASSERT_EQ(j["datasets"].size(), 4u);
  const std::vector<std::pair<std::string, int64_t>> order = {{"gsm8k", 2}, {"gsm8k", 4}, {"humaneval", 2}, {"humaneval", 4}};
  for (size_t i = 0; i < order.size(); ++i) {
    const auto& report = j["datasets"][i];
    SCOPED_TRACE(report["dataset"].get<std::string>() + " block " + std::to_string(report["block_size"].get<int64_t>()));
    EXPECT_EQ(report["dataset"], order[i].first);
    EXPECT_EQ(report["block_size"], order[i].second);
    EXPECT_EQ(j["summary"]["datasets"][i]["block_size"], order[i].second);
    EXPECT_EQ(report["summary"]["acceptance_histogram"].size(), static_cast<size_t>(order[i].second));
    EXPECT_DOUBLE_EQ(report["summary"]["identical_outputs"].get<double>(), 1.0);
    for (const auto& step : report["records"][0]["dflash"]["acceptance_lengths"]) EXPECT_LE(step.get<int64_t>(), order[i].second);
    // plain decoding does not depend on the block size: the second size's runs take the first's, timings and all
    const bool second = order[i].second == 4;
    EXPECT_EQ(report.value("plain_reused_records", 0), second ? 1 : 0);
    EXPECT_EQ(report["records"][0].value("plain_reused", false), second);
    if (second) EXPECT_EQ(report["records"][0]["plain"], j["datasets"][i - 1]["records"][0]["plain"]);
  }
  EXPECT_NE(r.out.find("plain decoding of 1 of the 1 records from an earlier run of this bench"), std::string::npos);
  EXPECT_NE(r.out.find("| gsm8k | 4 | 1 | "), std::string::npos) << r.out;
  // a mean for each block size, over its datasets
  const auto& means = j["summary"]["means"];
  ASSERT_EQ(means.size(), 2u);
  for (size_t m = 0; m < 2; ++m) {
    const auto& rows = j["summary"]["datasets"];
    EXPECT_EQ(means[m]["block_size"], m == 0 ? 2 : 4);
    EXPECT_EQ(means[m]["runs"], 2);
    EXPECT_NEAR(means[m]["mean_tau"].get<double>(), (rows[m]["tau"].get<double>() + rows[m + 2]["tau"].get<double>()) / 2,
                1e-9);
  }
  EXPECT_NE(r.out.find("| mean of runs | 2 | | "), std::string::npos) << r.out;
  // each dataset's block 4 against its block 2, paired over their one sample
  const auto& paired = j["summary"]["paired"];
  ASSERT_EQ(paired.size(), 2u);
  for (size_t k = 0; k < 2; ++k) {
    EXPECT_EQ(paired[k]["dataset"], k == 0 ? "gsm8k" : "humaneval");
    EXPECT_EQ(paired[k]["run_index"], 2 * k + 1);
    EXPECT_EQ(paired[k]["against_index"], 2 * k);
    EXPECT_EQ(paired[k]["samples"], 1);
    EXPECT_NEAR(paired[k]["tau_difference"].get<double>(),
                j["datasets"][2 * k + 1]["summary"]["tau"].get<double>() - j["datasets"][2 * k]["summary"]["tau"].get<double>(),
                1e-12);
  }
  // sizes are checked before a run: twice (0 is the draft's 4), below 2, past the draft's, empty or not a number
  for (const auto& [sizes, message] : {std::pair<std::string, std::string>{"2,2", "--block-size: 2 is given twice"},
                                       {"0,4", "--block-size: 4 is given twice"},
                                       {"1", "--block-size: must be at least 2"},
                                       {"8", "--block-size: 8 exceeds the draft's trained block_size 4"},
                                       {"4,,2", "--block-size: item 2 is empty (after 4)"},
                                       {"4,x", "--block-size: item 2 ('x') is not a block size"}}) {
    r = run_specpress("bench " + models() + " --dataset gsm8k --data " + data_dir() + " --block-size " + sizes +
                      " --no-progress");
    EXPECT_NE(r.exit_code, 0) << sizes;
    EXPECT_NE(r.err.find(message), std::string::npos) << sizes << ": " << r.err;
  }
}

nlohmann::json read_json(const fs::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);
}

// A JSON Lines file's lines, parsed.
std::vector<nlohmann::json> read_json_lines(const fs::path& p) {
  std::ifstream in(p);
  std::vector<nlohmann::json> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  return lines;
}
std::string json_lines(const std::vector<nlohmann::json>& lines) {
  std::string text;
  for (const auto& j : lines) text += j.dump() + "\n";
  return text;
}

// An mt-bench second turn whose prompt (the first turn, its answer and the second question) leaves no room for
// --max-new-tokens is left out and said, in the Markdown and the JSON, instead of stopping the whole bench after the
// work before it; the first turn's record stays.
TEST_F(ToolsEndToEnd, BenchLeavesOutALaterTurnThatOutgrowsTheContext) {
  const std::string json = (dir_->path / "mt-long.json").string();
  // the random target's context is 512 positions: a first turn of ~50 tokens + 220 fits, the second turn does not
  CommandResult r = run_specpress("bench " + models() + " --dataset mt-bench --data " + data("mt_bench.jsonl") +
                                  " --max-samples 1 --max-new-tokens 220 --no-progress --json " + json);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(std::regex_search(r.err, std::regex("left out \\(with the turns after it\\): mt-bench sample \\S+ "
                                                 "\\(row \\d+\\) turn 2: the prompt \\(\\d+ tokens\\)"))) << r.err;
  EXPECT_NE(r.out.find("1 later turns left out (with the turns after them)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("1 samples, block size"), std::string::npos) << r.out;
  std::ifstream in(json);
  const auto j = nlohmann::json::parse(in);
  ASSERT_EQ(j["records"].size(), 1u);
  EXPECT_EQ(j["records"][0]["turn"], 0);
  EXPECT_EQ(j["records"][0]["dflash"]["output_tokens"], 220) << "the first answer stopped early: the test's premise";
  ASSERT_EQ(j["turns_left_out"].size(), 1u);
  EXPECT_NE(j["turns_left_out"][0].get<std::string>().find("+ --max-new-tokens 220 + block"), std::string::npos);
}

// SIGTERM (or Ctrl-C's SIGINT) stops a bench after the sample in flight: the reports so far are written and say that
// they are unfinished, the exit status is 128 + the signal, and --resume continues from the checkpoint.
TEST_F(ToolsEndToEnd, BenchStoppedBySignalWritesWhatItHas) {
  const fs::path d = dir_->path / "bench-signal";
  fs::create_directories(d);
  const std::string ckpt = (d / "b.ckpt").string(), json = (d / "b.json").string(), md = (d / "b.md").string();
  const auto args = [&](int samples) {
    return "bench " + models() + " --dataset gsm8k,humaneval --data " + data_dir() + " --max-samples " +
           std::to_string(samples) + " --max-new-tokens 16 --no-progress --json " + json + " --markdown " + md +
           " --checkpoint " + ckpt;
  };
  // the bench in the background; once its checkpoint holds two records (and a header), SIGTERM; its status printed
  const std::string checkpoint_lines = "$(wc -l < " + ckpt + " 2>/dev/null || echo 0)";
  const std::string status =
      signal_specpress(args(40), (d / "err").string(), "[ \"" + checkpoint_lines + "\" -ge 3 ]", "TERM");
  std::ifstream err_in(d / "err");
  const std::string err((std::istreambuf_iterator<char>(err_in)), std::istreambuf_iterator<char>());
  ASSERT_EQ(status, "143\n") << err;
  EXPECT_NE(err.find("specpress: stopping after the sample in flight, with the reports so far written"),
            std::string::npos) << err;
  EXPECT_NE(err.find("bench: stopped by SIGTERM after "), std::string::npos) << err;
  EXPECT_NE(err.find("the same command with --resume continues from " + ckpt), std::string::npos) << err;
  std::ifstream j_in(json);
  const auto j = nlohmann::json::parse(j_in);
  EXPECT_EQ(j["summary"]["runs_planned"], 2);
  EXPECT_EQ(j["summary"]["runs_finished"], 0);
  EXPECT_EQ(j["datasets"][0]["interrupted"], true);
  const auto records = j["datasets"][0]["samples"].get<int64_t>();
  EXPECT_GE(records, 2);
  EXPECT_LT(records, 40);
  std::ifstream md_in(md);
  const std::string table((std::istreambuf_iterator<char>(md_in)), std::istreambuf_iterator<char>());
  EXPECT_NE(table.find("stopped by a signal before its last sample"), std::string::npos) << table;
  EXPECT_NE(table.find("0 of the 2 planned runs finished before a signal stopped the bench"), std::string::npos);
  EXPECT_EQ(static_cast<int64_t>(read_json_lines(ckpt).size()), records + 1) << "every decoded sample kept";
  // the same command with --resume (fewer samples, to be quick) reuses them
  const CommandResult r = run_specpress(args(3) + " --resume");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("bench: reused "), std::string::npos) << r.err;
}

// SIGINT stops diagnose after the sample in flight: the JSON and HTML reports cover the samples done and say so, and
// the exit status is 128 + the signal.
TEST_F(ToolsEndToEnd, DiagnoseStoppedBySignalWritesWhatItHas) {
  const fs::path d = dir_->path / "diagnose-signal";
  fs::create_directories(d);
  const std::string json = (d / "d.json").string(), html = (d / "d.html").string(), err_path = (d / "err").string();
  const std::string args = "diagnose " + models() + " --dataset gsm8k --data " + data("gsm8k_test.jsonl") +
                           " --max-samples 40 --max-new-tokens 24 --json " + json + " --html " + html;
  // once the progress bar shows a sample done, SIGINT
  const std::string status = signal_specpress(args, err_path, "grep -Eq \"] [1-9][0-9]*/40\" " + err_path, "INT");
  std::ifstream err_in(err_path);
  const std::string err((std::istreambuf_iterator<char>(err_in)), std::istreambuf_iterator<char>());
  ASSERT_EQ(status, "130\n") << err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(err, m, std::regex("diagnose: stopped by SIGINT after (\\d+) of 40 samples; the "
                                                   "reports cover those and say so \\(--checkpoint keeps each "
                                                   "sample for a --resume\\)"))) << err;
  const int64_t done = std::stoll(m[1]);
  EXPECT_GE(done, 1);
  EXPECT_LT(done, 40);
  std::ifstream j_in(json);
  const auto j = nlohmann::json::parse(j_in);
  EXPECT_EQ(j["interrupted"], true);
  EXPECT_EQ(j["samples"], done);
  EXPECT_EQ(j["samples_planned"], 40);
  std::ifstream h_in(html);
  const std::string page((std::istreambuf_iterator<char>(h_in)), std::istreambuf_iterator<char>());
  EXPECT_NE(page.find(fmt::format("Stopped by a signal after {} of the 40 samples", done)), std::string::npos);
}

// diagnose --checkpoint / --resume: a diagnose stopped after its first samples (its checkpoint cut back to them, the
// next line torn) continues with the rest, and its report is the uninterrupted run's, every number the same (each
// sample's sums are kept exactly and added in the same order). The settings, the prompt, the records and the file
// itself are checked.
TEST_F(ToolsEndToEnd, DiagnoseCheckpointResumesToTheSameReport) {
  const fs::path d = dir_->path / "diagnose-ckpt";
  fs::create_directories(d);
  const auto diagnose = [&](int max_new_tokens, const std::string& temps) {
    return "diagnose " + models() + " --dataset gsm8k --data " + data("gsm8k_test.jsonl") +
           " --max-samples 5 --no-progress --temps " + temps + " --max-new-tokens " + std::to_string(max_new_tokens);
  };
  const std::string base = diagnose(16, "0,1");
  const fs::path full_ckpt = d / "full.ckpt", part_ckpt = d / "part.ckpt";
  CommandResult r =
      run_specpress(base + " --checkpoint " + full_ckpt.string() + " --json " + (d / "full.json").string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto full = read_json(d / "full.json");
  const auto ckpt = read_json_lines(full_ckpt);
  ASSERT_EQ(ckpt.size(), 6u);  // the settings, then a sample a line
  EXPECT_EQ(ckpt[0]["format"], "specpress diagnose checkpoint");
  EXPECT_EQ(ckpt[0]["settings"]["temps"], nlohmann::json::parse("[0.0, 1.0]"));
  EXPECT_FALSE(full.contains("resumed_samples"));

  const std::string third = ckpt[3].dump();
  write_text(part_ckpt, json_lines({ckpt.begin(), ckpt.begin() + 3}) + third.substr(0, third.size() / 2));
  r = run_specpress(base + " --checkpoint " + part_ckpt.string() + " --resume --json " + (d / "resumed.json").string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("part.ckpt: dropping its torn last line"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("diagnose: reused 2 of the 2 records --resume found in"), std::string::npos) << r.err;
  auto resumed = read_json(d / "resumed.json");
  EXPECT_EQ(resumed["resumed_samples"], 2);
  resumed.erase("resumed_samples");
  EXPECT_EQ(resumed, full);
  const auto after = read_json_lines(part_ckpt);
  ASSERT_EQ(after.size(), 6u) << "the torn line cut off, the resumed run's samples appended";
  for (size_t i = 1; i < after.size(); ++i) EXPECT_EQ(after[i], ckpt[i]) << "line " << i + 1;

  struct Case {
    std::string args, message;
  } cases[] = {
      {base + " --checkpoint " + part_ckpt.string(), "already exists; pass --resume to continue the diagnose it holds"},
      {base + " --checkpoint " + (d / "none.ckpt").string() + " --resume", "none.ckpt does not exist (no diagnose"},
      {base + " --resume", "--resume: needs --checkpoint (the file of the diagnose to continue)"},
      {diagnose(17, "0,1") + " --checkpoint " + part_ckpt.string() + " --resume",
       "holds records made with max_new_tokens = 16, but this run has max_new_tokens = 17"},
      {diagnose(16, "0") + " --checkpoint " + part_ckpt.string() + " --resume",
       "holds records made with temps = [0.0,1.0], but this run has temps = [0.0]"},
      {base + " --checkpoint " + (d / "full.json").string() + " --resume", "full.json is not a diagnose checkpoint"},
      // a named pipe is refused before anything reads it (a read would wait for a writer), a folder likewise: the
      // CLI's output checks (io/output_paths) come first
      {base + " --checkpoint " + (d / "pipe.ckpt").string(),
       "--checkpoint: " + (d / "pipe.ckpt").string() + " exists and is not a regular file (expected a file to write)"},
      {base + " --checkpoint " + d.string() + " --resume",
       "--checkpoint: " + d.string() + " is a directory (expected a file to write)"},
  };
  ASSERT_EQ(::mkfifo((d / "pipe.ckpt").c_str(), 0600), 0);
  for (const auto& c : cases) {
    r = run_specpress(c.args);
    EXPECT_NE(r.exit_code, 0) << c.args;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << c.args << "\nstderr: " << r.err;
  }
  const auto refused = [&](const std::function<void(std::vector<nlohmann::json>&)>& edit, const std::string& message) {
    auto edited = ckpt;
    edit(edited);
    write_text(d / "edited.ckpt", json_lines(edited));
    const CommandResult e = run_specpress(base + " --checkpoint " + (d / "edited.ckpt").string() + " --resume");
    EXPECT_NE(e.exit_code, 0) << message;
    EXPECT_NE(e.err.find(message), std::string::npos) << e.err;
  };
  refused([](auto& e) { e[2]["prompt_fingerprint"] = "0000000000000000:1"; },
          "edited.ckpt: line 3: the record of gsm8k sample " + ckpt[2]["id"].get<std::string>() +
              " was made from another prompt");
  const std::string positions = std::to_string(ckpt[2]["sums"]["top1"].size());  // the block's drafted positions
  refused([](auto& e) { e[2]["sums"]["top1"].erase(0); },
          "edited.ckpt: line 3: field 'top1' must be an array of " + positions + " sums (numbers >= 0)");
  refused([](auto& e) { e[3]["sums"]["mix_changed"][0] = -1; },
          "edited.ckpt: line 4: field 'mix_changed' must hold counts (integers >= 0), found -1");
  refused([](auto& e) { e[3]["sums"]["mix_changed"][0] = uint64_t{1} << 63; },
          "edited.ckpt: line 4: field 'mix_changed' must hold counts (integers >= 0), found 9223372036854775808");
  refused([](auto& e) { e[4].erase("id"); }, "edited.ckpt: line 5: field 'id' must be a string");
  refused([](auto& e) { e[1]["sums"]["sampled_per_position"][1] = 3; },
          "edited.ckpt: line 2: field 'sampled_per_position[1]' must be an array of " + positions + " sums");
  // sums of indicators past their counts (a top-1 rate over 1)
  refused([](auto& e) { e[2]["sums"]["top1"][0] = e[2]["sums"]["position_count"][0].template get<double>() + 1; },
          "edited.ckpt: line 3: field 'top1[0]' is " +
              std::to_string(ckpt[2]["sums"]["position_count"][0].get<int64_t>() + 1) +
              ", more than position_count[0] = ");
  refused([](auto& e) { e[3]["sums"]["sampled_length"][1] = 1e9; },
          "edited.ckpt: line 4: field 'sampled_length[1]' is 1000000000, more than the block size times "
          "sampled_starts[1] = ");
  // a bad record of the last sample is found before the first sample runs: nothing appended
  refused([](auto& e) { e = {e[0], e[5]}, e[1]["sums"]["top1"][0] = -5; }, "edited.ckpt: line 2: field 'top1'");
  EXPECT_EQ(read_json_lines(d / "edited.ckpt").size(), 2u);
  // a run that failed after beginning its file (its settings line alone) leaves nothing that blocks the next
  const std::string begun = " --checkpoint " + (d / "begun.ckpt").string();
  r = run_specpress(diagnose(100000, "0,1") + begun);
  ASSERT_NE(r.exit_code, 0);
  ASSERT_EQ(read_json_lines(d / "begun.ckpt").size(), 1u) << r.err;
  r = run_specpress(base + begun);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("begun.ckpt holds no record yet (a run that stopped before its first sample): begun again with "
                       "this run's settings"), std::string::npos) << r.err;
  EXPECT_EQ(read_json_lines(d / "begun.ckpt"), ckpt);
  // so is a file holding only the start of a settings line (a run stopped while rewriting it in place) or nothing;
  // a file of one unfinished line that is not such a start is refused as before
  const std::string begun_text = io::read_text_file((d / "begun.ckpt").string());
  const std::string header = begun_text.substr(0, begun_text.find('\n'));
  for (const std::string& torn : {header.substr(0, 7), header.substr(0, 60), std::string()}) {
    write_text(d / "torn.ckpt", torn);
    r = run_specpress(base + " --checkpoint " + (d / "torn.ckpt").string() + " --resume");
    EXPECT_EQ(r.exit_code, 0) << torn << "\n" << r.err;
    EXPECT_NE(r.err.find("torn.ckpt holds no record yet"), std::string::npos) << r.err;
    EXPECT_EQ(read_json_lines(d / "torn.ckpt"), ckpt) << torn;
  }
  write_text(d / "torn.ckpt", "{\"format\":\"specpress bench checkpoint\",\"vers");
  r = run_specpress(base + " --checkpoint " + (d / "torn.ckpt").string());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("torn.ckpt already exists; pass --resume"), std::string::npos) << r.err;
}

// bench --checkpoint / --resume: an interrupted bench (its checkpoint cut back to the first records) continues from
// where it stopped, reusing those records (their timings too) and decoding the rest as the uninterrupted run did; a
// bench whose every record is in the checkpoint reprints its report exactly (the records round-trip losslessly, also
// the compression statistics). The settings, the prompt and the file itself are checked.
TEST_F(ToolsEndToEnd, BenchCheckpointResumesWhereItStopped) {
  const fs::path d = dir_->path / "bench-ckpt";
  fs::create_directories(d);
  const auto bench = [&](int max_new_tokens, int window) {
    return "bench " + models() + " --dataset gsm8k,mt-bench --data " + data_dir() + " --max-samples 2 --max-new-tokens " +
           std::to_string(max_new_tokens) + " --no-progress --compress keep-last --compress-window " +
           std::to_string(window) + " --compress-merge 2 --check-answers";
  };
  const std::string base = bench(12, 2);
  const fs::path full_ckpt = d / "full.ckpt", part_ckpt = d / "part.ckpt";
  CommandResult r = run_specpress(base + " --checkpoint " + full_ckpt.string() + " --json " + (d / "full.json").string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto full = read_json(d / "full.json");
  const auto ckpt = read_json_lines(full_ckpt);  // the settings, then a record a line
  EXPECT_EQ(ckpt[0]["format"], "specpress bench checkpoint");
  EXPECT_EQ(ckpt[0]["settings"]["max_new_tokens"], 12);
  const std::string made_by = ckpt[0]["made_by"].get<std::string>();  // the build, as --version names it
  EXPECT_EQ(made_by.rfind("specpress ", 0), 0u) << made_by;
  EXPECT_NE(made_by.find("(commit " + full["build"]["commit"].get<std::string>() + ", "), std::string::npos) << made_by;
  EXPECT_EQ(full["device"], "cpu");
  EXPECT_EQ(full["dtype"], "f32");
  EXPECT_GE(full["cpu_threads"].get<int>(), 1);
  ASSERT_EQ(ckpt.size(), 7u);  // 2 gsm8k samples, 2 mt-bench samples of 2 turns
  int64_t events = 0;
  for (size_t i = 1; i < ckpt.size(); ++i) events += ckpt[i]["record"]["compression"]["stats"]["events"].get<int64_t>();
  EXPECT_GT(events, 0) << "the compression statistics are exercised";

  // interrupted after mt-bench's first turn of its first sample, while writing the second turn's line
  const std::string fourth = ckpt[4].dump();
  write_text(part_ckpt, json_lines({ckpt.begin(), ckpt.begin() + 4}) + fourth.substr(0, fourth.size() / 2));
  r = run_specpress(base + " --checkpoint " + part_ckpt.string() + " --resume --json " + (d / "resumed.json").string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("part.ckpt: dropping its torn last line"), std::string::npos) << r.err;
  const auto resumed = read_json(d / "resumed.json");
  ASSERT_EQ(resumed["datasets"].size(), 2u);
  EXPECT_EQ(resumed["datasets"][0]["resumed_records"], 2);
  EXPECT_EQ(resumed["datasets"][1]["resumed_records"], 1);
  EXPECT_NE(r.out.find("1 of the 4 records (a record a turn) resumed from --checkpoint"), std::string::npos) << r.out;
  for (size_t s = 0; s < 2; ++s) {
    const auto &a = full["datasets"][s], &b = resumed["datasets"][s];
    ASSERT_EQ(a["records"].size(), b["records"].size());
    for (size_t i = 0; i < a["records"].size(); ++i) {
      SCOPED_TRACE(a["dataset"].get<std::string>() + " record " + std::to_string(i));
      const auto &x = a["records"][i], &y = b["records"][i];
      const bool reused = s == 0 || i == 0;
      EXPECT_EQ(y.value("resumed", false), reused);
      EXPECT_EQ(x["dflash"]["acceptance_lengths"], y["dflash"]["acceptance_lengths"]);  // greedy: the same decoding
      EXPECT_EQ(x["compressed"]["first_divergence"], y["compressed"]["first_divergence"]);
      EXPECT_EQ(x.value("answers", nlohmann::json()), y.value("answers", nlohmann::json()));
      if (reused) EXPECT_EQ(x["dflash"]["tpot_ms"], y["dflash"]["tpot_ms"]) << "a reused record keeps its timing";
    }
    EXPECT_EQ(a["summary"]["tau"], b["summary"]["tau"]);
    EXPECT_EQ(a["summary"]["compression"]["mean_kl"], b["summary"]["compression"]["mean_kl"]);
  }
  EXPECT_EQ(read_json_lines(part_ckpt).size(), 7u) << "the torn line cut off, the resumed run's records appended";

  // nothing left to run: the same report, every number the same
  r = run_specpress(base + " --checkpoint " + part_ckpt.string() + " --resume --json " + (d / "again.json").string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto again = read_json(d / "again.json"), before = resumed;
  for (auto* j : {&again, &before})
    for (auto& report : (*j)["datasets"]) {
      report.erase("resumed_records");
      for (auto& rec : report["records"]) rec.erase("resumed");
    }
  EXPECT_EQ(again, before);
  // --dtype float32 is f32; a blank line an editor left at the end is skipped
  std::ofstream(part_ckpt, std::ios::app) << "\n";
  r = run_specpress(base + " --dtype float32 --checkpoint " + part_ckpt.string() + " --resume");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("bench: reused 6 of the 6 records --resume found in"), std::string::npos) << r.err;
  {  // another bench holding the file
    const int fd = ::open(part_ckpt.c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
    r = run_specpress(base + " --checkpoint " + part_ckpt.string() + " --resume");
    ::close(fd);
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.err.find("part.ckpt is in use by another specpress bench"), std::string::npos) << r.err;
  }

  // the checks: settings, prompt, the file
  const std::string resume = " --checkpoint " + part_ckpt.string() + " --resume";
  struct Case {
    std::string args, message;
  } cases[] = {
      {base + " --checkpoint " + part_ckpt.string(), "already exists; pass --resume to continue the bench"},
      {base + " --checkpoint " + (d / "none.ckpt").string() + " --resume", "none.ckpt does not exist"},
      {base + " --resume", "--resume: needs --checkpoint"},
      {bench(13, 2) + resume,
       "holds records made with max_new_tokens = 12, but this run has max_new_tokens = 13"},
      {base + resume + " --temp 0.5", "holds records made with temperature = 0.0"},
      {base + resume + " -t " + std::to_string(full["cpu_threads"].get<int>() + 1),
       fmt::format("holds records timed with {} CPU threads, but this run has {} (-t/--threads sets them",
                   full["cpu_threads"].get<int>(), full["cpu_threads"].get<int>() + 1)},
      // a setting on now and off when the records were made
      {base + resume + " --repeat-penalty 1.1", "holds records made without the setting 'penalties' (a flag left off "
                                                "then, or a specpress that did not record it), but this run has"},
      {bench(12, 3) + resume, "holds records made with compress = "},
      {base + " --checkpoint " + (d / "full.json").string() + " --resume", "full.json is not a bench checkpoint"},
  };
  for (const auto& c : cases) {
    r = run_specpress(c.args);
    EXPECT_NE(r.exit_code, 0) << c.args;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << c.args << "\nstderr: " << r.err;
  }
  {  // a checkpoint of an older specpress, which did not record the CPU threads
    auto older = ckpt;
    older[0]["settings"].erase("cpu_threads");
    write_text(d / "older.ckpt", json_lines(older));
    r = run_specpress(base + " --checkpoint " + (d / "older.ckpt").string() + " --resume");
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.err.find("older.ckpt holds records made without the setting 'cpu_threads' (a flag left off then, or a "
                         "specpress that did not record it), but this run has cpu_threads = "), std::string::npos)
        << r.err;
  }
  auto edited = ckpt;
  edited[2]["record"]["prompt_fingerprint"] = "0000000000000000:1";
  write_text(d / "edited.ckpt", json_lines(edited));
  r = run_specpress(base + " --checkpoint " + (d / "edited.ckpt").string() + " --resume");
  EXPECT_NE(r.err.find("was made from another prompt"), std::string::npos) << r.err;
  // a changed prompt of a later run (mt-bench, after gsm8k's) is found before the first sample: nothing appended
  edited[3]["record"]["prompt_fingerprint"] = "0000000000000000:1";
  write_text(d / "edited.ckpt", json_lines({ckpt[0], edited[3]}));
  r = run_specpress(base + " --checkpoint " + (d / "edited.ckpt").string() + " --resume");
  EXPECT_NE(r.err.find("record of mt-bench sample " + ckpt[3]["record"]["id"].get<std::string>() +
                       " turn 0 was made from another prompt"), std::string::npos) << r.err;
  EXPECT_EQ(read_json_lines(d / "edited.ckpt").size(), 2u);
  edited = ckpt;
  edited[2]["record"]["dflash"].erase("decode_ms");
  write_text(d / "edited.ckpt", json_lines(edited));
  r = run_specpress(base + " --checkpoint " + (d / "edited.ckpt").string() + " --resume");
  EXPECT_NE(r.err.find("edited.ckpt: line 3, dflash: missing field 'decode_ms'"), std::string::npos) << r.err;
  edited = ckpt;  // begun by another build: said, and its records reused
  edited[0]["made_by"] = "specpress 0.0.1 (commit 0123456789ab, CPU build, LibTorch 1.13.0)";
  write_text(d / "edited.ckpt", json_lines(edited));
  r = run_specpress(base + " --checkpoint " + (d / "edited.ckpt").string() + " --resume");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("edited.ckpt was begun by specpress 0.0.1 (commit 0123456789ab, CPU build, LibTorch 1.13.0); "
                       "this is " + made_by + " (the records it holds keep that build's timings)"),
            std::string::npos) << r.err;
  EXPECT_NE(r.err.find("bench: reused 6 of the 6 records"), std::string::npos) << r.err;
  write_text(d / "edited.ckpt", json_lines({ckpt.begin(), ckpt.begin() + 2}) + "{\"dataset\": \n" + ckpt[2].dump() + "\n");
  r = run_specpress(base + " --checkpoint " + (d / "edited.ckpt").string() + " --resume");
  EXPECT_NE(r.err.find("edited.ckpt: line 3: invalid JSON"), std::string::npos) << r.err;
}

// Several drafts in one bench: each dataset with each draft at its trained block size, one plain decoding of each
// prompt serving both drafts, a draft column and a mean per draft in the summary; the checkpoint keeps each draft's
// records apart.
TEST_F(ToolsEndToEnd, BenchComparesDrafts) {
  const std::string a = (dir_->path / "draft").string(), b = (dir_->path / "draft-b").string();
  const std::string out = (dir_->path / "bench-drafts.json").string(), ckpt = (dir_->path / "bench-drafts.ckpt").string();
  fs::remove(ckpt);
  const std::string args = "bench -m " + (dir_->path / "target").string() + " -md " + a + "," + b +
                           " --dataset gsm8k,humaneval --data " + data_dir() +
                           " --max-samples 1 --max-new-tokens 6 --no-progress --json " + out + " --checkpoint " + ckpt;
  CommandResult r = run_specpress(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = read_json(out);
  ASSERT_EQ(j["datasets"].size(), 4u);
  const std::vector<std::tuple<std::string, std::string, int64_t>> order = {
      {"gsm8k", a, 4}, {"gsm8k", b, 3}, {"humaneval", a, 4}, {"humaneval", b, 3}};
  for (size_t i = 0; i < order.size(); ++i) {
    const auto& report = j["datasets"][i];
    const auto& [dataset, draft, block] = order[i];
    SCOPED_TRACE(dataset + " " + draft);
    EXPECT_EQ(report["dataset"], dataset);
    EXPECT_EQ(report["draft"], draft);
    EXPECT_EQ(report["block_size"], block);
    EXPECT_EQ(j["summary"]["datasets"][i]["draft"], draft);
    EXPECT_DOUBLE_EQ(report["summary"]["identical_outputs"].get<double>(), 1.0);
    EXPECT_EQ(report.value("plain_reused_records", 0), draft == b ? 1 : 0) << "one plain decoding for both drafts";
    if (draft == b) EXPECT_EQ(report["records"][0]["plain"], j["datasets"][i - 1]["records"][0]["plain"]);
  }
  const auto& means = j["summary"]["means"];
  ASSERT_EQ(means.size(), 2u);
  EXPECT_EQ(means[0]["draft"], a);
  EXPECT_EQ(means[1]["draft"], b);
  EXPECT_EQ(means[1]["block_size"], 3);
  EXPECT_NE(r.out.find("| dataset | draft | block |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| mean of runs | " + b + " | 3 | "), std::string::npos) << r.out;
  // the checkpoint: each record line names its draft (and its files); resumed, every record comes back to its run
  std::set<std::string> drafts;
  const auto lines = read_json_lines(ckpt);
  for (size_t i = 1; i < lines.size(); ++i) {  // the canonical path, then the fingerprint of its files
    const std::string key = lines[i]["draft"].get<std::string>();
    drafts.insert(key.substr(0, key.rfind(' ')));
  }
  EXPECT_EQ(drafts, (std::set<std::string>{fs::weakly_canonical(a).string(), fs::weakly_canonical(b).string()}));
  r = run_specpress(args + " --resume");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto again = read_json(out);
  for (size_t i = 0; i < order.size(); ++i) {
    EXPECT_EQ(again["datasets"][i]["resumed_records"], 1);
    EXPECT_EQ(again["datasets"][i]["records"][0]["dflash"], j["datasets"][i]["records"][0]["dflash"]);
  }
  for (const auto& [drafts_flag, message] :
       {std::pair<std::string, std::string>{a + "," + a, "--model-draft: " + a + " is given twice"},
        {a + ",", "--model-draft: an empty directory"}}) {
    r = run_specpress("bench -m " + (dir_->path / "target").string() + " -md " + drafts_flag + " --dataset gsm8k --data " +
                      data_dir() + " --no-progress");
    EXPECT_NE(r.exit_code, 0) << drafts_flag;
    EXPECT_NE(r.err.find(message), std::string::npos) << r.err;
  }
  r = run_specpress("diagnose -m " + (dir_->path / "target").string() + " -md " + a + "," + b + " --dataset gsm8k --data " +
                    data("gsm8k_test.jsonl"));
  EXPECT_NE(r.err.find("diagnose studies one draft at a time"), std::string::npos) << r.err;
  // B retrained in place (a file's time changes): its records are not B's any more; A's are reused
  fs::last_write_time(fs::path(b) / "config.json", fs::last_write_time(fs::path(b) / "config.json") + std::chrono::hours(1));
  r = run_specpress(args + " --resume");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto retrained = read_json(out);
  for (size_t i = 0; i < order.size(); ++i)
    EXPECT_EQ(retrained["datasets"][i].value("resumed_records", 0), std::get<1>(order[i]) == a ? 1 : 0) << i;
  EXPECT_NE(r.err.find("bench: reused 2 of the 4 records --resume found in"), std::string::npos) << r.err;
}

// diagnose --temps: one entry a temperature over the starts whose block lies in the trajectory (those the last
// position counts); expected tau is 1 plus the per-position probabilities, which never rise along the block; at T = 0
// the last position is the greedy chain exactly, and the others lie within what the trajectory's last starts (scored
// by the greedy chain, not by the verify) allow.
void check_sampled_acceptance(const nlohmann::json& j, const std::vector<double>& temperatures) {
  const auto& sampled = j["sampled_acceptance"];
  ASSERT_EQ(sampled.size(), temperatures.size());
  const auto& positions = j["positions"];
  const size_t drafts = positions.size();
  const double starts = positions[drafts - 1]["count"].get<double>();
  ASSERT_GT(starts, 0);
  for (size_t t = 0; t < sampled.size(); ++t) {
    const auto& a = sampled[t];
    EXPECT_EQ(a["temperature"], temperatures[t]);
    EXPECT_EQ(a["block_starts"].get<double>(), starts);
    const auto& p = a["per_position"];
    ASSERT_EQ(p.size(), drafts);
    double sum = 1;
    for (size_t k = 0; k < drafts; ++k) {
      sum += p[k].get<double>();
      EXPECT_GE(p[k].get<double>(), 0.0);
      EXPECT_LE(p[k].get<double>(), k == 0 ? 1.0 : p[k - 1].get<double>() + 1e-12) << "a chain: never rising";
    }
    EXPECT_NEAR(a["expected_acceptance_length"].get<double>(), sum, 1e-9);
    if (temperatures[t] != 0) continue;
    EXPECT_NEAR(p[drafts - 1].get<double>(), positions[drafts - 1]["acceptance"].get<double>(), 1e-12);
    for (size_t k = 0; k + 1 < drafts; ++k) {
      const double chained = positions[k]["acceptance"].get<double>() * positions[k]["count"].get<double>();
      EXPECT_LE(p[k].get<double>() * starts, chained + 1e-9) << k;
      EXPECT_GE(p[k].get<double>() * starts, chained - (positions[k]["count"].get<double>() - starts) - 1e-9) << k;
    }
  }
}

TEST_F(ToolsEndToEnd, DiagnoseReportStructure) {
  const std::string html = (dir_->path / "diag.html").string(), json = (dir_->path / "diag.json").string();
  CommandResult r = run_specpress("diagnose " + models() + " --dataset humaneval --data " + data("humaneval.jsonl") +
                                  " --max-samples 2 --max-new-tokens 10 --no-progress --json " + json + " --html " + html +
                                  " --temps 0,1,1000 -t 1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream in(json);
  auto j = nlohmann::json::parse(in);
  EXPECT_EQ(j["samples"], 2);
  EXPECT_EQ(j["cpu_threads"], 1) << "-t 1: LibTorch's threads, as the report says";
  EXPECT_TRUE(j["build"]["version"].is_string() && j["build"]["commit"].is_string()) << j["build"].dump();
  EXPECT_EQ(j["max_new_tokens"], 10);
  EXPECT_TRUE(j["model"].is_string() && j["model_draft"].size() == 1u && j["selection"]["max_samples"] == 2);
  EXPECT_EQ(j["device"], "cpu");
  ASSERT_EQ(j["positions"].size(), 3u);
  int64_t counted = 0;
  for (const auto& p : j["positions"]) {
    counted += p["count"].get<int64_t>();
    EXPECT_LE(p["acceptance"].get<double>(), p["top1_agreement"].get<double>() + 1e-12);
    EXPECT_GE(p["kl_target_draft"].get<double>(), -1e-6);
    EXPECT_GE(p["mean_rank"].get<double>(), 1.0);
  }
  double expected_length = 1;  // the HTML's headline, over every block start
  for (const auto& p : j["positions"]) expected_length += p["acceptance"].get<double>();
  EXPECT_DOUBLE_EQ(j["expected_acceptance_length"].get<double>(), expected_length);
  int64_t binned = 0;
  for (const auto& b : j["calibration"]) binned += b["count"].get<int64_t>();
  EXPECT_EQ(binned, counted);  // every scored draft position lands in one calibration bin
  // and in one target-entropy bin; the bins' agreement, weighted by their counts, is the positions'
  const auto& entropy = j["by_target_entropy"];
  ASSERT_EQ(entropy.size(), 7u);
  int64_t entropy_binned = 0;
  double agreeing = 0, agreeing_by_position = 0;
  for (size_t e = 0; e < entropy.size(); ++e) {
    const auto& b = entropy[e];
    const int64_t n = b["count"].get<int64_t>();
    entropy_binned += n;
    EXPECT_EQ(b["hi"].is_null(), e + 1 == entropy.size());
    EXPECT_EQ(b["top1_agreement"].is_null(), n == 0) << b;  // an empty bin measured nothing
    if (n > 0) {
      agreeing += n * b["top1_agreement"].get<double>();
      EXPECT_GE(b["mean_entropy"].get<double>(), b["lo"].get<double>());
      if (!b["hi"].is_null()) EXPECT_LT(b["mean_entropy"].get<double>(), b["hi"].get<double>());
    }
  }
  for (const auto& p : j["positions"]) agreeing_by_position += p["count"].get<int64_t>() * p["top1_agreement"].get<double>();
  EXPECT_EQ(entropy_binned, counted);
  EXPECT_NEAR(agreeing, agreeing_by_position, 1e-9);
  EXPECT_GT(entropy_binned - entropy[0]["count"].get<int64_t>(), 0) << "every position in the lowest bin: no spread";
  check_sampled_acceptance(j, {0, 1, 1000});
  EXPECT_LT(j["sampled_acceptance"][2]["per_position"][0].get<double>(), 1e-3) << "T = 1000: nearly uniform";
  const auto& layers = j["layer_top1_agreement"];
  ASSERT_EQ(layers.size(), 4u);  // embedding + 3 layers (the last is the final norm output)
  EXPECT_DOUBLE_EQ(layers[3].get<double>(), 1.0);
  EXPECT_EQ(j["mixing"].size(), 9u);  // 3 weights x (draft + 2 tapped layers)
  std::ifstream h(html);
  std::string page((std::istreambuf_iterator<char>(h)), std::istreambuf_iterator<char>());
  EXPECT_NE(page.find("<!DOCTYPE html>"), std::string::npos);
  EXPECT_GE(std::count(page.begin(), page.end(), '<') , 50);
  EXPECT_NE(page.find("By the target's entropy"), std::string::npos);
  EXPECT_NE(page.find("&ge; 4"), std::string::npos);
  EXPECT_NE(page.find("Acceptance when sampling"), std::string::npos);
  EXPECT_NE(page.find("<p><small>specpress "), std::string::npos) << "the build that made the page";
  size_t svgs = 0;
  for (size_t p = page.find("<svg"); p != std::string::npos; p = page.find("<svg", p + 1)) ++svgs;
  EXPECT_EQ(svgs, 5u);
  EXPECT_EQ(page.find("<script"), std::string::npos);
}

TEST_F(ToolsEndToEnd, DiagnoseEveryDataset) {
  for (const auto& s : kSets) {
    const std::string json = (dir_->path / ("diag-" + s.name + ".json")).string();
    CommandResult r = run_specpress("diagnose " + models() + " --dataset " + s.name + " --data " + data(s.file) +
                                    " --max-samples 1 --max-new-tokens 6 --no-progress --json " + json);
    ASSERT_EQ(r.exit_code, 0) << s.name << ": " << r.err;
    std::ifstream in(json);
    auto j = nlohmann::json::parse(in);
    EXPECT_EQ(j["dataset"], s.name);
    EXPECT_EQ(j["samples"], 1);
    EXPECT_EQ(j["trajectory_tokens"], 6);
    EXPECT_EQ(j["block_starts"], 5);
    EXPECT_FALSE(j.contains("sampled_acceptance")) << "only with --temps";
  }
}

TEST_F(ToolsEndToEnd, BadInputGivesClearErrors) {
  const std::string base = "bench " + models() + " --no-progress ";
  struct Case {
    std::string args, message;
  } cases[] = {
      {base + "--dataset gsm9k --data " + data("gsm8k_test.jsonl"), "--dataset: unknown dataset 'gsm9k'"},
      {base + "--dataset gsm8k --data /nonexistent.jsonl", "/nonexistent.jsonl: cannot open"},
      {base + "--dataset gsm8k --data " + data("gsm8k_test.jsonl") + " --max-new-tokens 0", "--max-new-tokens: must be at least 1"},
      {base + "--dataset humaneval --data " + data("humaneval.jsonl") + " --check-answers --max-samples 1",
       "--check-answers: only gsm8k and math500"},
      {base + "--dataset gsm8k --data " + data("math500.jsonl"), "missing string field 'question'"},
      {base + "--dataset gsm8k --data " + data("gsm8k_test.jsonl") + " --min-p 1.5", "--min-p: must be in [0, 1)"},
      {"diagnose " + models() + " --dataset gsm8k --data " + data("gsm8k_test.jsonl") + " --max-new-tokens 0",
       "--max-new-tokens: must be at least 2"},
      {base + "--dataset all --data " + data("gsm8k_test.jsonl"), "is not a folder; with several datasets"},
      {base + "--dataset gsm8k,mbpp,gsm8k --data " + data_dir(), "'gsm8k' is named twice"},
      {base + "--dataset gsm8k,,mbpp --data " + data_dir(), "--dataset: an empty name"},
      {base + "--dataset gsm8k,gsm9k --data " + data_dir(), "--dataset: unknown dataset 'gsm9k'"},
      {base + "--dataset humaneval,mbpp --data " + data_dir() + " --check-answers",
       "--check-answers: only gsm8k and math500"},
      {base + "--dataset gsm8k --data " + shared_dir(), "has no gsm8k_test.jsonl (dataset gsm8k"},
      {"diagnose " + models() + " --dataset gsm8k,mbpp --data " + data_dir(),
       "--dataset: one dataset at a time here"},
      {"diagnose " + models() + " --dataset gsm8k --data " + data("gsm8k_test.jsonl") +
           " --max-samples 1 --max-new-tokens 1 --no-progress",
       "--max-new-tokens: must be at least 2 (a block start needs a generated token before and after it)"},
      {base + "--dataset gsm8k --data " + data("gsm8k_test.jsonl") + " --json /proc/specpress.json",
       "--json: cannot "},  // (root passes access() there; the probe file cannot be made)
  };
  for (const auto& c : cases) {
    CommandResult r = run_specpress(c.args);
    EXPECT_NE(r.exit_code, 0) << c.args;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << c.args << "\nstderr: " << r.err;
  }
  ScratchDir d("bad-bench");
  write_text(d.path / "bad.jsonl", "{\"question\": \"q\", \"answer\": \"#### 1\"}\nnot json\n");
  CommandResult r = run_specpress(base + "--dataset gsm8k --data " + (d.path / "bad.jsonl").string());
  EXPECT_NE(r.err.find("bad.jsonl:2: invalid JSON line"), std::string::npos) << r.err;
  write_text(d.path / "empty.json", "[]");
  r = run_specpress(base + "--dataset gsm8k --data " + data("gsm8k_test.jsonl") + " --indices " + (d.path / "empty.json").string());
  EXPECT_NE(r.err.find("is empty"), std::string::npos) << r.err;
  write_text(d.path / "rows.json", "[0, 1]");  // one list of rows cannot serve several datasets
  r = run_specpress(base + "--dataset gsm8k,math500 --data " + data_dir() + " --indices " +
                    (d.path / "rows.json").string());
  EXPECT_NE(r.err.find("rows.json is one list of rows; with several datasets give dflash_subsets.json"),
            std::string::npos) << r.err;
}

// On the demo pair, whose draft accepts most of its blocks greedily (the random pair's may accept none), so that the
// T = 0 agreement of the verified chain with the teacher-forced one is not vacuous.
TEST(DiagnoseDemoPair, SampledAcceptanceAtZeroIsTheGreedyChain) {
  SPECPRESS_REQUIRE_SHARED();
  const std::string demo = std::string(SPECPRESS_SOURCE_DIR) + "/demo";
  if (!fs::exists(demo + "/target/tokenizer.json")) GTEST_SKIP() << demo << "/target/tokenizer.json missing (setup.sh)";
  ScratchDir d("diag-demo");
  const std::string json = (d.path / "diag.json").string();
  CommandResult r = run_specpress("diagnose -m " + demo + "/target -md " + demo + "/draft --dataset gsm8k --data " +
                                  data_dir() + " --max-samples 1 --max-new-tokens 40 --no-progress --temps 0,0.6 --json " +
                                  json);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream in(json);
  const auto j = nlohmann::json::parse(in);
  // the demo draft accepts most first tokens and some whole blocks (0.24 of the starts on this sample)
  EXPECT_GT(j["positions"][0]["acceptance"].get<double>(), 0.5);
  EXPECT_GT(j["positions"][14]["acceptance"].get<double>(), 0.1);
  check_sampled_acceptance(j, {0, 0.6});
  // the acceptance-length histogram counts the whole-block starts: as many as the last position scored, and its last
  // bar is that position's acceptance
  const auto& hist = j["acceptance_length_histogram"];
  const int64_t whole = j["positions"][14]["count"].get<int64_t>();
  ASSERT_EQ(hist["counts"].size(), 16u);
  int64_t counted = 0;
  for (const auto& n : hist["counts"]) counted += n.get<int64_t>();
  EXPECT_EQ(hist["block_starts"], whole);
  EXPECT_EQ(counted, whole);
  EXPECT_NEAR(hist["counts"][15].get<double>() / whole, j["positions"][14]["acceptance"].get<double>(), 1e-12);
  // and each bar is the drop in the T = 0 verified chain's acceptance (the same whole-block starts) at that length
  const auto& chain = j["sampled_acceptance"][0]["per_position"];
  ASSERT_EQ(j["sampled_acceptance"][0]["temperature"], 0.0);
  for (size_t a = 0; a < 16; ++a) {
    const double here = a == 0 ? 1.0 : chain[a - 1].get<double>(), next = a < 15 ? chain[a].get<double>() : 0.0;
    EXPECT_NEAR(hist["counts"][a].get<double>() / whole, here - next, 1e-9) << "acceptance length " << a + 1;
  }
  // the demo draft taps the target's last layer (3), whose logit lens is the target's own distribution: mixing it in
  // changes no greedy choice at any weight
  int64_t last_layer_rows = 0;
  for (const auto& mix : j["mixing"])
    if (mix["source"] == "layer 3") {
      ++last_layer_rows;
      EXPECT_EQ(mix["changed"], 0) << mix;
    }
  EXPECT_EQ(last_layer_rows, 3);
  // a trajectory shorter than a block has no start to score: nulls, not zeros
  r = run_specpress("diagnose -m " + demo + "/target -md " + demo + "/draft --dataset gsm8k --data " + data_dir() +
                    " --max-samples 1 --max-new-tokens 5 --no-progress --temps 0");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto short_run = nlohmann::json::parse(r.out)["sampled_acceptance"][0];
  EXPECT_EQ(short_run["block_starts"], 0);
  EXPECT_TRUE(short_run["expected_acceptance_length"].is_null() && short_run["per_position"].is_null()) << short_run;
  const auto short_positions = nlohmann::json::parse(r.out)["positions"];  // 4 starts score positions 1..4 at most
  EXPECT_EQ(short_positions[14]["count"], 0);
  EXPECT_TRUE(short_positions[14]["mean_rank"].is_null() && short_positions[14]["top1_agreement"].is_null())
      << short_positions[14];
  EXPECT_TRUE(short_positions[0]["mean_rank"].is_number()) << short_positions[0];
  // bad --temps are named before the models load
  for (const auto& [temps, message] : {std::pair<std::string, std::string>{"0,,1", "--temps: '' is not a temperature"},
                                       {"-1", "--temps: '-1' is not"},
                                       {"1,x", "--temps: 'x' is not"},
                                       {"nan", "--temps: 'nan' is not"},
                                       {"1,1", "--temps: 1 is given twice"},
                                       {"''", "--temps: empty"}}) {
    r = run_specpress("diagnose -m " + demo + "/target -md " + demo + "/draft --dataset gsm8k --data " + data_dir() +
                      " --temps " + temps);
    EXPECT_NE(r.exit_code, 0) << temps;
    EXPECT_NE(r.err.find(message), std::string::npos) << temps << ": " << r.err;
  }
}

TEST_F(ToolsEndToEnd, GenerateStreamsText) {
  CommandResult r = run_specpress("generate " + models() + " -p \"Hello\" --chat -n 5 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j.contains("text"));
  EXPECT_EQ(j["output_ids"].size(), 5u);
}

// What generate reads from a model pair's configs is checked before the weights load (none are here): an end-of-text
// id of generation_config.json outside the vocabulary is named with that file (it was reported after the load as a
// --stop-ids the user never gave), and a draft config the engine does not compute is named before the target loads.
TEST(GenerateErrors, ConfigsAreCheckedBeforeTheWeightsLoad) {
  ScratchDir d("configs-first");
  const fs::path target = d.path / "target", draft = d.path / "draft";
  write_random_qwen3(target.string());
  write_random_dflash(draft.string(), TinyShape{}, 1, 4, 2, {0, 1}, 5);
  fs::remove(target / "model.safetensors");
  for (const auto& [eos, message] : std::vector<std::pair<int64_t, std::string>>{
           {-5, ": field 'eos_token_id': -5 is outside the vocabulary 0..63"},
           {64, ": field 'eos_token_id': 64 is outside the vocabulary 0..63"}}) {
    write_json(target / "generation_config.json", {{"eos_token_id", {2, eos}}});
    const CommandResult r = run_specpress("generate -m " + target.string() + " --prompt-ids 1,2 -n 2");
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.err.find((target / "generation_config.json").string() + message), std::string::npos) << r.err;
  }
  fs::remove(target / "generation_config.json");
  nlohmann::json j = dflash_config_json(TinyShape{}, 1, 4, 2, {0, 1}, 5);
  j["dflash_config"]["causal"] = true;
  write_json(draft / "config.json", j);
  const CommandResult r =
      run_specpress("generate -m " + target.string() + " -md " + draft.string() + " --prompt-ids 1,2 -n 2");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find((draft / "config.json").string() + ": dflash_config.causal is true"), std::string::npos)
      << r.err;
}

// A model with NaN weights gives NaN log-probabilities: an error naming the chunk, not PPL = nan.
TEST(PerplexityErrors, NanWeightsAreAnError) {
  ScratchDir d("ppl-nan");
  write_qwen3_with_a_nan_weight(d.str());
  const model::Qwen3Model m = model::Qwen3Model::load(d.str(), at::kFloat, at::kCPU);
  std::vector<int64_t> tokens(64);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int64_t>(i % 50);
  try {
    tools::perplexity(m, tokens, 32);
    ADD_FAILURE() << "NaN perplexity";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("chunk 1: the model's log-probabilities are NaN"), std::string::npos)
        << e.what();
  }
}

}  // namespace
