// kv_compressor.h — applies a compression Policy to the target's KV cache as generation commits
// tokens: it tracks committed spans, and every span (or m-token unit) that ages out of the raw window
// is replaced in place by at most one slot (the training-free controls of compression-design.md §7.3)
// and the cache is compacted. Later tokens keep their absolute positions (keys are cached after RoPE);
// the DFlash draft's own context cache is never touched, so it stays complete.
#pragma once
#include <cstdint>
#include <deque>
#include <vector>

#include "compress/policy.h"
#include "decode/generation.h"
#include "model/qwen3.h"

namespace specpress::compress {

struct CompressionStats {
  int64_t events = 0;             // units replaced
  int64_t tokens_compressed = 0;  // raw tokens those units held
  int64_t slots_freed = 0;
  int64_t peak_slots = 0;         // high-water mark of committed slots
  double overhead_ms = 0;         // time spent compressing
  std::vector<int64_t> event_positions;  // next_position() right after each event
  int64_t positions = 0;          // committed positions at the last commit
  int64_t slots = 0;              // slots holding them
  // Slots an uncompressed cache would hold / slots this one holds.
  double effective_ratio() const { return slots > 0 ? static_cast<double>(positions) / static_cast<double>(slots) : 1.0; }
};

class KVCompressor : public decode::CommitObserver {
 public:
  // `prompt_tokens` positions are the prompt; `rope` is the target's table (mean-merge re-rotates).
  KVCompressor(const Policy& policy, const model::Qwen3Model& target, int64_t prompt_tokens);
  void on_cache_created(model::KVCache& cache) override;
  void on_commit(model::KVCache& cache, int64_t begin, int64_t end) override;
  const CompressionStats& stats() const { return stats_; }
  const Policy& policy() const { return policy_; }
  // Bytes of one target KV slot (all layers, K and V) in the cache's dtype.
  static int64_t slot_bytes(const model::KVCache& cache);

 private:
  struct Unit {
    int64_t begin, end;  // positions [begin, end), all raw
  };
  void compress_unit(model::KVCache& cache, const Unit& unit);
  void evict_to_budget(model::KVCache& cache, int64_t budget);
  // Replaces slots [s0, s0 + n) by `keep` slots already written at s0 .. s0+keep-1, moving the rest left.
  void compact(model::KVCache& cache, int64_t s0, int64_t n, int64_t keep);
  void ensure_slot_positions(model::KVCache& cache);

  Policy policy_;
  const model::Qwen3Model* target_;
  int64_t prompt_tokens_;
  std::deque<Unit> raw_units_;   // committed generated spans still raw, oldest first
  int64_t pending_begin_ = -1;   // merge_tokens > 0: start of the current partial unit
  int64_t units_done_ = 0;       // for window-only: units a 1-slot policy would have made
  int64_t tokens_in_units_ = 0;
  CompressionStats stats_;
};

}  // namespace specpress::compress
