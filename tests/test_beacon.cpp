// test_beacon.cpp — the learned beacon compressor on the golden tiny pair: the trainer's parallel
// masked layout computes exactly what the online engine computes (fused latents in the next forward,
// raw span freed, positions kept), no events means outputs identical to the plain engine, the DFlash
// loop keeps a valid draft context, and malformed checkpoints fail naming the file and field/tensor.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <numeric>
#include <set>

#include "compress/beacon.h"
#include "compress/fidelity.h"
#include "compress/kv_compressor.h"
#include "core/error.h"
#include "decode/generation.h"
#include "compress_fixtures.h"
#include "golden_pair.h"
#include "io/checkpoint.h"
#include "test_util.h"
#include "train/beacon_layout.h"
#include "train/sequence_forward.h"

using namespace specpress;
using namespace specpress::test;
namespace fs = std::filesystem;

namespace {

class Beacon : public GoldenPair {
 protected:
  void SetUp() override {
    GoldenPair::SetUp();
    if (IsSkipped()) return;
    run_ = golden_runs()[0];
    config_.feature_layers = draft_->config().target_layer_ids;
    config_.target_hidden = target_->config().hidden_size;
    config_.target_layers = target_->config().num_layers;
    config_.target_vocab = target_->config().vocab_size;
    config_.width = 32;
    config_.max_span = 16;
    config_.embed_rms = compress::embedding_rms(target_->weights().embed_tokens);
    weights_ = compress::init_beacon_weights(config_, 5);
    weights_.gate.fill_(1.0);  // latents far from the mean-embedding start, so a wrong mask shows
    auto named = compress::beacon_named(weights_);
    for (auto& [name, t] : named) t = t.to(target_->device());
    weights_ = compress::beacon_from_named(named);
  }
  // Greedy generation of `n` tokens with the golden run's stop ids.
  decode::GenerationParams params(int64_t n) const {
    decode::GenerationParams p;
    p.max_new_tokens = n;
    p.stop_ids = run_.stop_ids;
    return p;
  }
  compress::Policy policy(int64_t window, int64_t merge = 0) const {
    compress::Policy p;
    p.method = compress::Method::kBeacon;
    p.window = window;
    p.merge_tokens = merge;
    p.beacon = std::make_shared<const compress::BeaconCompressor>(config_, weights_);
    return p;
  }
  GoldenRun run_;
  compress::BeaconConfig config_;
  compress::BeaconWeights weights_;
};

TEST_F(Beacon, TrainingLayoutEqualsTheCompressedEngine) {
  std::vector<int64_t> traj = run_.prompt;
  traj.insert(traj.end(), run_.ar_output.begin(), run_.ar_output.end());
  const int64_t N = static_cast<int64_t>(run_.prompt.size()), T = static_cast<int64_t>(traj.size());
  const std::vector<int64_t> pattern = {3, 1, 5, 2, 4, 1, 1, 6};
  std::vector<int64_t> spans;
  for (int64_t covered = 0, i = 0; covered < T - N; ++i) {
    spans.push_back(pattern[i % pattern.size()]);
    covered += spans.back();
  }
  const at::Device device = target_->device();
  for (int64_t merge : {0, 4}) {
    const compress::Policy pol = policy(6, merge);
    // Online: the loops' protocol span by span (observed_forward fuses pending latents).
    compress::KVCompressor c(pol, *target_, N);
    model::KVCache cache = target_->make_cache(T + 1);
    c.on_cache_created(cache);
    const int64_t D = config_.feature_dim();
    at::Tensor features = at::zeros({T, D}, at::TensorOptions().device(device));
    std::vector<at::Tensor> online;
    online.push_back(target_->forward(at::tensor(std::vector<int64_t>(traj.begin(), traj.begin() + N), at::kLong).to(device),
                                      0, cache, {}).logits);
    decode::CommittedSpan span;
    int64_t pos = N;
    for (int64_t len : spans) {
      const int64_t n = std::min(len, T - pos);
      at::Tensor ids = at::tensor(std::vector<int64_t>(traj.begin() + pos, traj.begin() + pos + n), at::kLong).to(device);
      online.push_back(
          decode::observed_forward(*target_, ids, pos, cache, {true, {}, false}, &c, &span.features).logits);
      features.narrow(0, pos, n).copy_(span.features);
      span.begin = pos;
      span.end = pos + n;
      span.ids.assign(traj.begin() + pos, traj.begin() + pos + n);
      c.on_commit(cache, span);
      pos += n;
    }
    at::Tensor online_logits = at::cat(online);  // rows N-1 .. T-1
    ASSERT_GT(c.stats().events, 3) << "merge " << merge;
    for (int64_t i = 1; i < cache.length; ++i) ASSERT_LT(cache.slot_positions[i - 1], cache.slot_positions[i]);
    EXPECT_EQ(cache.next_position(), T);
    EXPECT_EQ(cache.length, T - c.stats().slots_freed);

    // Parallel: one masked forward with a latent row per event, fed the same features.
    compress::CompressionPlan plan = compress::plan_compression(pol, N, spans, T);
    train::BeaconLayout layout = train::make_beacon_layout(plan, device);
    at::Tensor ids = at::tensor(traj, at::kLong).to(device);
    at::Tensor latents = train::layout_latents(config_, weights_, *target_, layout, ids, features);
    at::Tensor hidden = train::layout_forward(*target_, layout, ids, latents, {}, true).hidden;
    at::Tensor parallel = target_->lm_head_logits(hidden.narrow(0, N - 1, T - N + 1));
    EXPECT_LT((parallel - online_logits).abs().max().item<double>(), 2e-4) << "merge " << merge;
    // The compression changed the predictions (this comparison can fail).
    model::KVCache full = target_->make_cache(T + 1);
    at::Tensor uncompressed = target_->forward(ids, 0, full, {true, {}, false}).logits.narrow(0, N - 1, T - N + 1);
    EXPECT_GT((uncompressed - online_logits).abs().max().item<double>(), 1e-2) << "merge " << merge;
    // Refining the uncompressed taps reaches the online features once every latent generation is covered.
    model::KVCache full_taps_cache = target_->make_cache(T + 1);
    at::Tensor teacher_taps = target_->forward(ids, 0, full_taps_cache, {true, config_.feature_layers, false}).taps;
    std::set<int64_t> generations;
    for (const auto& ev : plan.events) generations.insert(ev.forward);
    at::Tensor refined = train::refine_features(config_, weights_, *target_, layout, ids, teacher_taps,
                                                static_cast<int64_t>(generations.size()) + 1);
    auto generated = [&](const at::Tensor& t) { return t.narrow(0, N, T - N); };  // the prompt is never tapped online
    EXPECT_LT((generated(refined) - generated(features)).abs().max().item<double>(), 2e-4) << "merge " << merge;
    EXPECT_GT((generated(teacher_taps) - generated(features)).abs().max().item<double>(), 1e-2) << "merge " << merge;
    // The layout's loss rows are exactly the rows that see a latent (from the first event's forward on).
    const int64_t first = plan.events.front().forward;
    EXPECT_EQ(layout.loss_rows.size(0),
              std::count_if(plan.forward_of.begin(), plan.forward_of.end(), [&](int64_t f) { return f >= first; }));
  }
}

TEST_F(Beacon, NoEventsMeansIdenticalOutputs) {
  decode::GenerationParams p = params(64);
  compress::KVCompressor c(policy(1000), *target_, static_cast<int64_t>(run_.prompt.size()));
  p.observer = &c;
  EXPECT_EQ(decode::generate_dflash(*target_, *draft_, run_.prompt, p).output_ids, run_.dflash_output);
  compress::KVCompressor c2(policy(1000), *target_, static_cast<int64_t>(run_.prompt.size()));
  p.observer = &c2;
  EXPECT_EQ(decode::generate_plain(*target_, run_.prompt, p).output_ids, run_.ar_output);
  EXPECT_EQ(c.stats().events + c2.stats().events, 0);
}

TEST_F(Beacon, DflashRunsOnTheCompressedCacheWithTheDraftContextIntact) {
  decode::GenerationParams p = params(64);
  compress::KVCompressor c(policy(8), *target_, static_cast<int64_t>(run_.prompt.size()));
  p.observer = &c;
  // generate_dflash checks after every draft call that the draft context holds every committed position.
  decode::GenerationResult r = decode::generate_dflash(*target_, *draft_, run_.prompt, p);
  EXPECT_GT(c.stats().events, 0);
  EXPECT_GT(c.stats().effective_ratio(), 1.2);
  EXPECT_LT(c.stats().slots, c.stats().positions);
  EXPECT_EQ(c.stats().positions - c.stats().slots, c.stats().slots_freed);
  EXPECT_FALSE(r.output_ids.empty());
  // The fidelity replay runs the same protocol and reports its events.
  compress::FidelityResult f = compress::evaluate_fidelity(*target_, run_.prompt, run_.dflash_output,
                                                           run_.acceptance_lengths, policy(8));
  EXPECT_GT(f.stats.events, 0);
  EXPECT_GT(f.count[0], 0);
}

// The beacon's units stay raw until the next forward fuses their latents, so its cache bound holds one commit's more
// raw tokens, less a slot (KVCompressor::cache_slots): with it, the DFlash loop and plain decoding give the tokens a
// cache of every position gives, and from units of 2 on the cache is smaller.
TEST_F(Beacon, UnitsBoundTheCacheAGenerationAllocates) {
  for (auto [merge, window] : {std::pair<int64_t, int64_t>{1, 1}, {2, 5}, {3, 1}, {8, 7}})
    for (bool dflash : {true, false}) {
      const std::string what = fmt::format("merge {} window {} {}", merge, window, dflash ? "dflash" : "plain");
      BoundedAndFull r;
      ASSERT_NO_THROW(r = generate_bounded_and_full(*target_, dflash ? draft_.get() : nullptr, run_.prompt,
                                                    policy(window, merge), 64))
          << what;
      EXPECT_EQ(r.bounded, r.full) << what;
      EXPECT_GT(r.bounded_stats.events, 0) << what;
      if (merge >= 2) EXPECT_LT(r.bounded_stats.cache_capacity, r.full_stats.cache_capacity) << what;
    }
}

// The same bound under chosen acceptance (drive_like_dflash): every draft rejected, every one accepted, alternating
// and pseudo-random, at blocks of 1 (plain decoding's commits), 2 and 16, with a one-token prompt and the golden one:
// no forward, latents fused in it included, goes past the bounded capacity; from units of 2 on, that capacity (the
// fused latents' headroom in it) stays under the positions a cache of every position holds. The tightest forward
// leaves one slot free (a sweep of units 2-8, windows 1-7, blocks 1-16, 2,880 runs: units of 5, window 1, blocks of
// 1, a one-token prompt), so a bound 2 slots smaller fails here.
TEST_F(Beacon, UnitsBoundTheCacheWhateverTheDraftsAccept) {
  const std::vector<int64_t> one = {run_.prompt[0]};
  const auto drive = [&](const std::vector<int64_t>& prompt, int64_t merge, int64_t window, int64_t B, int64_t n,
                         const char* pattern, const std::function<int64_t(int64_t)>& accepted) {
    const std::string what = fmt::format("merge {} window {} block {} prompt {} {} tokens {}", merge, window, B,
                                         prompt.size(), n, pattern);
    compress::KVCompressor c(policy(window, merge), *target_, static_cast<int64_t>(prompt.size()));
    int64_t spare = -1;
    EXPECT_NO_THROW(spare = drive_like_dflash(*target_, c, prompt, B, n, accepted)) << what;
    EXPECT_GT(c.stats().events, 0) << what;
    EXPECT_LT(c.stats().cache_capacity, c.stats().cache_positions) << what;
    return spare;
  };
  for (int64_t merge : {2, 5, 8})
    for (int64_t window : {1, 7})
      for (int64_t B : {1, 2, 16})
        for (const std::vector<int64_t>* prompt : {&one, static_cast<const std::vector<int64_t>*>(&run_.prompt)})
          for (const auto& [pattern, accepted] : acceptance_patterns(B)) {
            drive(*prompt, merge, window, B, B == 16 ? 128 : 48, pattern, accepted);
            if (B == 1) break;  // a block of one accepts nothing whatever the pattern
          }
  int64_t fewest = std::numeric_limits<int64_t>::max();
  for (int64_t n = 40; n < 45; ++n)  // every length across one unit at the tightest case
    fewest = std::min(fewest, drive(one, 5, 1, 1, n, "", [](int64_t) { return int64_t{0}; }));
  EXPECT_EQ(fewest, 1);
}

// Records the span features the loop hands to a compressor (what the online engine tapped).
class RecordingObserver : public decode::CommitObserver {
 public:
  explicit RecordingObserver(compress::KVCompressor& inner) : inner_(inner) {}
  int64_t reserve(int64_t max_commit) override { return inner_.reserve(max_commit); }
  void on_cache_created(model::KVCache& cache) override {
    inner_.on_cache_created(cache);
    features = at::zeros({cache.capacity(), 0});
  }
  const std::vector<int64_t>& feature_layers() const override { return inner_.feature_layers(); }
  const model::LatentRows* pending_latents() const override { return inner_.pending_latents(); }
  void after_forward(model::KVCache& cache) override { inner_.after_forward(cache); }
  void on_commit(model::KVCache& cache, const decode::CommittedSpan& span) override {
    if (features.size(1) == 0) features = at::zeros({features.size(0), span.features.size(1)}, span.features.options());
    features.narrow(0, span.begin, span.end - span.begin).copy_(span.features);
    inner_.on_commit(cache, span);
  }
  at::Tensor features;  // [capacity, D], rows by position

