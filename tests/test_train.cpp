// test_train.cpp — the trainers on tiny random models (CPU, seconds): the training forwards compute
// what the decoding engine computes, a few steps lower the loss, a run stopped and resumed ends
// bitwise where an uninterrupted run ends, the exported draft and LM load in specpress (speculative
// output equals greedy output), the beacon compressor's KL falls and its export loads, text and chat
// data go through the real Qwen3 tokenizer, and bad input fails with messages naming the file, flag
// or field.
#include <gtest/gtest.h>

#include <c10/core/InferenceMode.h>

#include <csignal>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "core/error.h"
#include "decode/generation.h"
#include "io/checkpoint.h"
#include "io/mapped_file.h"
#include "io/path_lock.h"
#include "io/safetensors.h"
#include "model_fixtures.h"
#include "test_util.h"
#include "compress/beacon.h"
#include "train/checkpoint.h"
#include "train/compressor_trainer.h"
#include "train/data.h"
#include "train/dflash_forward.h"
#include "train/draft_trainer.h"
#include "train/lm_trainer.h"
#include "train/loop.h"
#include "train/sequence_forward.h"

using namespace specpress;
using namespace specpress::test;
namespace fs = std::filesystem;

namespace {

const TinyShape kShape;  // vocab 64, hidden 32, 2 layers

// Sequences with structure a small model can learn: arithmetic progressions mod 60, eos-terminated.
void write_ids_data(const fs::path& path, int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::ofstream out(path);
  for (int i = 0; i < n; ++i) {
    const int64_t a = 1 + static_cast<int64_t>(rng() % 20), d = 1 + static_cast<int64_t>(rng() % 3);
    const int64_t len = 12 + static_cast<int64_t>(rng() % 20);
    nlohmann::json ids = nlohmann::json::array();
    for (int64_t k = 0; k < len; ++k) ids.push_back(1 + (a + d * k) % 60);
    ids.push_back(kShape.vocab - 1);
    out << nlohmann::json{{"ids", ids}}.dump() << "\n";
  }
}

void write_prompts(const fs::path& path, int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::ofstream out(path);
  for (int i = 0; i < n; ++i) {
    const int64_t a = 1 + static_cast<int64_t>(rng() % 20), d = 1 + static_cast<int64_t>(rng() % 3);
    nlohmann::json ids = nlohmann::json::array();
    for (int64_t k = 0; k < 5; ++k) ids.push_back(1 + (a + d * k) % 60);
    out << nlohmann::json{{"ids", ids}}.dump() << "\n";
  }
}

struct Fixture {
  ScratchDir dir{"train"};
  fs::path target = dir.path / "target", data = dir.path / "data.jsonl", prompts = dir.path / "prompts.jsonl",
           config = dir.path / "target" / "config.json";
  Fixture() {
    write_random_qwen3(target.string(), kShape, /*tied=*/true, 7);
    write_ids_data(data, 64, 3);
    write_prompts(prompts, 12, 5);
  }

  // 6 steps on data.jsonl into dir/out, f32 export, checkpoint only at the end.
  void set_common(train::CommonOptions& o, const std::string& out, int64_t batch, int64_t seq_len, uint64_t seed) const {
    o.data = {data.string()};
    o.out = (dir.path / out).string();
    o.steps = 6;
    o.batch = batch;
    o.seq_len = seq_len;
    o.optim.lr = 3e-3;
    o.optim.warmup_steps = 2;
    o.save_every = 0;
    o.save_dtype = "f32";
    o.seed = seed;
  }

  train::DraftOptions draft_options(const std::string& out) const {
    train::DraftOptions o;
    o.target_dir = target.string();
    set_common(o, out, 2, 32, 11);
    o.on_policy_prompts = {prompts.string()};
    o.gen_tokens = 16;
    o.draft_layers = 1;
    o.block_size = 4;
    o.target_layer_ids = {0, 1};
    o.anchors = 4;
    o.eval_samples = 0;
    return o;
  }

  // On-policy trajectories of the target (greedy, sampled spans 1..4), window 6, events in each.
  train::CompressorOptions compressor_options(const std::string& out) const {
    train::CompressorOptions o;
    o.target_dir = target.string();
    set_common(o, out, 2, 48, 13);
    o.data.clear();
    o.on_policy_prompts = {prompts.string()};
    o.gen_tokens = 40;
    o.span_max = 4;
    o.policy.window = 6;
    o.feature_layers = {0, 1};
    o.width = 16;
    o.optim.lr = 1e-2;
    o.eval_samples = 2;
    return o;
  }

