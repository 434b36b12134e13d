// fidelity.h — how far a compressed cache moves the target from its uncompressed self, measured
// teacher-forced on the uncompressed trajectory (compression-design.md §7.7): the trajectory is
// replayed span by span exactly as DFlash committed it, the policy compresses as it would online,
// and every row is compared with the uncompressed target's row: top-1 agreement, KL(p_u || p_c) and
// total variation at offsets +1..+max_offset after each compression event, and the perplexity of the
// trajectory's own tokens under both caches.
#pragma once
#include <cstdint>
#include <vector>

#include "compress/kv_compressor.h"
#include "model/qwen3.h"

namespace specpress::compress {

struct FidelityResult {
  int64_t max_offset = 64;
  std::vector<int64_t> count;          // index d-1: (event, row) pairs at offset d
  std::vector<double> top1, kl, tv;    // sums; divide by count (see mean_*)
  double nll_uncompressed = 0, nll_compressed = 0;  // summed over scored tokens
  int64_t scored_tokens = 0;
  CompressionStats stats;
  int64_t pairs() const;  // (event, row) pairs compared, over every offset: 0 where no compression event happened
  // pooled over the pairs (a pair per event and offset, so a row after several events counts for each); NaN where
  // pairs() is 0: nothing measured, not a perfect score
  double mean_top1() const;
  double mean_kl() const;
  double mean_tv() const;
  double perplexity_delta() const;  // ppl_compressed / ppl_uncompressed - 1
  void merge(const FidelityResult& other);
};

// `prompt` + `output` is the uncompressed trajectory; `span_lengths` are the committed run lengths
// that produced `output` (a DFlash run's acceptance_lengths, or all 1 for plain decoding).
FidelityResult evaluate_fidelity(const model::Qwen3Model& target, const std::vector<int64_t>& prompt,
                                 const std::vector<int64_t>& output, const std::vector<int64_t>& span_lengths,
                                 const Policy& policy, int64_t max_offset = 64);

}  // namespace specpress::compress
