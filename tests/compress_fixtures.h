// compress_fixtures.h — a compressed generation run twice, with the cache KVCompressor::cache_slots bounds and with a
// cache of every position, for the tests of that bound (test_compress: the controls; test_beacon: the beacon).
#pragma once
#include <cstdint>
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

}  // namespace specpress::test