  train::LmOptions lm_options(const std::string& out) const {
    train::LmOptions o;
    set_common(o, out, 4, 24, 5);
    o.config_path = config.string();
    return o;
  }
};

// The mean loss of the last 5 steps is below that of the first 5 by at least `margin`.
void expect_loss_falls(const train::TrainSummary& s, size_t steps, double margin) {
  ASSERT_EQ(s.losses.size(), steps);
  auto mean = [&](size_t from, size_t to) {
    double sum = 0;
    for (size_t i = from; i < to; ++i) sum += s.losses[i].second;
    return sum / static_cast<double>(to - from);
  };
  EXPECT_LT(mean(steps - 5, steps), mean(0, 5) - margin);
}

// Every tensor of two safetensors files, compared exactly.
void expect_same_tensors(const std::string& a, const std::string& b) {
  train::NamedTensors ta = train::read_tensors(a, at::kCPU), tb = train::read_tensors(b, at::kCPU);
  ASSERT_EQ(ta.size(), tb.size());
  for (size_t i = 0; i < ta.size(); ++i) {
    EXPECT_EQ(ta[i].first, tb[i].first);
    EXPECT_TRUE(at::equal(ta[i].second, tb[i].second)) << ta[i].first << " differs";
  }
}

// A run resumed after step 3 of 6 ends where the uninterrupted run ends: checkpoint parameters and optimizer
// state equal to the straight run's.
void expect_resumed_like(const train::TrainSummary& resumed, const std::string& straight_out,
                         const std::string& resumed_out) {
  EXPECT_EQ(resumed.first_step, 3);
  EXPECT_EQ(resumed.last_step, 6);
  expect_same_tensors(straight_out + "/checkpoint/params.safetensors", resumed_out + "/checkpoint/params.safetensors");
  expect_same_tensors(straight_out + "/checkpoint/optimizer.safetensors",
                      resumed_out + "/checkpoint/optimizer.safetensors");
}

TEST(TrainForward, SequenceForwardMatchesEngineForward) {
  Fixture f;
  model::Qwen3Model target = model::Qwen3Model::load(f.target.string(), at::kFloat, at::kCPU);
  at::manual_seed(3);
  at::Tensor ids = at::randint(0, kShape.vocab, {2, 10}, at::kLong);
  train::SequenceOutput out = train::sequence_forward(target.config(), target.weights(), target.rope(), ids, {0, 1}, true);
  for (int64_t r = 0; r < 2; ++r) {
    model::KVCache cache = target.make_cache(10);
    model::ForwardOutput ref = target.forward(ids[r], 0, cache, {true, {0, 1}, false});
    at::Tensor logits = target.lm_head_logits(out.hidden[r]);
    EXPECT_TRUE(at::allclose(logits, ref.logits, 1e-5, 1e-5)) << (logits - ref.logits).abs().max().item<double>();
    EXPECT_TRUE(at::allclose(out.taps[r], ref.taps, 1e-5, 1e-5));
  }
}

TEST(TrainForward, BlockSparseDraftForwardMatchesEngineDraft) {
  Fixture f;
  write_random_dflash((f.dir.path / "draft").string(), kShape, 2, 4, kShape.layers, {0, 1}, kShape.vocab - 2);
  model::Qwen3Model target = model::Qwen3Model::load(f.target.string(), at::kFloat, at::kCPU);
  model::DFlashDraft draft = model::DFlashDraft::load((f.dir.path / "draft").string(), target, at::kFloat, at::kCPU);
  const model::DFlashConfig& dc = draft.config();
  train::NamedTensors named = train::read_tensors((f.dir.path / "draft" / "model.safetensors").string(), at::kCPU);
  model::DFlashWeights w = train::dflash_from_named(named, dc);
  ops::RopeTable rope = ops::make_rope_table(dc.arch.head_dim, dc.arch.rope_theta, 64, at::kCPU);

  at::manual_seed(4);
  std::vector<int64_t> row;
  for (int i = 0; i < 14; ++i) row.push_back(at::randint(0, kShape.vocab - 2, {1}, at::kLong).item<int64_t>());
  const std::vector<int64_t> anchors = {1, 5, 6, 12};  // overlapping blocks and one cut by the end
  at::Tensor ids = at::tensor(row, at::kLong).unsqueeze(0);
  at::Tensor taps = train::sequence_forward(target.config(), target.weights(), target.rope(), ids, dc.target_layer_ids, false).taps;
  train::DraftBlocks blocks = train::make_blocks({row}, {anchors}, 14, 4, dc.mask_token_id, 4.0);
  at::Tensor hidden = train::draft_hidden(dc, w, rope, target.weights().embed_tokens, taps, blocks)[0];

  for (size_t j = 0; j < anchors.size(); ++j) {
    const int64_t a = anchors[j];
    model::DraftCache cache = draft.make_cache(32);
    std::vector<int64_t> block = {row[a], dc.mask_token_id, dc.mask_token_id, dc.mask_token_id};
    at::Tensor ref = draft.forward(taps[0].narrow(0, 0, a), at::tensor(block, at::kLong), cache);
    at::Tensor got = hidden.narrow(0, static_cast<int64_t>(j) * 4, 4);
    EXPECT_TRUE(at::allclose(got, ref, 1e-5, 1e-5)) << "anchor " << a << ": " << (got - ref).abs().max().item<double>();
  }
  // Labels and weights: positions 1..3 of each block, exp(-(k-1)/gamma), nothing past the end.
  EXPECT_EQ(blocks.labels[0][1].item<int64_t>(), row[2]);
  EXPECT_FLOAT_EQ(blocks.weights[0][2].item<float>(), static_cast<float>(std::exp(-1.0 / 4.0)));
  EXPECT_EQ(blocks.weights[0][12].item<float>(), 0.0f);  // block 3 (anchor 12), k = 0
  EXPECT_GT(blocks.weights[0][13].item<float>(), 0.0f);  // anchor 12 + 1 = 13 < 14
  EXPECT_EQ(blocks.weights[0][14].item<float>(), 0.0f);  // anchor 12 + 2 = 14: past the end
}

TEST(TrainLm, FewStepsLowerTheLossAndExportLoads) {
  Fixture f;
  train::LmOptions o = f.lm_options("lm");
  o.steps = 40;
  nlohmann::json given = nlohmann::json::parse(std::ifstream(f.config));
  given["bos_token_id"] = 3;
  given["max_position_embeddings"] = o.seq_len;  // the last window position is seq_len - 1
  o.config_path = (f.dir.path / "lm-config.json").string();
  write_json(o.config_path, given);
  expect_loss_falls(train::train_lm(o, train::TextCodec{}), 40, 0.5);
  // The export is an HF Qwen3 directory specpress loads, with the trained weights.
  model::Qwen3Model lm = model::Qwen3Model::load(o.out, at::kFloat, at::kCPU);
  EXPECT_TRUE(lm.config().tie_word_embeddings);
  expect_same_tensors(o.out + "/model.safetensors", o.out + "/checkpoint/params.safetensors");
  nlohmann::json config = nlohmann::json::parse(std::ifstream(o.out + "/config.json"));
  EXPECT_EQ(config["architectures"][0], "Qwen3ForCausalLM");
  EXPECT_EQ(config["torch_dtype"], "float32");
  EXPECT_EQ(config["bos_token_id"], 3);  // kept from --config, for HF tools
}

TEST(TrainLm, StopAndResumeEqualsUninterruptedRun) {
  Fixture f;
  train::LmOptions straight = f.lm_options("straight");
  train::train_lm(straight, train::TextCodec{});
  train::LmOptions part = f.lm_options("parts");
  part.stop_after = 3;
  train::TrainSummary first = train::train_lm(part, train::TextCodec{});
  EXPECT_EQ(first.last_step, 3);
  part.stop_after = 0;
  part.resume = true;
  train::TrainSummary second = train::train_lm(part, train::TextCodec{});
  expect_resumed_like(second, straight.out, part.out);
}

// A checkpoint that cannot be this run's is refused naming its file: a step below 0 or past --steps, NaN weights or
// optimizer moments (training from it would spread them to every weight).
TEST(TrainLm, CorruptCheckpointsAreRefused) {
  Fixture f;
  train::LmOptions o = f.lm_options("corrupt");
  o.stop_after = 2;
  train::train_lm(o, train::TextCodec{});
  o.stop_after = 0;
  o.resume = true;
  const fs::path dir = fs::path(o.out) / "checkpoint";
  const std::string state_text = io::read_text_file((dir / "state.json").string());
  nlohmann::json state = nlohmann::json::parse(state_text);
  for (const int64_t step : {int64_t{-3}, o.steps + 5}) {
    state["step"] = step;
    write_text(dir / "state.json", state.dump());
    expect_error([&] { train::train_lm(o, train::TextCodec{}); },
                 step < 0 ? "state.json: step -3 must be >= 0" : "is past --steps");
  }
  write_text(dir / "state.json", state_text);
  for (const char* file : {"params.safetensors", "optimizer.safetensors"}) {
    const std::string path = (dir / file).string();
    const std::string kept = io::read_text_file(path);
    io::TensorStore store = io::TensorStore::open_file(path);
    std::vector<std::pair<std::string, at::Tensor>> tensors;
    for (const std::string& name : store.names())
      tensors.emplace_back(name, store.take(name, store.shape(name), at::kFloat, at::kCPU));
    tensors.front().second.view(-1)[0] = std::numeric_limits<float>::quiet_NaN();
    io::save_safetensors(path, tensors);
    expect_error([&] { train::train_lm(o, train::TextCodec{}); }, "holds NaN or infinite values");
    write_text(path, kept);
  }
  EXPECT_EQ(train::train_lm(o, train::TextCodec{}).first_step, 2);  // the restored checkpoint resumes
}

// A larger --steps on --resume extends a finished run (a note says where its schedule moves; the checkpoint and the
// export then record the new end); a checkpoint another trainer wrote is refused naming it, and one that does not
// record its trainer (an older checkpoint) resumes with a note.
TEST(TrainLm, ResumeExtendsAFinishedRunAndNamesAnotherTrainer) {
  Fixture f;
  train::LmOptions o = f.lm_options("extend");
  train::train_lm(o, train::TextCodec{});
  const fs::path state_file = fs::path(o.out) / "checkpoint" / "state.json";
  nlohmann::json state = nlohmann::json::parse(io::read_text_file(state_file.string()));
  EXPECT_EQ(state["run"]["trainer"], "train-lm");
  o.resume = true;
  o.steps = 9;
  ::testing::internal::CaptureStderr();
  const train::TrainSummary extended = train::train_lm(o, train::TextCodec{});
  std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(extended.first_step, 6);
  EXPECT_EQ(extended.last_step, 9);
  EXPECT_NE(said.find(fmt::format("--resume: --steps 9 where {} records 6: the learning-rate schedule now ends at "
                                  "step 9; step 7 runs at {:.2e} instead of {:.2e}", state_file.string(),
                                  train::learning_rate(o.schedule(), 6), o.optim.lr * o.optim.min_lr_ratio)),
            std::string::npos) << said;
  state = nlohmann::json::parse(io::read_text_file(state_file.string()));
  EXPECT_EQ(state["step"], 9);
  EXPECT_EQ(state["run"]["steps"], 9);
  expect_same_tensors(o.out + "/model.safetensors", o.out + "/checkpoint/params.safetensors");
  state["run"]["trainer"] = "train-draft";
  write_text(state_file, state.dump());
  expect_error([&] { train::train_lm(o, train::TextCodec{}); },
               "--resume: " + state_file.string() + " was written by train-draft, not train-lm: give train-lm another "
               "--out, or start over with --force");
  state["run"].erase("trainer");
  write_text(state_file, state.dump());
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(train::train_lm(o, train::TextCodec{}).first_step, 9);  // finished: nothing left to run
  said = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(said.find("does not record option 'trainer' (an older checkpoint): not checked"), std::string::npos)
      << said;
}

// SIGINT (or SIGTERM) during a step stops the loop after that step: it writes a checkpoint there, throws Interrupted
// (the CLI exits 128 + the signal) and puts back the handler it found; --resume continues from that step.
TEST(TrainLoop, SignalStopsAfterTheStepWithACheckpoint) {
  ScratchDir dir("train-signal");
  train::CommonOptions o;
  o.out = (dir.path / "out").string();
  o.steps = 6;
  o.save_every = 0;
  fs::create_directories(o.out);
  train::NamedTensors params = {{"w", at::ones({4})}};
  train::make_trainable(params, at::kCPU);
  train::LoopHooks hooks;
  int64_t raise_at = 2;
  hooks.forward_backward = [&](int64_t step) {
    if (step == raise_at) std::raise(SIGINT);
    at::Tensor loss = (params[0].second * params[0].second).sum();
    loss.backward();
    return train::StepOutput{loss.item<double>(), 1, ""};
  };
  hooks.export_model = [] {};
  struct sigaction marker {}, before {}, after {};
  marker.sa_handler = [](int) {};
  sigemptyset(&marker.sa_mask);
  sigaction(SIGINT, &marker, &before);
  {
    train::AdamW optimizer(params, o.schedule());
    ::testing::internal::CaptureStderr();
    try {
      train::run_training("loop", o, nlohmann::json::object(), false, params, optimizer, hooks);
      ADD_FAILURE() << "no Interrupted";
    } catch (const Interrupted& e) {
      EXPECT_EQ(e.signal, SIGINT);
      EXPECT_NE(std::string(e.what()).find("loop: stopped by SIGINT after step 3 of 6; " + o.out +
                                           " holds its checkpoint: the same command with --resume continues"),
                std::string::npos) << e.what();
    }
    const std::string said = ::testing::internal::GetCapturedStderr();  // the signal is acknowledged at once
    EXPECT_NE(said.find("specpress: stopping after the step in flight, with a checkpoint written (a second Ctrl-C "
                        "or SIGTERM ends it at once, losing that)"),
              std::string::npos) << said;
  }
  sigaction(SIGINT, nullptr, &after);
  EXPECT_EQ(after.sa_handler, marker.sa_handler);  // the handler found before the loop is back
  sigaction(SIGINT, &before, nullptr);
  const std::optional<train::CheckpointState> saved = train::find_checkpoint(o.out);
  ASSERT_TRUE(saved.has_value());
  EXPECT_EQ(saved->step, 3);
  raise_at = -1;
  train::AdamW optimizer(params, o.schedule());
  const train::TrainSummary resumed =
      train::run_training("loop", o, nlohmann::json::object(), true, params, optimizer, hooks);
  EXPECT_EQ(resumed.first_step, 3);
  EXPECT_EQ(resumed.last_step, 6);
}

// A resume reads the run's input files again: changed bytes, an input added or one left out are refused naming the
// file; a checkpoint written before the fingerprints were recorded resumes with a note (and, on the CPU, --no-autocast
// changes nothing).
TEST(TrainLm, ResumeRefusesChangedData) {
  Fixture f;
  train::LmOptions o = f.lm_options("fingerprints");
  o.device = "cpu";  // where --no-autocast is no part of the run (below), also with a GPU visible
  const fs::path data = f.dir.path / "mine.jsonl";
  fs::copy_file(f.data, data);
  o.data = {data.string()};
  o.stop_after = 2;
  train::train_lm(o, train::TextCodec{});
  o.stop_after = 0;
  o.resume = true;
  const std::string original = io::read_text_file(data.string());
  write_text(data, original.substr(0, original.find('\n', original.size() / 2) + 1));  // whole lines, fewer
  expect_error([&] { train::train_lm(o, train::TextCodec{}); },
               "--resume: " + fs::absolute(data).lexically_normal().string() + " changed since");
  write_text(data, original);
  const fs::path state_file = fs::path(o.out) / "checkpoint" / "state.json";
  nlohmann::json state = nlohmann::json::parse(io::read_text_file(state_file.string()));
  ASSERT_TRUE(state["run"].contains("input_fingerprints"));
  state["run"]["input_fingerprints"]["/elsewhere/tokenizer.json"] = "0:1";
  write_text(state_file, state.dump());
  expect_error([&] { train::train_lm(o, train::TextCodec{}); },
               "--resume: /elsewhere/tokenizer.json was an input when");
  state["run"].erase("input_fingerprints");  // an older checkpoint
  write_text(state_file, state.dump());
  o.autocast = false;  // meaningless on the CPU, so not part of a CPU run
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(train::train_lm(o, train::TextCodec{}).first_step, 2);
  const std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(said.find("records no fingerprints of its input files (an older checkpoint)"), std::string::npos) << said;
}

// --device auto continues a --resume on the device its checkpoint records rather than this machine's default; a device
// this machine lacks is named with the checkpoint, and an explicit --device that differs is the run's mismatch.
TEST(TrainLm, ResumeWithAutoTakesTheCheckpointsDevice) {
  Fixture f;
  train::LmOptions o = f.lm_options("device");
  o.device = "cpu";
  o.stop_after = 2;
  train::train_lm(o, train::TextCodec{});
  o.stop_after = 0;
  o.resume = true;
  o.device = "auto";
  const fs::path state_file = fs::path(o.out) / "checkpoint" / "state.json";
  const std::string state_text = io::read_text_file(state_file.string());
  nlohmann::json state = nlohmann::json::parse(state_text);
  ASSERT_EQ(state["run"]["device"], "cpu");
  if (!at::hasCUDA()) {
    state["run"]["device"] = "cuda:0";
    write_text(state_file, state.dump());
    expect_error([&] { train::train_lm(o, train::TextCodec{}); },
                 state_file.string() + " records device 'cuda:0', and this build or machine has no CUDA");
    o.device = "cpu";
    expect_error([&] { train::train_lm(o, train::TextCodec{}); }, "option 'device' is \"cpu\" now but \"cuda:0\"");
    o.device = "auto";
    write_text(state_file, state_text);
  }
  EXPECT_EQ(train::train_lm(o, train::TextCodec{}).first_step, 2);  // the CPU run continues on the CPU
}

TEST(TrainDraft, FewStepsLowerTheLoss) {
  Fixture f;
  train::DraftOptions o = f.draft_options("draft");
  o.steps = 40;
  expect_loss_falls(train::train_draft(o, train::TextCodec{}), 40, 0.3);
}

// The first `n` lines of `file`, as a run stopped by a signal during its generations leaves it.
std::string first_lines(const std::string& file, size_t n) {
  const std::string text = io::read_text_file(file);
  size_t end = 0;
  for (size_t i = 0; i < n; ++i) end = text.find('\n', end) + 1;
  return text.substr(0, end);
}

TEST(TrainDraft, StopAndResumeEqualsUninterruptedRun) {
  Fixture f;
  train::DraftOptions straight = f.draft_options("straight");
  train::train_draft(straight, train::TextCodec{});
  train::DraftOptions part = f.draft_options("parts");
  part.stop_after = 3;
  train::train_draft(part, train::TextCodec{});
  part.stop_after = 0;
  part.resume = true;
  train::TrainSummary second = train::train_draft(part, train::TextCodec{});
  EXPECT_EQ(second.first_step, 3);
  expect_same_tensors(straight.out + "/checkpoint/params.safetensors", part.out + "/checkpoint/params.safetensors");
  expect_same_tensors(straight.out + "/model.safetensors", part.out + "/model.safetensors");
  // A resume with a different schedule is refused, naming the option.
  part.optim.lr = 1e-2;
  expect_error([&] { train::train_draft(part, train::TextCodec{}); }, "option 'lr'");
  // A changed --gen-tokens is refused before the on-policy generation: OUT/onpolicy.jsonl stays as it was.
  part.optim.lr = straight.optim.lr;
  part.gen_tokens += 4;
  const std::string cache = part.out + "/onpolicy.jsonl", generated = io::read_text_file(cache);
  expect_error([&] { train::train_draft(part, train::TextCodec{}); }, "option 'gen_tokens' is 20 now but 16");
  EXPECT_EQ(io::read_text_file(cache), generated);
  // Another target of the same shape at the same path is refused by its weights' fingerprint, and a stopped
  // generation made by the old one is made again, not continued.
  part.gen_tokens = straight.gen_tokens;
  write_random_qwen3((f.dir.path / "other").string(), kShape, /*tied=*/true, 8);
  fs::copy_file(f.dir.path / "other" / "model.safetensors", f.target / "model.safetensors",
                fs::copy_options::overwrite_existing);
  expect_error([&] { train::train_draft(part, train::TextCodec{}); }, "/target/model.safetensors changed since");
  train::DraftOptions stopped = f.draft_options("stopped");
  stopped.steps = 1;
  stopped.resume = true;
  fs::create_directories(stopped.out);
  write_text(fs::path(stopped.out) / "onpolicy.jsonl", first_lines(straight.out + "/onpolicy.jsonl", 4));
  fs::copy_file(straight.out + "/generations.json", stopped.out + "/generations.json");
  ::testing::internal::CaptureStderr();
  train::train_draft(stopped, train::TextCodec{});
  const std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(said.find("onpolicy.jsonl was made otherwise (target_fingerprint is"), std::string::npos) << said;
  // A checkpoint and a generation cache from before models were fingerprinted resume, with a note: no model check
  nlohmann::json state = nlohmann::json::parse(std::ifstream(part.out + "/checkpoint/state.json"));
  ASSERT_TRUE(state["run"].contains("model_fingerprints"));
  state["run"].erase("model_fingerprints");
  write_json(part.out + "/checkpoint/state.json", state);
  ::testing::internal::CaptureStderr();
  EXPECT_NO_THROW(train::train_draft(part, train::TextCodec{}));
  std::string note = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(note.find("records no fingerprints of the models' files (--target, --draft) (an older checkpoint)"),
            std::string::npos) << note;
  train::DraftOptions older = f.draft_options("older");
  older.steps = 1;
  older.resume = true;
  fs::create_directories(older.out);
  write_text(fs::path(older.out) / "onpolicy.jsonl", first_lines(stopped.out + "/onpolicy.jsonl", 4));
  nlohmann::json records = nlohmann::json::parse(std::ifstream(stopped.out + "/generations.json"));
  records["onpolicy.jsonl"].erase("target_fingerprint");
  write_json(older.out + "/generations.json", records);
  ::testing::internal::CaptureStderr();
  train::train_draft(older, train::TextCodec{});
  note = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(note.find("generations.json records no target_fingerprint for onpolicy.jsonl (an older run's)"),
            std::string::npos) << note;
  EXPECT_NE(note.find("reusing 4 on-policy generations"), std::string::npos) << note;
}

// A run stopped during its generations saved those done (tools::StopSignals in generate_greedy), as the first `kept`
// lines of OUT/`file`, beside OUT/generations.json, the record of what made them: --resume generates only the rest,
// and the file ends as an uninterrupted run's. Returns what the resumed run said.
template <typename Options, typename Train>
std::string resume_stopped_generations(Options whole, Options part, const std::string& file, size_t kept,
                                       Train run_trainer) {
  whole.steps = part.steps = 1;
  run_trainer(whole, train::TextCodec{});
  part.resume = true;
  fs::create_directories(part.out);
  write_text(fs::path(part.out) / file, first_lines(whole.out + "/" + file, kept));
  fs::copy_file(whole.out + "/generations.json", part.out + "/generations.json");
  ::testing::internal::CaptureStderr();
  run_trainer(part, train::TextCodec{});
  EXPECT_EQ(io::read_text_file(part.out + "/" + file), io::read_text_file(whole.out + "/" + file));
  return ::testing::internal::GetCapturedStderr();
}

TEST(TrainDraft, ResumeContinuesStoppedGenerations) {
  Fixture f;
  const std::string said = resume_stopped_generations(f.draft_options("whole"), f.draft_options("stopped"),
                                                      "onpolicy.jsonl", 5, train::train_draft);
  EXPECT_NE(said.find("reusing 5 on-policy generations from " + f.draft_options("stopped").out +
                      "/onpolicy.jsonl (a stopped run's); generating the other 7"), std::string::npos) << said;
}

// A run stopped before its first checkpoint leaves OUT/onpolicy.jsonl: --resume starts at step 0 and reuses it only
// where it answers the same prompts; a --seq-len no prompt leaves room in fails before any generation.
TEST(TrainDraft, ResumeBeforeTheFirstCheckpointAndSeqLenRoom) {
  Fixture f;
  train::DraftOptions o = f.draft_options("early");
  o.steps = 1;
  fs::create_directories(o.out);
  std::string stale;
  for (int i = 0; i < 12; ++i) stale += R"({"ids": [9, 9, 9, 9, 9, 1, 2, 3], "loss_start": 5})" "\n";
  write_text(fs::path(o.out) / "onpolicy.jsonl", stale);
  o.resume = true;
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(train::train_draft(o, train::TextCodec{}).last_step, 1);
  std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(said.find("onpolicy.jsonl answers other prompts (or more --gen-tokens); generating again"),
            std::string::npos) << said;
  EXPECT_NE(said.find("holds no checkpoint yet; starting at step 0"), std::string::npos) << said;
  fs::remove_all(fs::path(o.out) / "checkpoint");  // as if stopped before it: the generations now match
  for (const char* file : {"model.safetensors", "config.json"}) fs::remove(fs::path(o.out) / file);
  ::testing::internal::CaptureStderr();
  train::train_draft(o, train::TextCodec{});
  said = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(said.find("reusing 12 on-policy generations"), std::string::npos) << said;

  train::DraftOptions s = f.draft_options("no-room");
  s.data.clear();
  s.seq_len = 6;  // 5-token prompts: no 2 generated tokens fit
  expect_error([&] { train::train_draft(s, train::TextCodec{}); },
               "--seq-len 6: no sequence would keep a block anchor: every --on-policy-prompts prompt needs 2 generated "
               "tokens after it within --seq-len (the shortest prompt has 5 tokens)");
  EXPECT_FALSE(fs::exists(s.out));
}

TEST(TrainDraft, SavedDraftLoadsAndSpeculativeOutputEqualsGreedy) {
  Fixture f;
  train::DraftOptions o = f.draft_options("draft");
  o.steps = 30;
  o.save_dtype = "bf16";  // the published format
  o.eval_samples = 3;
  o.eval_tokens = 24;
  train::TrainSummary s = train::train_draft(o, train::TextCodec{});
  ASSERT_EQ(s.eval_values.size(), 1u);
  EXPECT_GE(s.eval_values[0], 1.0);

  nlohmann::json config = nlohmann::json::parse(std::ifstream(o.out + "/config.json"));
  EXPECT_EQ(config["block_size"], 4);
  EXPECT_EQ(config["num_target_layers"], kShape.layers);
  EXPECT_EQ(config["dflash_config"]["target_layer_ids"], nlohmann::json({0, 1}));
  EXPECT_EQ(config["dflash_config"]["mask_token_id"], kShape.vocab - 1);
  io::TensorStore store = io::TensorStore::open_dir(o.out);
  EXPECT_TRUE(store.has("fc.weight") && store.has("hidden_norm.weight") && store.has("norm.weight") &&
              store.has("layers.0.self_attn.q_proj.weight"));
  EXPECT_FALSE(store.has("embed_tokens.weight") || store.has("lm_head.weight"));

  c10::InferenceMode inference;
  model::Qwen3Model target = model::Qwen3Model::load(f.target.string(), at::kFloat, at::kCPU);
  model::DFlashDraft draft = model::DFlashDraft::load(o.out, target, at::kFloat, at::kCPU);
  train::TextCodec none;
  decode::GenerationParams params;
  params.max_new_tokens = 40;
  for (const auto& prompt : train::read_prompts({f.prompts.string()}, none, kShape.vocab)) {
    decode::GenerationResult plain = decode::generate_plain(target, prompt, params);
    decode::GenerationResult spec = decode::generate_dflash(target, draft, prompt, params);
    EXPECT_EQ(spec.output_ids, plain.output_ids);
  }
}

TEST(TrainCompressor, FewStepsLowerTheKLAndTheExportLoads) {
  Fixture f;
  train::CompressorOptions o = f.compressor_options("beacon");
  o.steps = 30;
  o.batch = 8;
  o.eval_prompts = o.on_policy_prompts;  // replay the trained trajectories through the compressed engine
  o.eval_samples = 6;
  o.eval_every = 1;
  train::TrainSummary s = train::train_compressor(o, train::TextCodec{});
  ASSERT_EQ(s.eval_values.size(), 30u);
  // The engine's KL after the first step (about the untrained compressor) against the end.
  EXPECT_LT(s.eval_values.back(), 0.7 * s.eval_values.front());
  EXPECT_GT(s.eval_values.front(), 0.0);
  // OUT/eval.json: every training-free control and the untrained beacon, then every evaluation.
  nlohmann::json report = nlohmann::json::parse(std::ifstream(o.out + "/eval.json"));
  for (const char* m : {"drop", "keep-last", "mean-merge", "top-attention", "window-only", "beacon (untrained)"})
    EXPECT_TRUE(report["baselines"].contains(m)) << m;
  ASSERT_EQ(report["evals"].size(), 30u);
  EXPECT_EQ(report["evals"][29]["step"], 30);
  EXPECT_DOUBLE_EQ(report["evals"][29]["kl"].get<double>(), s.eval_values.back());

  c10::InferenceMode inference;
  model::Qwen3Model target = model::Qwen3Model::load(f.target.string(), at::kFloat, at::kCPU);
  auto beacon = compress::BeaconCompressor::load(o.out, target);
  EXPECT_EQ(beacon->config().feature_layers, std::vector<int64_t>({0, 1}));
  EXPECT_EQ(beacon->config().policy.window, 6);
  nlohmann::json config = nlohmann::json::parse(std::ifstream(o.out + "/compressor.json"));
  EXPECT_EQ(config["compressor_type"], "beacon");
  // The exported weights are the checkpoint's.
  train::NamedTensors exported = train::read_tensors(o.out + "/compressor.safetensors", at::kCPU);
  train::NamedTensors checkpoint = train::read_tensors(o.out + "/checkpoint/params.safetensors", at::kCPU);
  ASSERT_EQ(exported.size(), checkpoint.size());
  for (size_t i = 0; i < exported.size(); ++i) EXPECT_TRUE(at::allclose(exported[i].second, checkpoint[i].second));
}

TEST(TrainCompressor, StopAndResumeEqualsUninterruptedRun) {
  Fixture f;
  train::CompressorOptions straight = f.compressor_options("straight");
  straight.policy.merge_tokens = 3;
  train::train_compressor(straight, train::TextCodec{});
  train::CompressorOptions part = f.compressor_options("parts");
  part.policy.merge_tokens = 3;  // units of 3 tokens across span boundaries
  part.stop_after = 3;
  train::train_compressor(part, train::TextCodec{});
  part.stop_after = 0;
  part.resume = true;
  train::TrainSummary second = train::train_compressor(part, train::TextCodec{});
  expect_resumed_like(second, straight.out, part.out);
  expect_same_tensors(straight.out + "/compressor.safetensors", part.out + "/compressor.safetensors");
  // eval.json keeps the first invocation's baselines across the resume, and the final evaluation matches.
  nlohmann::json a = nlohmann::json::parse(std::ifstream(straight.out + "/eval.json"));
  nlohmann::json b = nlohmann::json::parse(std::ifstream(part.out + "/eval.json"));
  EXPECT_EQ(a["baselines"], b["baselines"]);
  ASSERT_EQ(b["evals"].size(), 1u);
  EXPECT_EQ(a["evals"], b["evals"]);
  part.policy.window = 8;  // a different policy is a different run, named down to the field that differs
  expect_error([&] { train::train_compressor(part, train::TextCodec{}); }, "option 'compressor.");
  expect_error([&] { train::train_compressor(part, train::TextCodec{}); }, "window' is 8 now but 6 in");
  // ... refused before the generations: a changed --gen-tokens leaves OUT/trajectories.jsonl as it was
  part.policy.window = straight.policy.window;
  part.gen_tokens += 8;
  const std::string cache = part.out + "/trajectories.jsonl", generated = io::read_text_file(cache);
  expect_error([&] { train::train_compressor(part, train::TextCodec{}); }, "option 'gen_tokens' is 48 now but 40");
  EXPECT_EQ(io::read_text_file(cache), generated);
  // without --eval-prompts the held-out trajectories are cut from the training ones: another count is another run
  part.gen_tokens = straight.gen_tokens;
  part.eval_samples = 1;
  expect_error([&] { train::train_compressor(part, train::TextCodec{}); }, "option 'eval_samples' is 1 now but 2");
  // ... which a checkpoint from before it was recorded does not say: it resumes, with a note
  nlohmann::json state = nlohmann::json::parse(std::ifstream(part.out + "/checkpoint/state.json"));
  state["run"].erase("eval_samples");
  state["run"].erase("data_rules");  // nor how its data files were read
  write_json(part.out + "/checkpoint/state.json", state);
  part.eval_samples = straight.eval_samples;
  ::testing::internal::CaptureStderr();
  EXPECT_NO_THROW(train::train_compressor(part, train::TextCodec{}));
  const std::string note = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(note.find("does not record option 'eval_samples' (an older checkpoint): not checked"), std::string::npos)
      << note;
  EXPECT_NE(note.find("does not record option 'data_rules' (an older checkpoint): since then, a chat record"),
            std::string::npos) << note;
}

// ... and so does train-compressor's, whose continued trajectories keep their span seeds
TEST(TrainCompressor, ResumeContinuesStoppedGenerations) {
  Fixture f;
  const std::string said = resume_stopped_generations(f.compressor_options("whole"), f.compressor_options("stopped"),
                                                      "trajectories.jsonl", 4, train::train_compressor);
  EXPECT_NE(said.find("reusing 4 trajectories from " + f.compressor_options("stopped").out +
                      "/trajectories.jsonl (a stopped run's); generating the other"), std::string::npos) << said;
  // generations made otherwise (another --gen-tokens, say) are not continued but made again
  train::CompressorOptions other = f.compressor_options("stopped-other");
  other.steps = 1;
  other.resume = true;
  other.gen_tokens = 30;
  const std::string whole = f.compressor_options("whole").out;
  fs::create_directories(other.out);
  write_text(fs::path(other.out) / "trajectories.jsonl", first_lines(whole + "/trajectories.jsonl", 4));
  fs::copy_file(whole + "/generations.json", other.out + "/generations.json");
  ::testing::internal::CaptureStderr();
  train::train_compressor(other, train::TextCodec{});
  const std::string again = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(again.find("trajectories.jsonl was made otherwise (gen_tokens is 30 now but was 40); generating again"),
            std::string::npos) << again;
}

TEST(TrainCompressor, BadInputNamesTheProblem) {
  Fixture f;
  train::TextCodec none;
  {
    train::CompressorOptions o = f.compressor_options("layers");
    o.feature_layers = {0, 5};
    expect_error([&] { train::train_compressor(o, none); }, "--feature-layers: layer 5 is not a layer of");
  }
  {  // found before the generations and the output directory: no continuation can hold an event
    train::CompressorOptions o = f.compressor_options("short");
    o.policy.window = 1000;
    expect_error([&] { train::train_compressor(o, none); }, "no trajectory can reach a compression event: the longest "
                 "continuation can have 40 tokens within --seq-len 48 and --gen-tokens 40");
    o.policy.window = 6;  // 5-token prompts + 40 tokens: a unit of 34 cannot age past 6 before the last token
    o.policy.merge_tokens = 20;
    EXPECT_EQ(train::train_compressor(o, none).last_step, 6);
    o.policy.merge_tokens = 34;
    o.out = (f.dir.path / "short-34").string();
    expect_error([&] { train::train_compressor(o, none); }, "no trajectory can reach a compression event");
    EXPECT_FALSE(fs::exists(o.out));
  }
  {
    train::CompressorOptions o = f.compressor_options("nothing");
    o.on_policy_prompts.clear();
    expect_error([&] { train::train_compressor(o, none); }, "give --on-policy-prompts and/or --data");
  }
  {  // refused before the generations, not after them: the method is the beacon's
    train::CompressorOptions o = f.compressor_options("window");
    for (int64_t window : {-1, 0}) {
      o.policy.window = window;
      expect_error([&] { train::train_compressor(o, none); }, "--compress-window: must be >= 1");
      EXPECT_FALSE(fs::exists(o.out)) << window;
    }
    o.policy.window = 6;
    o.save_dtype = "f8";
    expect_error([&] { train::train_compressor(o, none); }, "--save-dtype: unknown dtype 'f8'");
    EXPECT_FALSE(fs::exists(o.out));
  }
  {  // what --seq-len cut and left out is said, and so is a run with nothing held out (no evaluation, no eval.json)
    train::CompressorOptions o = f.compressor_options("cut");
    o.steps = 1;
    o.seq_len = 20;  // 5-token prompts + 40 tokens each
    ::testing::internal::CaptureStderr();
    train::train_compressor(o, none);
    std::string said = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(said.find("train-compressor: 12 of 12 trajectories cut to --seq-len 20; 0 left out"), std::string::npos)
        << said;
    write_text(f.dir.path / "one-prompt.jsonl", first_lines(f.prompts.string(), 1));
    o = f.compressor_options("one");
    o.steps = 1;
    o.on_policy_prompts = {(f.dir.path / "one-prompt.jsonl").string()};
    ::testing::internal::CaptureStderr();
    train::train_compressor(o, none);
    said = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(said.find("train-compressor: nothing held out, so no evaluation and no eval.json"), std::string::npos)
        << said;
    EXPECT_FALSE(fs::exists(o.out + "/eval.json"));
  }
  {  // the export in the --save-dtype asked for (f32 unless given); the engine reads it in float32
    train::CompressorOptions o = f.compressor_options("bf16");
    o.steps = 2;
    EXPECT_EQ(train::CompressorOptions{}.save_dtype, "f32");
    o.save_dtype = "bf16";
    train::train_compressor(o, none);
    const std::string bytes = io::read_text_file(o.out + "/compressor.safetensors");
    const io::SafetensorsHeader header = io::parse_safetensors(reinterpret_cast<const uint8_t*>(bytes.data()),
                                                               bytes.size(), "compressor.safetensors");
    ASSERT_FALSE(header.tensors.empty());
    for (const io::TensorInfo& t : header.tensors) EXPECT_EQ(t.dtype, io::DType::BF16) << t.name;
    model::Qwen3Model target = model::Qwen3Model::load(f.target.string(), at::kFloat, at::kCPU);
    EXPECT_EQ(compress::BeaconCompressor::load(o.out, target)->weights().gate.scalar_type(), at::kFloat);
  }
  if (fs::exists(shared_dir() + "/golden/dflash-tiny-a/draft")) {  // another target's draft, with --data alone too
    train::CompressorOptions o = f.compressor_options("draft");
    o.draft_dir = shared_dir() + "/golden/dflash-tiny-a/draft";
    o.on_policy_prompts.clear();
    o.data = {f.data.string()};
    expect_error([&] { train::train_compressor(o, none); }, "draft hidden_size 128 does not match the target's");
  }
}

TEST(TrainErrors, BadInputNamesTheProblem) {
  Fixture f;
  train::TextCodec none;
  {  // target without the tapped layers
    train::DraftOptions o = f.draft_options("bad-taps");
    o.target_layer_ids = {0, 9};
    expect_error([&] { train::train_draft(o, none); }, "--target-layer-ids: layer 9 is not a layer of");
    o.target_layer_ids = {1, 1};
    expect_error([&] { train::train_draft(o, none); }, "--target-layer-ids: layer 1 is given twice");
    o.target_layer_ids = {0, 1};
    o.mask_token_id = -5;
    expect_error([&] { train::train_draft(o, none); }, "--mask-token-id: must be a token id >= 0 (or -1");
    o.mask_token_id = -1;
    o.seq_len = 509;  // the last anchor at 507, its block of 4 up to 510 of the 512 positions (--seq-len 510 fits too)
    o.block_size = 4;
    o.out = (f.dir.path / "long").string();
    o.steps = 1;
    EXPECT_EQ(train::train_draft(o, none).last_step, 1);
    o.seq_len = 511;
    expect_error([&] { train::train_draft(o, none); }, "--seq-len 511 + --block-size 4: the last block reaches "
                 "position 512, past the target's max_position_embeddings 512");
    o.seq_len = 3;
    expect_error([&] { train::train_draft(o, none); }, "--block-size 4: more than --seq-len 3");
  }
  {
    train::CompressorOptions o = f.compressor_options("twice");
    o.feature_layers = {1, 1};
    expect_error([&] { train::train_compressor(o, none); }, "--feature-layers: layer 1 is given twice");
  }
  {  // empty data
    write_text(f.dir.path / "empty.jsonl", "\n");
    train::LmOptions o = f.lm_options("empty");
    o.data = {(f.dir.path / "empty.jsonl").string()};
    expect_error([&] { train::train_lm(o, none); }, "empty.jsonl: no training data in this file (empty)");
  }
  {  // unreadable data
    train::LmOptions o = f.lm_options("missing");
    o.data = {(f.dir.path / "nope.jsonl").string()};
    expect_error([&] { train::train_lm(o, none); }, "nope.jsonl: data file not found");
    o.data = {f.dir.path.string()};
    expect_error([&] { train::train_lm(o, none); }, "is a directory (expected a data file)");
  }
  {  // out-of-vocab ids, named with file, line and index
    write_text(f.dir.path / "oov.jsonl", "{\"ids\": [1, 2, 3]}\n{\"ids\": [4, 64, 5]}\n");
    train::DraftOptions o = f.draft_options("oov");
    o.data = {(f.dir.path / "oov.jsonl").string()};
    o.on_policy_prompts.clear();
    expect_error([&] { train::train_draft(o, none); }, "oov.jsonl line 2: token id 64 at index 1 is outside the vocabulary 0..63");
  }
  {  // text without a tokenizer
    write_text(f.dir.path / "text.jsonl", "{\"text\": \"hello\"}\n");
    train::LmOptions o = f.lm_options("text");
    o.data = {(f.dir.path / "text.jsonl").string()};
    none.missing = "no tokenizer here";
    expect_error([&] { train::train_lm(o, none); }, "text.jsonl line 1: text data needs a tokenizer: no tokenizer here");
  }
  {  // an output directory that exists without --resume or --force
    train::LmOptions o = f.lm_options("exists");
    fs::create_directories(o.out);
    write_text(fs::path(o.out) / "keep.txt", "x");
    expect_error([&] { train::train_lm(o, none); }, "already exists; pass --resume to continue its training or --force");
    // --force deletes only a directory of a training's files: keep.txt stays, and so does the directory
    o.force = true;
    o.steps = 1;
    expect_error([&] { train::train_lm(o, none); }, "holds keep.txt, which no specpress trainer writes; refusing");
    EXPECT_TRUE(fs::exists(fs::path(o.out) / "keep.txt"));
    fs::remove(fs::path(o.out) / "keep.txt");
    ::testing::internal::CaptureStderr();
    train::train_lm(o, none);  // into the now empty directory, then over its own output
    const std::string said = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(said.find("warning: --warmup 2 exceeds --steps 1: the learning rate reaches 0.5 of --lr at the last step "
                        "and never decays"), std::string::npos) << said;
    write_text(fs::path(o.out) / "model.safetensors.tmp.123", "an interrupted write");
    train::train_lm(o, none);
    EXPECT_TRUE(fs::exists(fs::path(o.out) / "model.safetensors"));
    EXPECT_FALSE(fs::exists(fs::path(o.out) / "model.safetensors.tmp.123"));
    write_text(fs::path(o.out) / "checkpoint" / "mine.txt", "x");  // a checkpoint directory is checked inside too
    expect_error([&] { train::train_lm(o, none); }, "holds checkpoint/mine.txt, which no specpress trainer writes");
    // --resume or --force on a directory with a model but no checkpoint (a model, not a training) is refused
    train::LmOptions r = f.lm_options("model-dir");
    fs::create_directories(r.out);
    write_text(fs::path(r.out) / "config.json", "{}");
    write_text(fs::path(r.out) / "model.safetensors", "weights");
    r.resume = true;
    expect_error([&] { train::train_lm(r, none); }, "--resume: " + r.out + " has no checkpoint to continue "
                 "(no checkpoint/state.json) but holds model.safetensors: a model, not a training's output");
    r.resume = false;
    r.force = true;
    expect_error([&] { train::train_lm(r, none); }, "--force: " + r.out + " holds model.safetensors but no checkpoint "
                 "directory: a model, not a training's output; refusing to delete it");
    EXPECT_EQ(io::read_text_file((fs::path(r.out) / "config.json").string()), "{}");
    EXPECT_EQ(io::read_text_file((fs::path(r.out) / "model.safetensors").string()), "weights");
    // --resume where a run stopped before its first checkpoint (only a tokenizer copy, say) starts at step 0; one
    // with another file in it is refused
    train::LmOptions e = f.lm_options("early-stop");
    fs::create_directories(e.out);
    write_text(fs::path(e.out) / "tokenizer.json", "{}");
    write_text(fs::path(e.out) / "notes.txt", "mine");
    e.resume = true;
    e.steps = 1;
    expect_error([&] { train::train_lm(e, none); }, "--resume: " + e.out + " has no checkpoint to continue "
                 "(no checkpoint/state.json) and holds notes.txt, which no specpress trainer writes");
    fs::remove(fs::path(e.out) / "notes.txt");
    EXPECT_EQ(train::train_lm(e, none).last_step, 1);
  }
  {  // --out may not be, or hold, one of the run's inputs, with --force or not
    train::DraftOptions d = f.draft_options("unused");
    d.out = f.target.string();
    d.force = true;
    expect_error([&] { train::train_draft(d, none); }, "is or holds --target " + f.target.string() + " (or a file it links to), an input");
    EXPECT_TRUE(fs::exists(f.config));
    train::LmOptions o = f.lm_options("unused");
    o.out = f.dir.path.string();
    o.force = true;
    expect_error([&] { train::train_lm(o, none); }, "is or holds --config " + f.config.string());
    EXPECT_TRUE(fs::exists(f.data));
  }
  {  // --force on the current directory (or one above it) is refused
    train::LmOptions o = f.lm_options("cwd");
    fs::create_directories(o.out);
    write_text(fs::path(o.out) / "config.json", "{}");
    const fs::path before = fs::current_path();
    fs::current_path(o.out);
    o.out = ".";
    o.force = true;
    expect_error([&] { train::train_lm(o, none); }, "--force: . is the current directory or one above it");
    fs::current_path(before);
    EXPECT_TRUE(fs::exists(f.dir.path / "cwd" / "config.json"));
  }
}

// A training's --out is locked while it runs (io::PathLock): a second run on it, --resume or --force, is refused before it
// reads or deletes anything, and the lock goes with the run (or the process). The lock is per open directory, so one
// held here stands for another process's.
TEST(TrainOutput, ARunningTrainingsDirectoryIsLocked) {
  Fixture f;
  train::TextCodec none;
  train::LmOptions o = f.lm_options("locked");
  o.steps = 1;
  train::train_lm(o, none);  // a training's output, which --force may delete
  ASSERT_TRUE(fs::exists(fs::path(o.out) / "model.safetensors"));
  const std::string in_use = "--out: " + o.out + " is in use by another specpress run (it holds the directory's lock)";
  {
    const io::PathLock running = io::PathLock::take(o.out, "--out", "held");
    ASSERT_TRUE(running.held());
    o.force = true;
    expect_error([&] { train::train_lm(o, none); }, in_use);
    EXPECT_TRUE(fs::exists(fs::path(o.out) / "model.safetensors")) << "--force deleted a running training's output";
    o.force = false, o.resume = true;
    expect_error([&] { train::train_lm(o, none); }, in_use);
  }
  o.resume = false, o.force = true;
  train::train_lm(o, none);  // free again once the lock's holder is gone
  {
    // a new directory is locked as it is made, and an existing one before --force deletes it; either stays locked
    // while the run's OutputDir lives, and is free after
    const std::string fresh = (f.dir.path / "fresh").string();
    train::OutputDir made = train::prepare_output_dir(fresh, false, false);
    EXPECT_TRUE(made.lock.held());
    expect_error([&] { (void)train::prepare_output_dir(fresh, true, false); },
                 "--out: " + fresh + " is in use by another specpress run");
    made.lock.release();
    train::OutputDir replaced = train::prepare_output_dir(o.out, false, true);
    EXPECT_TRUE(replaced.lock.held());
    expect_error([&] { (void)train::prepare_output_dir(o.out, true, false); }, in_use);
  }
  EXPECT_TRUE(io::PathLock::take(o.out, "--out", "held").held());
  expect_error([&] { (void)io::PathLock::take((f.dir.path / "missing").string(), "--out", "held"); },
               "--out: cannot open " + (f.dir.path / "missing").string() + " to lock it");
}

TEST(TrainCli, SubcommandsReportErrorsByFlag) {
  Fixture f;
  const fs::path out = f.dir.path / "cli-out";
  fs::create_directories(out);
  write_text(out / "x", "x");
  CommandResult r = run_specpress("train-draft --target " + f.target.string() + " --data " + f.data.string() + " --out " +
                                  out.string() + " --target-layer-ids 0,1");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--out: " + out.string() + " already exists"), std::string::npos) << r.err;
  r = run_specpress("train-lm --config " + f.config.string() + " --data " + f.data.string() + " --out " +
                    (f.dir.path / "lm").string() + " --steps 3 --batch 2 --seq-len 16");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("3/3"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("step 3 | loss"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("tok/s"), std::string::npos);
  EXPECT_NE(r.err.find("ETA"), std::string::npos);
  // --resume where nothing is saved yet (a job's first run of the command line it reruns) says it starts afresh
  r = run_specpress("train-lm --config " + f.config.string() + " --data " + f.data.string() + " --out " +
                    (f.dir.path / "lm-first").string() + " --steps 1 --batch 2 --seq-len 16 --resume");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("--resume: " + (f.dir.path / "lm-first").string() + " holds no checkpoint yet; starting at "
                       "step 0"), std::string::npos) << r.err;
}

// A chat record ending on an assistant turn is a prompt and its completion: the loss starts after the generation
// prompt of the turns before (train-draft's anchors, train-compressor's continuation), where that rendering is a prefix.
TEST(TrainData, ChatRecordsStartTheLossAtTheLastAnswer) {
  ScratchDir dir("train-chat");
  train::TextCodec codec;  // a template of one letter a role, one id a character; a system turn before a generation
  codec.encode = [](const std::string& text) { return std::vector<int64_t>(text.begin(), text.end()); };
  codec.chat = [](const train::TextCodec::Messages& messages, bool add_generation_prompt) {  // prompt renders apart
    std::string out;
    for (const auto& [role, content] : messages)
      out += (role == "system" && add_generation_prompt ? "S!" : role.substr(0, 1) + ":") + content + "|";
    return add_generation_prompt ? out + "a:" : out;
  };
  write_text(dir.path / "chat.jsonl",
             R"({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]})" "\n"
             R"({"messages": [{"role": "user", "content": "hi"}]})" "\n"
             R"({"messages": [{"role": "system", "content": "s"}, {"role": "assistant", "content": "x"}]})" "\n");
  const std::vector<train::Sequence> docs = train::read_documents({(dir.path / "chat.jsonl").string()}, codec, 128);
  ASSERT_EQ(docs.size(), 3u);
  EXPECT_EQ(std::string(docs[0].ids.begin(), docs[0].ids.end()), "u:hi|a:yo|");
  EXPECT_EQ(docs[0].loss_start, 7);  // after "u:hi|a:"
  EXPECT_EQ(docs[1].loss_start, 0);  // no answer: every token
  EXPECT_EQ(docs[2].loss_start, 0);  // "S!s|a:" is no prefix of "s:s|a:x|": every token
  // as prompts (on-policy, held-out) the same records leave their answer out
  const std::vector<std::vector<int64_t>> prompts = train::read_prompts({(dir.path / "chat.jsonl").string()}, codec,
                                                                        128);
  ASSERT_EQ(prompts.size(), 3u);
  EXPECT_EQ(std::string(prompts[0].begin(), prompts[0].end()), "u:hi|a:");
  EXPECT_EQ(std::string(prompts[1].begin(), prompts[1].end()), "u:hi|a:");
}

// A model directory's fingerprint: config.json whole, each .safetensors file by its size, header and 64 spans of
// 64 KiB spread over its tensors' bytes: an edit in a span or the header changes it, one between spans does not.
TEST(TrainData, ModelFingerprintsSampleTheWeights) {
  ScratchDir dir("fingerprint");
  write_text(dir.path / "config.json", "{\"hidden_size\": 8}");
  const std::string header = std::string("\x10\0\0\0\0\0\0\0", 8) + "{}              ";  // 16 bytes of JSON
  std::string bytes = header + std::string(8u << 20, '\0');
  const auto fingerprint = [&](const std::string& weights) {
    write_text(dir.path / "model.safetensors", weights);
    return train::model_fingerprints(dir.path.string());
  };
  const nlohmann::json base = fingerprint(bytes);
  ASSERT_EQ(base.size(), 2u);  // config.json and model.safetensors
  const size_t data = bytes.size() - header.size(), second = header.size() + (data - (64u << 10)) / 63;
  std::string edited = bytes;
  edited[second + 5] = 1;  // inside the second span
  EXPECT_NE(fingerprint(edited), base);
  edited = bytes;
  edited[12] = 'x';  // the header
  EXPECT_NE(fingerprint(edited), base);
  edited = bytes;
  edited[second - 7] = 1;  // between the first and second spans
  EXPECT_EQ(fingerprint(edited), base);
  EXPECT_NE(fingerprint(bytes + '\0'), base);  // the size
  EXPECT_EQ(fingerprint(bytes), base);
  EXPECT_EQ(train::model_digest(""), "");
}

// Records come one a line (.jsonl, .ndjson) or as one array (.json), whatever the extension's case; errors name the
// line or the element; a plain-text file that starts like JSON is read as text with a note saying so.
TEST(TrainData, RecordFilesByExtension) {
  ScratchDir dir("train-data");
  const std::string records = "{\"ids\": [1, 2, 3]}\n{\"ids\": [4, 5], \"loss_start\": 1}\n";
  write_text(dir.path / "upper.JSONL", records);
  write_text(dir.path / "array.json", "[{\"ids\": [1, 2, 3]}, {\"ids\": [4, 5], \"loss_start\": 1}]");
  for (const char* name : {"upper.JSONL", "array.json"}) {
    const std::vector<train::Sequence> docs = train::read_documents({(dir.path / name).string()}, {}, 8);
    ASSERT_EQ(docs.size(), 2u) << name;
    EXPECT_EQ(docs[1].ids, std::vector<int64_t>({4, 5})) << name;
    EXPECT_EQ(docs[1].loss_start, 1) << name;
  }
  EXPECT_EQ(train::read_prompts({(dir.path / "array.json").string()}, {}, 8).size(), 2u);
  write_text(dir.path / "object.json", "{\"ids\": [1, 2]}");
  expect_error([&] { train::read_documents({(dir.path / "object.json").string()}, {}, 8); },
               "object.json: expected a JSON array of records in a .json file");
  write_text(dir.path / "mixed.json", "[{\"ids\": [1]}, 3]");
  expect_error([&] { train::read_documents({(dir.path / "mixed.json").string()}, {}, 8); },
               "mixed.json element 1: expected a JSON object");
  write_text(dir.path / "bad-id.json", "[{\"ids\": [1]}, {\"ids\": [9]}]");
  expect_error([&] { train::read_prompts({(dir.path / "bad-id.json").string()}, {}, 8); },
               "bad-id.json element 1: token id 9 at index 0 is outside the vocabulary 0..7");
  write_text(dir.path / "huge-id.jsonl", "{\"ids\": [1, 18446744073709551615]}\n");  // not read as -1
  expect_error([&] { train::read_documents({(dir.path / "huge-id.jsonl").string()}, {}, 8); },
               "huge-id.jsonl line 1: token id 18446744073709551615 at index 1 is outside the vocabulary 0..7");
  train::TextCodec bytes;  // one id a byte, so that text reads without a tokenizer
  bytes.encode = [](const std::string& text) { return std::vector<int64_t>(text.size(), 1); };
  write_text(dir.path / "records.txt", records);
  ::testing::internal::CaptureStderr();
  const std::vector<train::Sequence> text = train::read_documents({(dir.path / "records.txt").string()}, bytes, 8);
  const std::string said = ::testing::internal::GetCapturedStderr();
  ASSERT_EQ(text.size(), 1u);
  EXPECT_EQ(text[0].ids.size(), records.size());
  EXPECT_NE(said.find("records.txt is read as plain text (its extension is not .jsonl, .ndjson or .json), though it "
                      "starts like JSON"), std::string::npos) << said;
}

TEST(TrainCli, TextAndChatDataUseTheTokenizer) {
  SPECPRESS_REQUIRE_SHARED();
  ScratchDir dir("train-text");
  TinyShape shape;
  shape.vocab = 151936;  // the real Qwen3 vocabulary, a very narrow model
  shape.hidden = 16;
  shape.intermediate = 16;
  shape.layers = 1;
  shape.heads = 2;
  shape.kv_heads = 1;
  nlohmann::json config = qwen3_config_json(shape, true);
  config["eos_token_id"] = 151645;
  write_json(dir.path / "config.json", config);
  write_text(dir.path / "data.jsonl",
             "{\"text\": \"Natalia sold 48 clips in April and half as many in May.\"}\n"
             "{\"messages\": [{\"role\": \"user\", \"content\": \"What is 2 + 3?\"}, "
             "{\"role\": \"assistant\", \"content\": \"2 + 3 = 5. The answer is 5.\"}]}\n");
  const std::string tokenizer = shared_dir() + "/data/qwen3-tokenizer";
  CommandResult r = run_specpress("train-lm --config " + (dir.path / "config.json").string() + " --data " +
                                  (dir.path / "data.jsonl").string() + " --tokenizer " + tokenizer + " --out " +
                                  (dir.path / "lm").string() + " --steps 2 --batch 1 --seq-len 16");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("2 documents"), std::string::npos) << r.err;
  EXPECT_TRUE(fs::exists(dir.path / "lm" / "tokenizer.json"));  // a complete HF directory
  // The same text without a tokenizer names the record and the missing file.
  r = run_specpress("train-lm --config " + (dir.path / "config.json").string() + " --data " +
                    (dir.path / "data.jsonl").string() + " --out " + (dir.path / "lm2").string());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("data.jsonl line 1: text data needs a tokenizer: pass --tokenizer DIR"), std::string::npos) << r.err;
  // a message the chat template refuses names the record it came from
  write_text(dir.path / "bad.jsonl",
             "{\"text\": \"fine\"}\n{\"messages\": [{\"role\": \"wizard\", \"content\": \"x\"}]}\n");
  r = run_specpress("train-lm --config " + (dir.path / "config.json").string() + " --data " +
                    (dir.path / "bad.jsonl").string() + " --tokenizer " + tokenizer + " --out " +
                    (dir.path / "lm3").string() + " --steps 2 --batch 1 --seq-len 16");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("bad.jsonl line 2: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("wizard"), std::string::npos) << r.err;
}

}  // namespace