 private:
  compress::KVCompressor& inner_;
};

// The real DFlash loop (drafts rejected and rolled back, several units fused into one verify forward)
// computes what the layout computes: the span features it tapped at every committed position equal the
// layout's (refined until exact), and it committed the layout's greedy tokens.
TEST_F(Beacon, DflashLoopMatchesTheLayout) {
  decode::GenerationParams p = params(64);
  const compress::Policy pol = policy(4);
  compress::KVCompressor c(pol, *target_, static_cast<int64_t>(run_.prompt.size()));
  RecordingObserver recorder(c);
  p.observer = &recorder;
  decode::GenerationResult r = decode::generate_dflash(*target_, *draft_, run_.prompt, p);
  ASSERT_GT(c.stats().events, 3);
  std::vector<int64_t> traj = run_.prompt;
  traj.insert(traj.end(), r.output_ids.begin(), r.output_ids.end());
  const int64_t N = static_cast<int64_t>(run_.prompt.size()), T = static_cast<int64_t>(traj.size());
  compress::CompressionPlan plan = compress::plan_compression(pol, N, r.acceptance_lengths, T);
  std::map<int64_t, int64_t> per_forward;
  for (const auto& ev : plan.events) ++per_forward[ev.forward];
  int64_t most = 0;
  for (const auto& [f, n] : per_forward) most = std::max(most, n);
  EXPECT_GT(most, 1) << "no verify forward fused more than one latent";
  const at::Device device = target_->device();
  at::Tensor ids = at::tensor(traj, at::kLong).to(device);
  train::BeaconLayout layout = train::make_beacon_layout(plan, device);
  model::KVCache full = target_->make_cache(T);
  at::Tensor taps = target_->forward(ids, 0, full, {true, config_.feature_layers, false}).taps;
  at::Tensor features = train::refine_features(config_, weights_, *target_, layout, ids, taps,
                                               static_cast<int64_t>(per_forward.size()) + 1);
  // The loop commits the last bonus token without a forward of its own: compare the positions it tapped.
  const int64_t tapped = std::accumulate(r.acceptance_lengths.begin(), r.acceptance_lengths.end(), int64_t{0});
  const int64_t n = std::min(tapped, T - N);
  at::Tensor online = recorder.features.narrow(0, N, n);
  EXPECT_LT((features.narrow(0, N, n) - online).abs().max().item<double>(), 2e-4);
  EXPECT_GT((taps.narrow(0, N, n) - online).abs().max().item<double>(), 1e-2);  // compression mattered
  at::Tensor latents = train::layout_latents(config_, weights_, *target_, layout, ids, features);
  at::Tensor hidden = train::layout_forward(*target_, layout, ids, latents, {}, true).hidden;
  at::Tensor greedy = target_->lm_head_logits(hidden.narrow(0, N - 1, T - N)).argmax(-1).to(at::kCPU);
  for (int64_t i = 0; i < T - N; ++i) EXPECT_EQ(greedy[i].item<int64_t>(), traj[N + i]) << "position " << N + i;
}

// A DFlash run that ends on its bonus token outputs one token more than its verify spans cover: the
// plan and the fidelity replay treat it as a closing span (train-compressor met this on real runs).
TEST_F(Beacon, TrajectoryEndingOnABonusTokenIsOneMoreSpan) {
  const int64_t N = static_cast<int64_t>(run_.prompt.size());
  const std::vector<int64_t> output(run_.ar_output.begin(), run_.ar_output.begin() + 40);
  const std::vector<int64_t> spans = {5, 7, 3, 9, 4, 6, 5};  // 39 of 40
  compress::CompressionPlan plan = compress::plan_compression(policy(8), N, spans, N + 40);
  EXPECT_EQ(plan.forward_of.back(), 8);
  EXPECT_EQ(compress::spans_covering(spans, 40).size(), spans.size() + 1);
  compress::FidelityResult f = compress::evaluate_fidelity(*target_, run_.prompt, output, spans, policy(8));
  EXPECT_EQ(f.scored_tokens, 40);
  EXPECT_GT(f.stats.events, 0);
  // an empty continuation (e.g. a trajectory file whose prompt is all of it) replays to nothing
  compress::FidelityResult none = compress::evaluate_fidelity(*target_, run_.prompt, {}, {}, policy(8));
  EXPECT_EQ(none.scored_tokens, 0);
  EXPECT_EQ(none.stats.events, 0);
  try {
    compress::spans_covering(spans, 41);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("spans cover 39 of 41 generated tokens"), std::string::npos) << e.what();
  }
}

