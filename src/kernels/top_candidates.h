// top_candidates.h — each row's `count` largest scores on the device, torch-free: the sampler's candidates for top-k,
// top-p and min-p (decode::Sampler::candidate_nuclei). ATen's topk took 0.13 ms of GPU time for a 16-row verify block
// of 151,936 scores on an H100, most of a sampled step's sampler time; this takes three launches over the row.
// 1. Every slice of a row counts its scores into 2048 bins of their order key's top 11 bits (a row-wide histogram).
// 2. Every slice finds the bin where the row's count from the top reaches `count`, and gathers the scores above that
//    bin and those in it (at most kTopCandidatesBoundaryCap of the latter) as 64-bit keys: the order key, then the
//    id reversed, so that keys are distinct and equal scores order by id ascending.
// 3. One block a row sorts the gathered keys (bitonic, in shared memory), writes the first `count` scores and ids,
//    and clears the row's histogram and counters for the next call (they start zeroed).
// The order is total: score descending, equal scores by id ascending; NaN first (as topk puts it), -0 as +0. A row
// whose boundary bin holds more keys than the cap (thousands of scores within a quarter of a binade of the count-th)
// gets NaN as its first score, which the sampler treats as a row for its exact fallback.
// Reference twin: a stable descending sort of the row (ATen), its first `count` entries. Tests: Kernels.TopCandidates*.
#pragma once
#include <cuda_runtime.h>

namespace specpress::kernels {

constexpr int kTopCandidatesMaxCount = 256;         // the most candidates a row
constexpr int kTopCandidatesBoundaryCap = 3840;     // keys of the boundary bin a row may hold (+ count: 4096 sorted)
constexpr int kTopCandidatesBins = 2048;            // the histogram's bins a row
constexpr int kTopCandidatesKeys = kTopCandidatesMaxCount + kTopCandidatesBoundaryCap;  // scratch keys a row

struct TopCandidatesArgs {
  const float* scores = nullptr;  // [rows, vocab], rows `row_stride` floats apart
  long long row_stride = 0;
  int rows = 0;
  int vocab = 0;
  int count = 0;                            // 1 .. min(vocab, kTopCandidatesMaxCount)
  unsigned* histogram = nullptr;            // scratch [rows, kTopCandidatesBins], zeroed before the first call
  unsigned* counters = nullptr;             // scratch [rows, 2] (keys above the boundary bin, keys in it), zeroed
  unsigned long long* keys = nullptr;       // scratch [rows, kTopCandidatesKeys]
  double* out = nullptr;                    // [rows, 2 * count]: the scores, then their ids, each in fp64
};

cudaError_t top_candidates(const TopCandidatesArgs& args, cudaStream_t stream);

}  // namespace specpress::kernels
