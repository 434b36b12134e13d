// sampler.cpp — see sampler.h.
#include "decode/sampler.h"

#include <cmath>
#include <limits>

#include "core/error.h"

namespace specpress::decode {

void validate(const SamplingParams& p) {
  if (!(p.temperature >= 0.0) || !std::isfinite(p.temperature))
    fail("--temp: must be >= 0 and finite, found {}", p.temperature);
  if (p.top_k < 0) fail("--top-k: must be >= 0 (0 = off), found {}", p.top_k);
  if (!(p.top_p > 0.0 && p.top_p <= 1.0)) fail("--top-p: must be in (0, 1], found {}", p.top_p);
  if (!(p.min_p >= 0.0 && p.min_p < 1.0)) fail("--min-p: must be in [0, 1), found {}", p.min_p);
}

std::vector<int64_t> argmax_rows(const at::Tensor& logits) {
  at::Tensor idx = logits.argmax(-1).to(at::kCPU).contiguous();
  const int64_t* p = idx.data_ptr<int64_t>();
  return std::vector<int64_t>(p, p + idx.numel());
}

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) { validate(params_); }

at::Tensor Sampler::probabilities(const at::Tensor& logits) const {
  const double neg_inf = -std::numeric_limits<double>::infinity();
  at::Tensor scores = logits.to(at::kDouble);
  if (params_.greedy()) {
    at::Tensor idx = scores.argmax(-1, /*keepdim=*/true);
    return at::zeros_like(scores).scatter_(-1, idx, 1.0);
  }
  scores = scores / params_.temperature;
  const int64_t V = scores.size(-1);
  if (params_.top_k > 0 && params_.top_k < V) {
    at::Tensor kth = std::get<0>(scores.topk(params_.top_k, -1)).narrow(-1, params_.top_k - 1, 1);
    scores = scores.masked_fill(scores < kth, neg_inf);
  }
  if (params_.top_p < 1.0) {
    // Drop the low tail whose total mass is <= 1 - top_p; keep at least the most likely token.
    auto [sorted, order] = scores.sort(-1, /*descending=*/false);
    at::Tensor cum = sorted.softmax(-1).cumsum(-1);
    at::Tensor remove_sorted = cum <= (1.0 - params_.top_p);
    remove_sorted.narrow(-1, V - 1, 1).fill_(false);
    at::Tensor remove = at::zeros_like(remove_sorted).scatter_(-1, order, remove_sorted);
    scores = scores.masked_fill(remove, neg_inf);
  }
  if (params_.min_p > 0.0) {
    at::Tensor probs = scores.softmax(-1);
    at::Tensor top = std::get<0>(probs.max(-1, /*keepdim=*/true));
    scores = scores.masked_fill(probs < top * params_.min_p, neg_inf);
  }
  return scores.softmax(-1);
}

std::vector<int64_t> Sampler::sample(const at::Tensor& logits) {
  if (params_.greedy()) return argmax_rows(logits);
  at::Tensor probs = probabilities(logits);
  const int64_t rows = probs.size(0), V = probs.size(1);
  at::Tensor cdf = probs.cumsum(-1);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  std::vector<double> u(rows);
  for (auto& x : u) x = uniform(rng_);
  at::Tensor targets = at::tensor(u, at::TensorOptions().dtype(at::kDouble)).to(cdf.device()).unsqueeze(1) *
                       cdf.narrow(1, V - 1, 1);
  // First index whose cumulative mass exceeds u * total: the inverse CDF. Zero-probability tokens
  // have cdf equal to their predecessor and are never chosen.
  at::Tensor idx = at::searchsorted(cdf.contiguous(), targets.contiguous(), /*out_int32=*/false, /*right=*/true)
                       .clamp_max(V - 1)
                       .squeeze(1)
                       .to(at::kCPU);
  std::vector<int64_t> out(idx.data_ptr<int64_t>(), idx.data_ptr<int64_t>() + rows);
  // Guard the u*total == total rounding edge: step back to the last token with mass.
  for (int64_t r = 0; r < rows; ++r) {
    if (probs[r][out[r]].item<double>() == 0.0) {
      at::Tensor nz = probs[r].nonzero();
      out[r] = nz[nz.size(0) - 1][0].item<int64_t>();
    }
  }
  return out;
}

}  // namespace specpress::decode
