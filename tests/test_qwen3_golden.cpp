// test_qwen3_golden.cpp — the Qwen3 target against the DFlash reference fixtures (float32, CPU):
// logits and every hidden state of forward.safetensors within 1e-4; the KV cache gives the same
// logits for prefill, token-by-token decode and blocks at arbitrary starts; rollback; plain greedy
// generation reproduces ar_output of all 8 runs.
#include <gtest/gtest.h>

#include <c10/core/InferenceMode.h>

#include "core/error.h"
#include "decode/generation.h"
#include "io/checkpoint.h"
#include "model/qwen3.h"
#include "test_util.h"

using namespace specpress;
using namespace specpress::test;

namespace {

double max_abs(const at::Tensor& a, const at::Tensor& b) { return (a.cpu() - b.cpu()).abs().max().item<double>(); }

class Qwen3Golden : public ::testing::Test {
 protected:
  void SetUp() override {
    SPECPRESS_REQUIRE_SHARED();
    model_ = std::make_unique<model::Qwen3Model>(model::Qwen3Model::load(golden_dir() + "/target", at::kFloat, at::Device(test_device_name())));
  }
  c10::InferenceMode mode_;
  std::unique_ptr<model::Qwen3Model> model_;
};

TEST_F(Qwen3Golden, ShardedTiedTargetLoads) {
  const auto& c = model_->config();
  EXPECT_EQ(c.vocab_size, 1024);
  EXPECT_EQ(c.num_layers, 6);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e6);
}

TEST_F(Qwen3Golden, LogitsAndHiddenStatesMatchReference) {
  io::TensorStore ref = io::TensorStore::open_file(golden_dir() + "/forward.safetensors");
  at::Tensor ids = ref.take("input_ids", {39}, at::kLong, model_->device());
  model::KVCache cache = model_->make_cache(64);
  model::ForwardOutput out = model_->forward(ids, 0, cache, {true, {1, 3}, true});
  EXPECT_LT(max_abs(out.logits, ref.take("logits", {39, 1024}, at::kFloat, at::kCPU)), 1e-4);
  ASSERT_EQ(out.hidden_states.size(), 7u);
  for (int i = 0; i <= 6; ++i) {
    double err = max_abs(out.hidden_states[i], ref.take("hidden_states." + std::to_string(i), {39, 128}, at::kFloat, at::kCPU));
    EXPECT_LT(err, 1e-4) << "hidden_states." << i;
  }
  EXPECT_LT(max_abs(out.taps, ref.take("taps", {39, 256}, at::kFloat, at::kCPU)), 1e-4);
}

TEST_F(Qwen3Golden, CacheDecodeAndBlocksMatchFullPrefill) {
  std::vector<int64_t> prompt = golden_runs()[1].prompt;
  const int64_t T = static_cast<int64_t>(prompt.size());
  at::Tensor ids = at::tensor(prompt, at::kLong).to(model_->device());
  model::KVCache full_cache = model_->make_cache(T + 8);
  at::Tensor full = model_->forward(ids, 0, full_cache, {true, {}, false}).logits;

  // token by token
  model::KVCache cache = model_->make_cache(T + 8);
  for (int64_t i = 0; i < T; ++i) {
    at::Tensor row = model_->forward(ids.narrow(0, i, 1), i, cache, {}).logits;
    ASSERT_LT(max_abs(row[0], full[i]), 1e-4) << "position " << i;
  }
  // a block of 7 at an arbitrary start after a rollback: junk written past the rollback point is ignored
  model::KVCache block_cache = model_->make_cache(T + 8);
  model_->forward(ids.narrow(0, 0, 10), 0, block_cache, {});
  model_->forward(at::full({5}, 3, at::TensorOptions().dtype(at::kLong).device(model_->device())), 10, block_cache, {});  // junk
  EXPECT_EQ(block_cache.length, 15);
  block_cache.rollback(10);
  at::Tensor blk = model_->forward(ids.narrow(0, 10, 7), 10, block_cache, {true, {}, false}).logits;
  EXPECT_LT(max_abs(blk, full.narrow(0, 10, 7)), 1e-4);
  EXPECT_EQ(block_cache.length, 17);
  EXPECT_THROW(block_cache.rollback(18), Error);
  EXPECT_THROW(model_->forward(ids.narrow(0, 0, 2), 20, block_cache, {}), Error);  // start past the committed length
}

TEST_F(Qwen3Golden, GreedyReproducesArOutputOfAllRuns) {
  for (const auto& run : golden_runs()) {
    decode::GenerationParams p;
    p.max_new_tokens = run.max_new_tokens;
    p.stop_ids = run.stop_ids;
    decode::GenerationResult r = decode::generate_plain(*model_, run.prompt, p);
    EXPECT_EQ(r.output_ids, run.ar_output);
  }
}

TEST_F(Qwen3Golden, StopTokenEndsOutputInclusive) {
  const auto run = golden_runs()[0];
  decode::GenerationParams p;
  p.max_new_tokens = 64;
  p.stop_ids = {run.ar_output[10]};
  decode::GenerationResult r = decode::generate_plain(*model_, run.prompt, p);
  // the output ends at the first occurrence of the stop id, inclusive
  size_t first = std::find(run.ar_output.begin(), run.ar_output.end(), run.ar_output[10]) - run.ar_output.begin();
  EXPECT_EQ(r.output_ids, std::vector<int64_t>(run.ar_output.begin(), run.ar_output.begin() + first + 1));
  EXPECT_TRUE(r.stopped);
}

}  // namespace
