// sampler.h — token selection for plain and speculative decoding. Greedy (argmax, ties to the lowest
// id) when temperature < 1e-5, else temperature -> top-k -> top-p -> min-p (transformers' warper order)
// and inverse-CDF sampling with a seeded host RNG, so CPU and CUDA draw the same stream for the same
// logits. Every verify row gets exactly the transform plain decoding applies.
#pragma once
#include <cstdint>
#include <random>
#include <vector>

#include <ATen/ATen.h>

namespace specpress::decode {

struct SamplingParams {
  double temperature = 0.0;  // 0 = greedy
  int64_t top_k = 0;         // 0 = off
  double top_p = 1.0;        // 1 = off
  double min_p = 0.0;        // 0 = off
  uint64_t seed = 0;
  bool greedy() const { return temperature < 1e-5; }
};

// Validates ranges; the error names the flag (--temp, --top-k, --top-p, --min-p).
void validate(const SamplingParams& params);

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);
  // logits: fp32 [rows, V]. Returns one token per row, rows sampled independently.
  std::vector<int64_t> sample(const at::Tensor& logits);
  // The distribution sample() draws from (fp64 [rows, V]); for tests and diagnostics.
  at::Tensor probabilities(const at::Tensor& logits) const;
  const SamplingParams& params() const { return params_; }

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
};

// Argmax per row of fp32 logits [rows, V], ties to the lowest index.
std::vector<int64_t> argmax_rows(const at::Tensor& logits);

}  // namespace specpress::decode
