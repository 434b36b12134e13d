// temperature_draw.h — sampling at a plain temperature (no top-k, top-p or min-p) on the device, torch-free: each
// row's token by the inverse CDF over softmax(logits / T) in fp64, the first token whose cumulative mass exceeds
// u * total in id order. Without it the fast path ran the sampler's whole-vocabulary transform in ATen (a dozen
// launches, fp64 softmax and cumsum over 151,936 tokens: 0.19 ms a row, 0.47 ms a 16-row block on an H100).
// Two launches: every block of a row's `splits` blocks reduces its slice to (max, sum of exp(x - max)); then one
// block a row merges the slices in order, finds the slice the target falls in and scans it. The same partials give
// the row's normaliser over the whole vocabulary, which the sampler's top-p without top-k needs (row sums).
// Reference twin: decode::Sampler's whole-vocabulary path (probabilities_of, cumsum, searchsorted); the picks agree
// up to fp64 rounding at a CDF boundary (the sums are added in another order). Tests: Kernels.TemperatureDraw*.
#pragma once
#include <cuda_runtime.h>

namespace specpress::kernels {

// The most slices a row is cut into (the partials' second dimension).
constexpr int kTemperatureDrawMaxSplits = 64;

struct TemperatureDrawArgs {
  const float* logits = nullptr;  // [rows, vocab], row-contiguous, rows `row_stride` floats apart
  long long row_stride = 0;
  int rows = 0;
  int vocab = 0;
  double temperature = 1.0;          // > 0; x = double(logit) / temperature
  const double* uniforms = nullptr;  // [rows], each in [0, 1)
  double* partials = nullptr;        // scratch [rows, kTemperatureDrawMaxSplits, 2]
  long long* picks = nullptr;        // out [rows]: the token, or -1 for a row with a NaN or no finite maximum
};

// The slices a row of `vocab` tokens is cut into.
int temperature_draw_splits(int vocab);

cudaError_t temperature_draw(const TemperatureDrawArgs& args, cudaStream_t stream);

// The sampler's top-p normaliser without top-k: sums[r] = the sum over row r of exp(x - max x), x = logit / T, from
// the same slice partials (the uniforms and picks unused); NaN for a row with a NaN or no finite maximum, as the
// ATen twin's (s - max).exp().sum() gives there.
cudaError_t temperature_row_sums(const TemperatureDrawArgs& args, double* sums, cudaStream_t stream);

}  // namespace specpress::kernels
