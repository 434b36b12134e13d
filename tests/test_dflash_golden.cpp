// test_dflash_golden.cpp — the DFlash draft and speculative loop against the reference fixtures
// (float32, CPU): the first draft call's hidden states and proposals; for all 8 runs the output,
// acceptance lengths and every step's block/posterior/accepted; equality with greedy decoding at
// block sizes 2..8; stop handling; draft/target mismatch errors.
#include <gtest/gtest.h>

#include <c10/core/InferenceMode.h>

#include "core/error.h"
#include "decode/generation.h"
#include "io/checkpoint.h"
#include "model/dflash_draft.h"
#include "model_fixtures.h"
#include "golden_pair.h"
#include "test_util.h"

using namespace specpress;
using namespace specpress::test;

namespace {

using DFlashGolden = GoldenPair;

TEST_F(DFlashGolden, DraftConfig) {
  const auto& c = draft_->config();
  EXPECT_EQ(c.block_size, 8);
  EXPECT_EQ(c.target_layer_ids, (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(c.mask_token_id, 1002);
  EXPECT_EQ(c.arch.num_layers, 2);
}

TEST_F(DFlashGolden, FirstDraftCallMatchesReference) {
  io::TensorStore ref = io::TensorStore::open_file(golden_dir() + "/forward.safetensors");
  at::Tensor taps = ref.take("taps", {39, 256}, at::kFloat, target_->device());
  at::Tensor block = ref.take("draft_block_ids", {8}, at::kLong, target_->device());
  at::Tensor expected_hidden = ref.take("draft_hidden", {8, 128}, at::kFloat, at::kCPU);
  at::Tensor expected_logits = ref.take("draft_logits", {8, 1024}, at::kFloat, at::kCPU);
  model::DraftCache cache = draft_->make_cache(64);
  at::Tensor hidden = draft_->forward(taps, block, cache).cpu();
  EXPECT_LT((hidden - expected_hidden).abs().max().item<double>(), 1e-4);
  EXPECT_EQ(cache.length, 39);
  at::Tensor logits = target_->lm_head_logits(hidden.to(target_->device())).cpu();
  EXPECT_LT((logits - expected_logits).abs().max().item<double>(), 1e-4);
  EXPECT_TRUE(at::equal(logits.narrow(0, 1, 7).argmax(-1), expected_logits.narrow(0, 1, 7).argmax(-1)));
}

TEST_F(DFlashGolden, AllRunsMatchReferenceStepByStep) {
  int run_index = 0;
  for (const auto& run : golden_runs()) {
    decode::GenerationParams p;
    p.max_new_tokens = run.max_new_tokens;
    p.stop_ids = run.stop_ids;
    p.record_steps = true;
    decode::GenerationResult r = decode::generate_dflash(*target_, *draft_, run.prompt, p);
    EXPECT_EQ(r.output_ids, run.dflash_output) << "run " << run_index;
    EXPECT_EQ(r.acceptance_lengths, run.acceptance_lengths) << "run " << run_index;
    ASSERT_EQ(r.steps.size(), run.steps.size()) << "run " << run_index;
    for (size_t s = 0; s < r.steps.size(); ++s) {
      const auto& ref = run.steps[s];
      EXPECT_EQ(r.steps[s].start, ref["start"].get<int64_t>()) << "run " << run_index << " step " << s;
      EXPECT_EQ(r.steps[s].block, ref["block"].get<std::vector<int64_t>>()) << "run " << run_index << " step " << s;
      EXPECT_EQ(r.steps[s].posterior, ref["posterior"].get<std::vector<int64_t>>()) << "run " << run_index << " step " << s;
      EXPECT_EQ(r.steps[s].accepted, ref["accepted"].get<int64_t>()) << "run " << run_index << " step " << s;
    }
    ++run_index;
  }
  EXPECT_EQ(run_index, 8);
}

TEST_F(DFlashGolden, SpeculativeEqualsGreedyAtEveryBlockSize) {
  for (const auto& run : golden_runs()) {
    decode::GenerationParams p;
    p.max_new_tokens = 40;
    p.stop_ids = run.stop_ids;
    std::vector<int64_t> greedy = decode::generate_plain(*target_, run.prompt, p).output_ids;
    for (int64_t b = 2; b <= 8; ++b) {
      p.block_size = b;
      decode::GenerationResult r = decode::generate_dflash(*target_, *draft_, run.prompt, p);
      EXPECT_EQ(r.output_ids, greedy) << "block size " << b;
      for (int64_t len : r.acceptance_lengths) EXPECT_TRUE(len >= 1 && len <= b);
    }
  }
}

TEST_F(DFlashGolden, StopTokenInsideAcceptedBlockTrimsAfterIt) {
  const auto run = golden_runs()[0];
  for (int64_t k : {0, 3, 7, 20, 41}) {
    decode::GenerationParams p;
    p.max_new_tokens = 64;
    p.stop_ids = {run.ar_output[k]};
    std::vector<int64_t> plain = decode::generate_plain(*target_, run.prompt, p).output_ids;
    decode::GenerationResult r = decode::generate_dflash(*target_, *draft_, run.prompt, p);
    EXPECT_EQ(r.output_ids, plain) << "stop at output index " << k;
    EXPECT_EQ(r.output_ids.back(), run.ar_output[k]);
  }
  for (int64_t n : {1, 2, 7, 8, 9, 33}) {  // lengths that end mid-block and at block boundaries
    decode::GenerationParams p;
    p.max_new_tokens = n;
    std::vector<int64_t> expected(run.ar_output.begin(), run.ar_output.begin() + n);
    EXPECT_EQ(decode::generate_dflash(*target_, *draft_, run.prompt, p).output_ids, expected) << "n " << n;
  }
}

// GenerationParams::cancel set by the token callback ends both loops right after that commit: the output is
// the uncancelled output's prefix up to the cancelling commit, and no commit follows it.
TEST_F(DFlashGolden, CancelEndsTheGenerationAfterTheCommitInProgress) {
  const auto run = golden_runs()[0];
  decode::GenerationParams full_params;
  full_params.max_new_tokens = 48;
  const std::vector<int64_t> full = decode::generate_plain(*target_, run.prompt, full_params).output_ids;
  for (bool speculative : {false, true}) {
    for (int64_t after : {1, 5, 12}) {
      std::atomic<bool> cancel{false};
      decode::GenerationParams p = full_params;
      p.cancel = &cancel;
      int64_t seen = 0, commits_after_cancel = 0;
      decode::TokenCallback on_tokens = [&](const std::vector<int64_t>& tokens, const auto&) {
        if (cancel) ++commits_after_cancel;
        seen += static_cast<int64_t>(tokens.size());
        if (seen >= after) cancel = true;
      };
      decode::GenerationResult r = speculative ? decode::generate_dflash(*target_, *draft_, run.prompt, p, on_tokens)
                                               : decode::generate_plain(*target_, run.prompt, p, on_tokens);
      const std::string where = fmt::format("speculative {} cancel after {}", speculative, after);
      EXPECT_EQ(commits_after_cancel, 0) << where;
      EXPECT_EQ(static_cast<int64_t>(r.output_ids.size()), seen) << where;
      EXPECT_GE(seen, after) << where;
      EXPECT_LT(seen, speculative ? after + 8 : after + 1) << where;  // at most one block past the cancel point
      EXPECT_FALSE(r.stopped) << where;
      EXPECT_TRUE(std::equal(r.output_ids.begin(), r.output_ids.end(), full.begin())) << where;
    }
  }
}

TEST_F(DFlashGolden, BlockSizeOutOfRange) {
  decode::GenerationParams p;
  p.block_size = 1;
  EXPECT_THROW(decode::generate_dflash(*target_, *draft_, {1, 2, 3}, p), Error);
  p.block_size = 9;
  try {
    decode::generate_dflash(*target_, *draft_, {1, 2, 3}, p);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("exceeds the draft's trained block_size 8"), std::string::npos);
  }
}

std::string draft_error(const std::string& dir, const model::Qwen3Model& target) {
  try {
    model::DFlashDraft::load(dir, target, at::kFloat, at::kCPU);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(DFlashMismatch, DraftTargetMismatchesAreClearErrors) {
  c10::InferenceMode mode;
  ScratchDir d("dflash-mismatch");
  TinyShape s;
  write_random_qwen3((d.path / "target").string(), s);
  model::Qwen3Model target = model::Qwen3Model::load((d.path / "target").string(), at::kFloat, at::kCPU);
  const std::string draft = (d.path / "draft").string();

  write_random_dflash(draft, s, 1, 4, 2, {0, 1}, 5);
  EXPECT_EQ(draft_error(draft, target), "");

  TinyShape wide = s;
  wide.hidden = 48;
  write_random_dflash(draft, wide, 1, 4, 2, {0, 1}, 5);
  EXPECT_NE(draft_error(draft, target).find("draft hidden_size 48 does not match the target's 32"), std::string::npos);

  TinyShape big_vocab = s;
  big_vocab.vocab = 100;
  write_random_dflash(draft, big_vocab, 1, 4, 2, {0, 1}, 5);
  EXPECT_NE(draft_error(draft, target).find("draft vocab_size 100 does not match the target's 64"), std::string::npos);

  write_random_dflash(draft, s, 1, 4, 2, {0, 2}, 5);
  EXPECT_NE(draft_error(draft, target).find("target_layer_ids entry 2 is outside the target's layers 0..1"), std::string::npos);

  write_random_dflash(draft, s, 1, 4, 2, {0, 1}, 64);
  EXPECT_NE(draft_error(draft, target).find("mask_token_id 64 is outside the target embedding"), std::string::npos);

  write_random_dflash(draft, s, 1, 1, 2, {0, 1}, 5);
  EXPECT_NE(draft_error(draft, target).find("block_size 1 must be at least 2"), std::string::npos);

  write_random_dflash(draft, s, 1, 4, 3, {0, 1}, 5);
  EXPECT_NE(draft_error(draft, target).find("num_target_layers 3 does not match"), std::string::npos);

  // what other DFlash checkpoints configure and this engine does not compute is refused, not run as something else;
  // a tap list given empty is refused, not replaced by the default formula
  const std::vector<std::pair<nlohmann::json, std::string>> configs = {
      {{{"causal", true}}, "dflash_config.causal is true; specpress runs DFlash drafts with non-causal attention only"},
      {{{"use_swa", true}, {"swa_window_size", 4}},
       "dflash_config.use_swa is true (sliding window of 4); specpress's draft layers attend to the whole context"},
      {{{"target_layer_ids", nlohmann::json::array()}},
       "field 'dflash_config.target_layer_ids' is empty; it must list the target layers the draft taps"},
  };
  for (const auto& [change, message] : configs) {
    write_random_dflash(draft, s, 1, 4, 2, {0, 1}, 5);
    nlohmann::json j = dflash_config_json(s, 1, 4, 2, {0, 1}, 5);
    j["dflash_config"].update(change);
    write_json(d.path / "draft" / "config.json", j);
    EXPECT_NE(draft_error(draft, target).find(message), std::string::npos) << draft_error(draft, target);
    // checked from the configs alone, before a target's weights load
    expect_error([&] { model::draft_config_for_dirs(draft, (d.path / "target").string()); }, message);
  }
  nlohmann::json j = dflash_config_json(s, 1, 4, 2, {0, 1}, 5);
  j["dflash_config"]["causal"] = false;  // the Qwen3 drafts' own settings run
  j["dflash_config"]["use_swa"] = false;
  write_json(d.path / "draft" / "config.json", j);
  EXPECT_EQ(draft_error(draft, target), "");
}

// A draft that states fewer positions than its target (max_position_embeddings 8 against 512) runs to the target's,
// as the reference computes the draft's rotations for any position; it used to fail midway through a generation.
TEST(DFlashConfig, DraftRunsToItsTargetsPositions) {
  c10::InferenceMode mode;
  ScratchDir d("dflash-positions");
  TinyShape s;
  write_random_qwen3((d.path / "target").string(), s);
  model::Qwen3Model target = model::Qwen3Model::load((d.path / "target").string(), at::kFloat, at::kCPU);
  const std::string dir = (d.path / "draft").string();
  write_random_dflash(dir, s, 1, 4, 2, {0, 1}, 5);
  decode::GenerationParams p;
  p.max_new_tokens = 24;
  const std::vector<int64_t> prompt = {1, 2, 3};
  const model::DFlashDraft stated = model::DFlashDraft::load(dir, target, at::kFloat, at::kCPU);
  const std::vector<int64_t> expected = decode::generate_dflash(target, stated, prompt, p).output_ids;
  nlohmann::json j = dflash_config_json(s, 1, 4, 2, {0, 1}, 5);
  j["max_position_embeddings"] = 8;
  write_json(d.path / "draft" / "config.json", j);
  const model::DFlashDraft shorter = model::DFlashDraft::load(dir, target, at::kFloat, at::kCPU);
  EXPECT_EQ(shorter.config().arch.max_position_embeddings, 512);
  // the same rotations as the target's: its table, shared
  EXPECT_EQ(shorter.rope().cos.data_ptr(), target.rope().cos.data_ptr());
  EXPECT_EQ(shorter.rope().sin.data_ptr(), target.rope().sin.data_ptr());
  EXPECT_EQ(decode::generate_dflash(target, shorter, prompt, p).output_ids, expected);
  EXPECT_EQ(expected.size(), 24u);
}

TEST(DFlashConfig, DefaultTargetLayerIdsFollowReferenceFormula) {
  EXPECT_EQ(model::default_target_layer_ids(36, 5), (std::vector<int64_t>{1, 9, 17, 25, 33}));
  EXPECT_EQ(model::default_target_layer_ids(36, 1), (std::vector<int64_t>{18}));
  EXPECT_EQ(model::default_target_layer_ids(6, 2), (std::vector<int64_t>{1, 3}));
}

}  // namespace
