// compress_fixtures.h — a compressed generation run twice, with the cache KVCompressor::cache_slots bounds and with a
// cache of every position, for the tests of that bound (test_compress: the controls; test_beacon: the beacon).
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "compress/kv_compressor.h"
#include "decode/generation.h"
#include "model/dflash_draft.h"
#include "model/qwen3.h"

namespace specpress::test {

// A compressor with a cache of every position (the observer's default).
class FullCacheCompressor : public compress::KVCompressor {
 public:
  using KVCompressor::KVCompressor;
  int64_t cache_slots(int64_t positions, int64_t max_commit) override {
    KVCompressor::cache_slots(positions, max_commit);  // its stats' cache_positions
    return positions;
  }
};

struct BoundedAndFull {
  std::vector<int64_t> bounded, full;  // the output ids
  compress::CompressionStats bounded_stats, full_stats;
};

// `n` tokens without a stop (so each run goes its whole length) from DFlash (`draft` given) or plain decoding, under
// `policy`; throws where the bounded cache is too small (a forward past the capacity is refused).
inline BoundedAndFull generate_bounded_and_full(const model::Qwen3Model& target, const model::DFlashDraft* draft,
                                                const std::vector<int64_t>& prompt, const compress::Policy& policy,
                                                int64_t n) {
  const int64_t N = static_cast<int64_t>(prompt.size());
  compress::KVCompressor bounded(policy, target, N);
  FullCacheCompressor full(policy, target, N);
  decode::GenerationParams p;
  p.max_new_tokens = n;
  auto run = [&](compress::KVCompressor& c) {
    p.observer = &c;
    return draft != nullptr ? decode::generate_dflash(target, *draft, prompt, p).output_ids
                            : decode::generate_plain(target, prompt, p).output_ids;
  };
  BoundedAndFull r;
  r.bounded = run(bounded);
  r.full = run(full);
  r.bounded_stats = bounded.stats();
  r.full_stats = full.stats();
  return r;
}

// Drives a compressor's cache as generate_dflash does (the prefill, then verify forwards of B rows, a rollback to the
// committed length and the commit), with the drafts accepted at each step chosen by `accepted(step)` (0..B-1), so
// that the bound's worst cases (every draft rejected, every one accepted, alternating) run whatever a draft would
// propose; the block's ids are arbitrary. Throws where a forward would go past the bounded capacity. Returns the
// fewest slots any forward left free (its B rows and fused latents counted).
inline int64_t drive_like_dflash(const model::Qwen3Model& target, compress::KVCompressor& c,
                                 const std::vector<int64_t>& prompt, int64_t B, int64_t n_new,
                                 const std::function<int64_t(int64_t)>& accepted) {
  const int64_t N = static_cast<int64_t>(prompt.size()), max_length = N + n_new;
  const int64_t headroom = c.reserve(B);
  model::KVCache cache = target.make_cache(c.cache_slots(max_length + B, B), headroom);
  c.on_cache_created(cache);
  target.forward(at::tensor(prompt, at::kLong).to(target.device()), 0, cache, {});
  model::ForwardOptions verify{/*all_logits=*/true, {}, false};
  verify.may_roll_back = true;
  decode::CommittedSpan span;
  int64_t spare = cache.capacity();
  for (int64_t step = 0, start = N; start < max_length; ++step) {
    const model::LatentRows* latents = c.pending_latents();
    spare = std::min(spare, cache.capacity() - cache.length - B - (latents != nullptr ? latents->count() : 0));
    std::vector<int64_t> block(B);
    for (int64_t i = 0; i < B; ++i) block[i] = 1 + (start + 7 * i) % 97;
    decode::observed_forward(target, at::tensor(block, at::kLong).to(target.device()), start, cache, verify, &c,
                             &span.features);
    const int64_t a = std::min(accepted(step), B - 1);
    start += a + 1;
    cache.rollback(start);
    span.begin = start - (a + 1);
    span.end = start;
    span.ids.assign(block.begin(), block.begin() + a + 1);
    if (span.features.defined()) span.features = span.features.narrow(0, 0, a + 1);
    c.on_commit(cache, span);
  }
  return spare;
}

// The acceptance patterns drive_like_dflash is run with: every draft rejected, every one accepted, alternating, and a
// fixed pseudo-random sequence.
inline std::vector<std::pair<const char*, std::function<int64_t(int64_t)>>> acceptance_patterns(int64_t B) {
  return {{"all rejected", [](int64_t) { return int64_t{0}; }},
          {"all accepted", [B](int64_t) { return B - 1; }},
          {"alternating", [B](int64_t s) { return s % 2 == 0 ? int64_t{0} : B - 1; }},
          {"pseudo-random", [B](int64_t s) { return (s * 7919 + 13) % B; }}};
}

}  // namespace specpress::test