// A fused forward writes its latents before their raw units are freed: the loops and the replay
// reserve the room (one commit of n positions ages at most n units). Tight cases: a replay whose last
// forward carries a latent with nothing freed before, and plain decoding with 1-token units.
TEST_F(Beacon, FusedLatentsHaveRoomInTheCache) {
  const std::vector<int64_t> output(run_.ar_output.begin(), run_.ar_output.begin() + 13);
  compress::FidelityResult f = compress::evaluate_fidelity(*target_, run_.prompt, output, {3, 8, 2}, policy(8));
  EXPECT_EQ(f.stats.events, 1);
  compress::FidelityResult ones =
      compress::evaluate_fidelity(*target_, run_.prompt, output, std::vector<int64_t>(13, 1), policy(2, 1));
  EXPECT_GT(ones.stats.events, 5);
  decode::GenerationParams p = params(40);
  compress::KVCompressor c(policy(4, 1), *target_, static_cast<int64_t>(run_.prompt.size()));
  p.observer = &c;
  EXPECT_EQ(decode::generate_plain(*target_, run_.prompt, p).output_ids.size(), 40u);
  EXPECT_GT(c.stats().events, 30);
  // The feature ring holds window + largest unit + one commit rows, not the whole context.
  EXPECT_EQ(c.stats().feature_buffer_bytes, (4 + 1 + 1 + 1) * config_.feature_dim() * 4);
}

