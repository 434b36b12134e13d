// test_compress.cpp — accepted-span KV compression with the training-free controls, on the golden
// tiny pair: no events means outputs bit-identical to the plain engine; compaction is exact (a
// compressed cache equals a cache built from the kept slots); positions and the draft context stay
// valid; each control holds the memory it promises; the fidelity replay's definitions.
#include <gtest/gtest.h>

#include <c10/core/InferenceMode.h>

#include "compress/fidelity.h"
#include "compress/kv_compressor.h"
#include "compress/span_plan.h"
#include "core/error.h"
#include "decode/generation.h"
#include "compress_fixtures.h"
#include "golden_pair.h"
#include "test_util.h"

using namespace specpress;
using namespace specpress::test;

namespace {

class Compress : public GoldenPair {
 protected:
  void SetUp() override {
    GoldenPair::SetUp();
    if (!IsSkipped()) run_ = golden_runs()[0];
  }
  compress::Policy policy(compress::Method m, int64_t window, int64_t merge = 0) {
    compress::Policy p;
    p.method = m;
    p.window = window;
    p.merge_tokens = merge;
    return p;
  }
  GoldenRun run_;
};

TEST_F(Compress, NoEventsMeansIdenticalOutputs) {
  decode::GenerationParams p;
  p.max_new_tokens = 64;
  p.stop_ids = run_.stop_ids;
  for (auto pol : {policy(compress::Method::kNone, 0), policy(compress::Method::kDrop, 1000),
                   policy(compress::Method::kMeanMerge, 1000)}) {
    compress::KVCompressor c(pol, *target_, static_cast<int64_t>(run_.prompt.size()));
    p.observer = &c;
    EXPECT_EQ(decode::generate_dflash(*target_, *draft_, run_.prompt, p).output_ids, run_.dflash_output);
    compress::KVCompressor c2(pol, *target_, static_cast<int64_t>(run_.prompt.size()));  // one per generation
    p.observer = &c2;
    EXPECT_EQ(decode::generate_plain(*target_, run_.prompt, p).output_ids, run_.ar_output);
    EXPECT_EQ(c.stats().events + c2.stats().events, 0);
  }
}

// Replays prompt + output span by span through a compressing cache and returns it.
model::KVCache replay(const model::Qwen3Model& t, compress::KVCompressor& c, const std::vector<int64_t>& traj, int64_t N,
                      int64_t span) {
  model::KVCache cache = t.make_cache(static_cast<int64_t>(traj.size()) + 1);
  c.on_cache_created(cache);
  t.forward(at::tensor(std::vector<int64_t>(traj.begin(), traj.begin() + N), at::kLong), 0, cache, {});
  for (int64_t pos = N; pos < static_cast<int64_t>(traj.size()); pos += span) {
    const int64_t n = std::min<int64_t>(span, static_cast<int64_t>(traj.size()) - pos);
    t.forward(at::tensor(std::vector<int64_t>(traj.begin() + pos, traj.begin() + pos + n), at::kLong), pos, cache, {});
    c.on_commit(cache, {pos, pos + n});
  }
  return cache;
}

TEST_F(Compress, CompactionEqualsACacheOfTheKeptSlots) {
  // One commit of the whole generated part, so every unit is compressed on the same uncompressed
  // cache: the result must be exactly the uncompressed K/V at the kept positions, and the next
  // token's logits must equal those computed over a cache assembled by hand from those slots.
  std::vector<int64_t> traj = run_.prompt;
  traj.insert(traj.end(), run_.ar_output.begin(), run_.ar_output.begin() + 40);
  const int64_t N = static_cast<int64_t>(run_.prompt.size()), T = static_cast<int64_t>(traj.size());
  model::KVCache full = target_->make_cache(T + 1);
  target_->forward(at::tensor(traj, at::kLong), 0, full, {});
  for (auto method : {compress::Method::kDrop, compress::Method::kKeepLast, compress::Method::kWindowOnly}) {
    compress::KVCompressor c(policy(method, 8, 5), *target_, N);
    model::KVCache cache = target_->make_cache(T + 1);
    c.on_cache_created(cache);
    target_->forward(at::tensor(traj, at::kLong), 0, cache, {});
    c.on_commit(cache, {N, T});
    ASSERT_LT(cache.length, T);  // units were compressed
    EXPECT_EQ(c.stats().events, 0) << "the stats count what the last forward used (none of this commit's units)";
    for (int64_t i = 1; i < cache.length; ++i) EXPECT_LT(cache.slot_positions[i - 1], cache.slot_positions[i]);
    EXPECT_EQ(cache.next_position(), T);
    std::vector<int64_t> kept(cache.slot_positions.begin(), cache.slot_positions.begin() + cache.length);
    if (method == compress::Method::kKeepLast) {  // 6 units of 5 tokens aged: each leaves its last token
      EXPECT_EQ(cache.length, N + 6 + 10);
      EXPECT_EQ(kept[N], N + 4);
    }
    at::Tensor idx = at::tensor(kept, at::kLong);
    EXPECT_TRUE(at::equal(cache.k.narrow(2, 0, cache.length), full.k.index_select(2, idx)));
    EXPECT_TRUE(at::equal(cache.v.narrow(2, 0, cache.length), full.v.index_select(2, idx)));
    model::KVCache manual = target_->make_cache(T + 1);
    manual.slot_positions.assign(manual.capacity(), 0);
    manual.k.narrow(2, 0, cache.length).copy_(full.k.index_select(2, idx));
    manual.v.narrow(2, 0, cache.length).copy_(full.v.index_select(2, idx));
    std::copy(kept.begin(), kept.end(), manual.slot_positions.begin());
    manual.length = cache.length;
    at::Tensor next = at::tensor(std::vector<int64_t>{run_.ar_output[40]}, at::kLong);
    at::Tensor a = target_->forward(next, T, cache, {}).logits;
    at::Tensor b = target_->forward(next, T, manual, {}).logits;
    EXPECT_TRUE(at::equal(a, b)) << compress::method_name(method);
    // and it differs from the uncompressed cache's prediction (the test can fail)
    at::Tensor u = target_->forward(next, T, full, {}).logits;
    EXPECT_GT((a - u).abs().max().item<double>(), 1e-4) << compress::method_name(method);
  }
}

TEST_F(Compress, MeanMergeOfOneTokenIsTheIdentity) {
  std::vector<int64_t> traj = run_.prompt;
  traj.insert(traj.end(), run_.ar_output.begin(), run_.ar_output.begin() + 30);
  const int64_t N = static_cast<int64_t>(run_.prompt.size()), T = static_cast<int64_t>(traj.size());
  compress::KVCompressor c(policy(compress::Method::kMeanMerge, 4), *target_, N);
  model::KVCache cache = replay(*target_, c, traj, N, 1);  // spans of one token: un-rotate, re-rotate, bias log 1
  EXPECT_GT(c.stats().events, 0);
  EXPECT_EQ(c.stats().slots_freed, 0);
  model::KVCache full = target_->make_cache(T + 1);
  target_->forward(at::tensor(traj, at::kLong), 0, full, {});
  EXPECT_LT((cache.k.narrow(2, 0, T) - full.k.narrow(2, 0, T)).abs().max().item<double>(), 1e-5);
  EXPECT_EQ(cache.key_bias.abs().max().item<double>(), 0.0);
}

TEST_F(Compress, EachControlHoldsItsPromisedMemory) {
  std::vector<int64_t> traj = run_.prompt;
  traj.insert(traj.end(), run_.ar_output.begin(), run_.ar_output.begin() + 60);
  const int64_t N = static_cast<int64_t>(run_.prompt.size());
  // spans of 4 tokens, window 16: units whose end <= 99 - 16 = 83 are compressed: positions 39..82 = 11 units
  const int64_t units = 11, raw = 60 - units * 4;
  struct Case {
    compress::Method method;
    int64_t slots;
  } cases[] = {{compress::Method::kDrop, N + raw},
               {compress::Method::kKeepLast, N + units + raw},
               {compress::Method::kMeanMerge, N + units + raw},
               {compress::Method::kTopAttention, N + units + raw},
               {compress::Method::kWindowOnly, N + units + raw}};
  for (const auto& cs : cases) {
    compress::KVCompressor c(policy(cs.method, 16), *target_, N);
    model::KVCache cache = replay(*target_, c, traj, N, 4);
    EXPECT_EQ(cache.length, cs.slots) << compress::method_name(cs.method);
    // the last commit aged a unit, which no forward has used: the counts leave it out, as positions and slots do
    EXPECT_EQ(c.stats().slots_freed, c.stats().positions - c.stats().slots) << compress::method_name(cs.method);
    // The stats describe the cache a forward used: one more token, which ages no further unit.
    const int64_t T = static_cast<int64_t>(traj.size());
    target_->forward(at::tensor(std::vector<int64_t>{run_.ar_output[60]}, at::kLong), T, cache, {});
    c.on_commit(cache, {T, T + 1});
    EXPECT_EQ(c.stats().slots, cs.slots + 1) << compress::method_name(cs.method);
    EXPECT_NEAR(c.stats().effective_ratio(), static_cast<double>(T + 1) / (cs.slots + 1), 1e-12);
    // ... and so do the counts: the slots freed are the positions the cache does not hold
    EXPECT_EQ(c.stats().slots_freed, c.stats().positions - c.stats().slots) << compress::method_name(cs.method);
    if (cs.method != compress::Method::kWindowOnly)
      EXPECT_EQ(c.stats().events, units) << compress::method_name(cs.method);
  }
  // merged units of m tokens regardless of span boundaries: 1-token spans, m = 8, window 16 -> 5 units
  compress::KVCompressor c(policy(compress::Method::kKeepLast, 16, 8), *target_, N);
  model::KVCache cache = replay(*target_, c, traj, N, 1);
  EXPECT_EQ(cache.length, N + 5 + (60 - 40));
}

TEST_F(Compress, DFlashWithCompressionKeepsTheDraftContextAndRuns) {
  decode::GenerationParams p;
  p.max_new_tokens = 64;
  p.stop_ids = run_.stop_ids;
  for (auto m : {compress::Method::kDrop, compress::Method::kKeepLast, compress::Method::kMeanMerge,
                 compress::Method::kTopAttention, compress::Method::kWindowOnly}) {
    compress::KVCompressor c(policy(m, 8), *target_, static_cast<int64_t>(run_.prompt.size()));
    p.observer = &c;
    // The loop checks draft_cache.length == start before every draft call and fails otherwise.
    decode::GenerationResult r = decode::generate_dflash(*target_, *draft_, run_.prompt, p);
    EXPECT_EQ(r.output_ids.size(), 64u) << compress::method_name(m);
    EXPECT_GT(c.stats().events, 0);
    EXPECT_GT(c.stats().effective_ratio(), 1.0);
  }
}

// Units of m tokens bound the target cache a generation allocates (KVCompressor::cache_slots): for every control, unit
// size, window and sinks (within and past the prompt), in the DFlash loop and in plain decoding, with no stop token so
// that each runs its whole length, the bounded cache gives the tokens a cache of every position gives, and from units
// of 2 on it is smaller. (A bound too small fails the run: a forward past the capacity is refused.)
TEST_F(Compress, UnitsBoundTheCacheAGenerationAllocates) {
  const int64_t N = static_cast<int64_t>(run_.prompt.size());
  struct Case {
    int64_t merge, window, sinks;
  };
  for (auto m : {compress::Method::kDrop, compress::Method::kKeepLast, compress::Method::kMeanMerge,
                 compress::Method::kTopAttention, compress::Method::kWindowOnly})
    for (auto [merge, window, sinks] : {Case{1, 1, 4}, Case{2, 5, 0}, Case{3, 1, 4}, Case{8, 7, N + 10}})
      for (bool dflash : {true, false}) {
        const std::string what = fmt::format("{} merge {} window {} sinks {} {}", compress::method_name(m), merge,
                                             window, sinks, dflash ? "dflash" : "plain");
        compress::Policy pol = policy(m, window, merge);
        pol.sinks = sinks;
        BoundedAndFull r;
        ASSERT_NO_THROW(r = generate_bounded_and_full(*target_, dflash ? draft_.get() : nullptr, run_.prompt, pol, 64))
            << what;
        EXPECT_EQ(r.bounded, r.full) << what;
        EXPECT_EQ(r.bounded.size(), 64u) << what;
        // window-only with units of one token evicts nothing: a slot a unit is every position
        if (m != compress::Method::kWindowOnly || merge > 1) EXPECT_GT(r.bounded_stats.events, 0) << what;
        EXPECT_EQ(r.full_stats.cache_capacity, N + 64 + (dflash ? draft_->config().block_size : 1)) << what;
        if (merge >= 2) {
          EXPECT_LT(r.bounded_stats.cache_capacity, r.full_stats.cache_capacity) << what;
          EXPECT_LT(r.bounded_stats.cache_bytes, r.full_stats.cache_bytes) << what;
        }
      }
}

// The same bound under chosen acceptance (drive_like_dflash): every draft rejected, every one accepted, alternating
// and pseudo-random, at blocks of 2 and 16, with a one-token prompt and the golden one, for every control: no forward
// goes past the bounded capacity (the reviewer's model put the tightest case, 2 slots spare, at keep-last with a
// one-token prompt, window 1, units of 5, blocks of 2 and every draft rejected).
TEST_F(Compress, UnitsBoundTheCacheWhateverTheDraftsAccept) {
  struct Case {
    int64_t merge, window, sinks;
  };
  const std::vector<int64_t> one = {run_.prompt[0]};
  for (auto m : {compress::Method::kDrop, compress::Method::kKeepLast, compress::Method::kMeanMerge,
                 compress::Method::kTopAttention, compress::Method::kWindowOnly})
    for (auto [merge, window, sinks] : {Case{5, 1, 0}, Case{2, 3, 4}, Case{8, 7, 12}})
      for (int64_t B : {2, 16})
        for (const std::vector<int64_t>* prompt : {&one, static_cast<const std::vector<int64_t>*>(&run_.prompt)})
          for (const auto& [pattern, accepted] : acceptance_patterns(B)) {
            const std::string what = fmt::format("{} merge {} window {} sinks {} block {} prompt {} {}",
                                                 compress::method_name(m), merge, window, sinks, B, prompt->size(),
                                                 pattern);
            compress::Policy pol = policy(m, window, merge);
            pol.sinks = sinks;
            compress::KVCompressor c(pol, *target_, static_cast<int64_t>(prompt->size()));
            ASSERT_NO_THROW(drive_like_dflash(*target_, c, *prompt, B, 48, accepted)) << what;
            EXPECT_LT(c.stats().cache_capacity, c.stats().cache_positions) << what;
          }
  // the spare depends on where the last unit falls: every length across one unit, at the tightest case above
  for (auto m : {compress::Method::kKeepLast, compress::Method::kDrop, compress::Method::kWindowOnly})
    for (int64_t n = 45; n < 50; ++n)
      for (const auto& [pattern, accepted] : acceptance_patterns(2)) {
        compress::Policy pol = policy(m, 1, 5);
        pol.sinks = 0;
        compress::KVCompressor c(pol, *target_, 1);
        ASSERT_NO_THROW(drive_like_dflash(*target_, c, one, 2, n, accepted))
            << compress::method_name(m) << " " << n << " tokens, " << pattern;
      }
}

// A rollback that drops a verify's last rows (its rejected draft tokens) takes back the attention mass they gave, so
// that top-attention ranks keys by the committed tokens' attention alone, as the fidelity replay counts it: 4 rows
// then a rollback to 2 leave the mass of a forward of those 2 rows, in a raw cache and in one whose slots a
// top-attention compressor has already merged (slots no longer positions). Other forwards keep no per-row shares.
TEST_F(Compress, RollbackTakesBackTheDroppedRowsAttentionMass) {
  c10::InferenceMode inference;
  const int64_t N = static_cast<int64_t>(run_.prompt.size());
  const auto& c = target_->config();
  const auto deep_copy = [](const model::KVCache& from) {
    model::KVCache to = from;
    to.k = from.k.clone(), to.v = from.v.clone(), to.received_mass = from.received_mass.clone();
    return to;
  };
  model::ForwardOptions verify;
  verify.may_roll_back = true;
  const auto check = [&](const model::KVCache& base, const std::string& what) {
    const int64_t P = base.next_position(), kept = base.length + 2;
    const std::vector<int64_t> rows = {run_.dflash_output[0], 5, 6, 7};
    model::KVCache verified = deep_copy(base);
    target_->forward(at::tensor(rows, at::kLong), P, verified, verify);
    ASSERT_TRUE(verified.last_rows_mass.defined()) << what;
    const at::Tensor before = verified.received_mass.narrow(2, 0, kept).clone();
    verified.rollback(P + 2);
    model::KVCache committed = deep_copy(base);
    target_->forward(at::tensor(std::vector<int64_t>(rows.begin(), rows.begin() + 2), at::kLong), P, committed, {});
    EXPECT_FALSE(committed.last_rows_mass.defined()) << what << ": a forward that is not a verify keeps no shares";
    const at::Tensor want = committed.received_mass.narrow(2, 0, kept);
    EXPECT_TRUE(at::allclose(verified.received_mass.narrow(2, 0, kept), want, 1e-5, 1e-6)) << what;
    EXPECT_FALSE(at::allclose(before, want, 1e-5, 1e-6)) << what << ": the dropped rows gave mass (not vacuous)";
    verified.rollback(P + 2);  // once: a second rollback takes nothing more
    EXPECT_TRUE(at::allclose(verified.received_mass.narrow(2, 0, kept), want, 1e-5, 1e-6)) << what;
  };
  model::KVCache raw = target_->make_cache(N + 8);
  raw.received_mass = at::zeros({c.num_layers, c.num_kv_heads, N + 8}, at::kFloat);
  target_->forward(at::tensor(run_.prompt, at::kLong), 0, raw, {});
  check(raw, "raw cache");
  // the prompt and 24 generated tokens through a top-attention compressor (window 4, units of 4): merged slots
  std::vector<int64_t> traj = run_.prompt;
  traj.insert(traj.end(), run_.dflash_output.begin(), run_.dflash_output.begin() + 24);
  compress::KVCompressor compressor(policy(compress::Method::kTopAttention, 4, 4), *target_, N);
  model::KVCache merged = replay(*target_, compressor, traj, N, 3);
  ASSERT_LT(merged.length, static_cast<int64_t>(traj.size())) << "nothing was merged";
  check(merged, "compressed cache");
}

TEST_F(Compress, FidelityReplayDefinitions) {
  decode::GenerationParams p;
  p.max_new_tokens = 64;
  p.record_steps = true;
  decode::GenerationResult u = decode::generate_dflash(*target_, *draft_, run_.prompt, p);
  compress::FidelityResult none = compress::evaluate_fidelity(*target_, run_.prompt, u.output_ids, u.acceptance_lengths,
                                                              policy(compress::Method::kDrop, 1000));
  EXPECT_EQ(none.stats.events, 0);
  EXPECT_EQ(none.pairs(), 0);  // nothing compared: no score, not a perfect one
  EXPECT_TRUE(std::isnan(none.mean_top1()) && std::isnan(none.mean_kl()) && std::isnan(none.mean_tv()));
  EXPECT_NEAR(none.perplexity_delta(), 0.0, 1e-6);  // span-wise vs one-shot forward rounding
  compress::FidelityResult drop = compress::evaluate_fidelity(*target_, run_.prompt, u.output_ids, u.acceptance_lengths,
                                                              policy(compress::Method::kDrop, 8));
  EXPECT_GT(drop.stats.events, 0);
  int64_t pairs = 0;
  for (int64_t n : drop.count) pairs += n;
  EXPECT_GT(pairs, 0);
  EXPECT_EQ(drop.pairs(), pairs);
  EXPECT_GE(drop.mean_top1(), 0.0);
  EXPECT_LE(drop.mean_top1(), 1.0);
  EXPECT_GE(drop.mean_kl(), -1e-6);
  EXPECT_EQ(drop.scored_tokens, 64);
  EXPECT_THROW(compress::evaluate_fidelity(*target_, run_.prompt, u.output_ids, {1, 2}, policy(compress::Method::kDrop, 8)),
               Error);
}

TEST(CompressPolicy, BadInput) {
  EXPECT_THROW(compress::parse_method("zip", "--compress"), Error);
  try {
    compress::parse_method("zip", "--compress");
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--compress: unknown compression method 'zip'"), std::string::npos);
  }
  compress::Policy p;
  p.window = -1;
  EXPECT_THROW(compress::validate(p), Error);
  p.method = compress::Method::kDrop;
  p.window = 0;  // the newest token has no KV entry before its forward: a window of 0 would compress it
  try {
    compress::validate(p);
    ADD_FAILURE() << "window 0 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--compress-window: must be >= 1"), std::string::npos) << e.what();
  }
}

// The first `sinks` positions never join a unit, also where they run past the prompt.
TEST(CompressPolicy, SinksPastThePromptStayRaw) {
  compress::Policy p;
  p.method = compress::Method::kDrop;
  p.window = 4;
  const std::vector<int64_t> spans(40, 1);  // plain decoding: one token a commit
  for (const int64_t sinks : {0, 4, 10, 16, 1000}) {
    p.sinks = sinks;
    const compress::CompressionPlan plan = compress::plan_compression(p, 10, spans, 50);
    ASSERT_FALSE(sinks < 50 && plan.events.empty()) << sinks;
    for (const compress::CompressionEvent& e : plan.events) EXPECT_GE(e.unit.begin, std::max<int64_t>(10, sinks));
    if (sinks <= 10) EXPECT_EQ(plan.events.front().unit.begin, 10) << sinks;
    if (sinks == 16) EXPECT_EQ(plan.events.front().unit.begin, 16);
    if (sinks == 1000) EXPECT_TRUE(plan.events.empty());
  }
}

}  // namespace
