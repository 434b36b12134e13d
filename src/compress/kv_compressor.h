// kv_compressor.h — applies a compression Policy to the target's KV cache as generation commits
// tokens: it tracks committed spans (span_plan.h), and every span (or m-token unit) that ages out of
// the raw window is replaced in place by at most one slot and the cache is compacted. The training-free
// controls (compression-design.md §7.3) rewrite the cache at once; the learned beacon turns the unit's
// features into a latent embedding that the loop fuses into its next target forward, after which the
// latent's K/V take the unit's place. Later tokens keep their absolute positions (keys are cached after
// RoPE); the DFlash draft's own context cache is never touched, so it stays complete.
#pragma once
#include <cstdint>
#include <vector>

#include "compress/policy.h"
#include "compress/span_plan.h"
#include "decode/generation.h"
#include "model/qwen3.h"

namespace specpress::compress {

struct CompressionStats {
  // events, tokens_compressed, slots_freed and overhead_ms count what the cache held at the last forward (as positions
  // and slots below): a control method's compression at the last commit, which no forward used, is not counted, as a
  // beacon's latents queued then are not (event_positions lists every commit that aged units, the last's included).
  int64_t events = 0;             // units replaced
  int64_t tokens_compressed = 0;  // raw tokens those units held
  int64_t slots_freed = 0;
  int64_t peak_slots = 0;         // high-water mark of slots after a forward
  double overhead_ms = 0;         // time spent compressing
  std::vector<int64_t> event_positions;  // next_position() at each commit that aged units (a beacon
                                         // latent takes effect in the forward after it)
  int64_t feature_buffer_bytes = 0;      // beacon: span features kept for raw units (not KV, but memory)
  // The cache as the last forward left it (before the compression its commit triggers, which no
  // forward has used yet): committed positions and the slots holding them. The same point for every
  // method, so memory comparisons are fair (a beacon latent exists only from the next forward on).
  int64_t positions = 0;
  int64_t slots = 0;
  // The target cache the loop allocated for this generation (cache_slots() + the fused latents' headroom): its slots,
  // and its bytes with the policy's per-slot scores (mean-merge's key bias, top-attention's received mass) and the
  // beacon's feature ring. Its K/V alone are cache_capacity x slot_bytes().
  int64_t cache_capacity = 0;
  int64_t cache_bytes = 0;
  int64_t cache_positions = 0;  // the slots the loop would allocate uncompressed (what it asked cache_slots for)
  int64_t kv_bytes_per_slot = 0;  // slot_bytes() of that cache
  // Slots an uncompressed cache would hold / slots this one holds.
  double effective_ratio() const { return slots > 0 ? static_cast<double>(positions) / static_cast<double>(slots) : 1.0; }
};

class KVCompressor : public decode::CommitObserver {
 public:
  // `prompt_tokens` positions are the prompt (never compressed); `target` gives mean-merge its RoPE
  // table and the beacon its token embeddings.
  KVCompressor(const Policy& policy, const model::Qwen3Model& target, int64_t prompt_tokens);
  // Beacon: one commit of n positions ages at most n units, each fused as one extra row.
  int64_t reserve(int64_t max_commit) override;
  // Units of m >= 1 tokens bound the slots a generation ever holds (see kv_compressor.cpp); else `positions`.
  int64_t cache_slots(int64_t positions, int64_t max_commit) override;
  void on_cache_created(model::KVCache& cache) override;
  const std::vector<int64_t>& feature_layers() const override;
  const model::LatentRows* pending_latents() const override;
  void after_forward(model::KVCache& cache) override;
  void on_commit(model::KVCache& cache, const decode::CommittedSpan& span) override;
  const CompressionStats& stats() const { return stats_; }
  const Policy& policy() const { return policy_; }
  // Bytes of one target KV slot (all layers, K and V) in the cache's dtype.
  static int64_t slot_bytes(const model::KVCache& cache);

 private:
  // The slot positions and what the policy keeps per slot (mean-merge's key bias, top-attention's scores, the
  // beacon's feature ring), for the cache `cache`.
  void make_policy_buffers(model::KVCache& cache);
  void compress_unit(model::KVCache& cache, const Unit& unit);
  void queue_beacons(model::KVCache& cache, const std::vector<Unit>& units);
  void evict_to_budget(model::KVCache& cache, int64_t budget);
  // Replaces slots [s0, s0 + n) by `keep` slots already written at s0 .. s0+keep-1, moving the rest left.
  void compact(model::KVCache& cache, int64_t s0, int64_t n, int64_t keep);
  void ensure_slot_positions(model::KVCache& cache);

  Policy policy_;
  const model::Qwen3Model* target_;
  UnitTracker tracker_;
  int64_t units_done_ = 0;       // for window-only: units a 1-slot policy would have made
  int64_t tokens_in_units_ = 0;
  // Beacon: features and ids of the committed positions a unit may still need, in a ring of rows
  // indexed by position % ring_ (window + the largest unit + one commit), and the latents waiting for
  // the next forward with the units they replace.
  int64_t max_commit_ = 0;  // from reserve(); 0: the ring covers the whole cache
  int64_t ring_ = 0;
  at::Tensor feature_rows_;  // [ring_, D] in the cache dtype
  at::Tensor id_rows_;       // int64 [ring_] on the cache device
  model::LatentRows pending_;  // each latent with its unit's slot range (hidden_slots)
  CompressionStats stats_;
  // events, tokens_compressed, slots_freed and overhead_ms as they happen; stats_ takes them at each commit, before
  // its compression
  struct {
    int64_t events = 0, tokens_compressed = 0, slots_freed = 0;
    double overhead_ms = 0;
  } done_;
};

}  // namespace specpress::compress