class BeaconCheckpoint : public Beacon {
 protected:
  std::string save(const std::string& name) {
    const std::string dir = (dir_.path / name).string();
    compress::save_beacon(dir, config_, weights_);
    return dir;
  }
  void expect_load_error(const std::string& dir, const std::string& message) {
    try {
      compress::BeaconCompressor::load(dir, *target_);
      ADD_FAILURE() << "no error; expected one containing: " << message;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << "error was: " << e.what();
    }
  }
  void edit_config(const std::string& dir, const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json j = nlohmann::json::parse(std::ifstream(dir + "/compressor.json"));
    edit(j);
    std::ofstream(dir + "/compressor.json") << j.dump();
  }
  void rewrite_tensors(const std::string& dir, const std::function<void(std::vector<std::pair<std::string, at::Tensor>>&)>& edit) {
    auto named = compress::beacon_named(weights_);
    for (auto& [n, t] : named) t = t.to(at::kCPU);
    edit(named);
    io::save_safetensors(dir + "/compressor.safetensors", named);
  }
  ScratchDir dir_{"beacon"};
};

TEST_F(BeaconCheckpoint, RoundTripAndMalformedCheckpoints) {
  {
    auto loaded = compress::BeaconCompressor::load(save("good"), *target_);
    EXPECT_EQ(loaded->config().feature_layers, config_.feature_layers);
    EXPECT_TRUE(at::equal(loaded->weights().mlp_out.to(at::kCPU), weights_.mlp_out.to(at::kCPU)));
    const compress::Policy p = compress::resolve_compress((dir_.path / "good").string(), "--compress", compress::Policy{}, *target_);
    EXPECT_EQ(p.method, compress::Method::kBeacon);
  }
  expect_load_error((dir_.path / "absent").string(), "not a directory");
  {
    const std::string d = save("no-config");
    fs::remove(d + "/compressor.json");
    expect_load_error(d, "no compressor.json");
  }
  {
    const std::string d = save("no-weights");
    fs::remove(d + "/compressor.safetensors");
    expect_load_error(d, "no compressor.safetensors");
  }
  {
    const std::string d = save("type");
    edit_config(d, [](nlohmann::json& j) { j["compressor_type"] = "c3"; });
    expect_load_error(d, "field 'compressor_type' must be \"beacon\"");
  }
  {
    const std::string d = save("layer");
    edit_config(d, [](nlohmann::json& j) { j["feature_layers"] = {0, 99}; });
    expect_load_error(d, "field 'feature_layers' names layer 99");
  }
  {
    const std::string d = save("hidden");
    edit_config(d, [](nlohmann::json& j) { j["target_hidden_size"] = 7; });
    expect_load_error(d, "trained for a target with hidden 7");
  }
  {
    const std::string d = save("width");
    edit_config(d, [](nlohmann::json& j) { j["width"] = "wide"; });
    expect_load_error(d, "width");
  }
  {
    const std::string d = save("missing-field");
    edit_config(d, [](nlohmann::json& j) { j.erase("embed_rms"); });
    expect_load_error(d, "embed_rms");
  }
  {
    const std::string d = save("shape");
    rewrite_tensors(d, [](auto& named) { named[0].second = at::zeros({3, 3}); });
    expect_load_error(d, "proj_in.weight");
  }
  {
    const std::string d = save("missing-tensor");
    rewrite_tensors(d, [](auto& named) { named.pop_back(); });
    expect_load_error(d, "tensor 'gate' is missing");
  }
  {
    const std::string d = save("nan");
    rewrite_tensors(d, [](auto& named) { named[6].second = at::full_like(named[6].second, NAN); });
    expect_load_error(d, "tensor 'base' holds NaN");
  }
  {
    const std::string d = save("extra");
    rewrite_tensors(d, [](auto& named) { named.emplace_back("stray", at::zeros({2})); });
    expect_load_error(d, "stray");
  }
  {
    const std::string d = save("garbage");
    std::ofstream(d + "/compressor.safetensors") << "not a safetensors file";
    expect_load_error(d, "compressor.safetensors");
  }
  try {
    compress::resolve_compress("no-such-method", "--compress", compress::Policy{}, *target_);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--compress: unknown compression method 'no-such-method'"), std::string::npos) << e.what();
  }
}

}  // namespace
