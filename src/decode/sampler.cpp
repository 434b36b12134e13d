// sampler.cpp — see sampler.h.
#include "decode/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <unordered_map>

#include "core/error.h"

namespace specpress::decode {

void validate(const SamplingParams& p) {
  if (!(p.temperature >= 0.0) || !std::isfinite(p.temperature))
    fail("--temp: must be >= 0 and finite, found {}", p.temperature);
  if (p.top_k < 0) fail("--top-k: must be >= 0 (0 = off), found {}", p.top_k);
  if (!(p.top_p > 0.0 && p.top_p <= 1.0)) fail("--top-p: must be in (0, 1], found {}", p.top_p);
  if (!(p.min_p >= 0.0 && p.min_p < 1.0)) fail("--min-p: must be in [0, 1), found {}", p.min_p);
  if (!(p.repeat_penalty > 0.0) || !std::isfinite(p.repeat_penalty))
    fail("--repeat-penalty: must be > 0 and finite (1 = off), found {}", p.repeat_penalty);
  if (!(p.frequency_penalty >= -2.0 && p.frequency_penalty <= 2.0))
    fail("--frequency-penalty: must be in [-2, 2] (0 = off), found {}", p.frequency_penalty);
  if (!(p.presence_penalty >= -2.0 && p.presence_penalty <= 2.0))
    fail("--presence-penalty: must be in [-2, 2] (0 = off), found {}", p.presence_penalty);
  if (p.repeat_last_n < -1)
    fail("--repeat-last-n: must be >= 0 tokens (0 = off) or -1 (the whole context), found {}", p.repeat_last_n);
  for (const auto& [id, bias] : p.logit_bias) {
    if (id < 0) fail("--logit-bias: token id {} is negative", id);
    if (std::isnan(bias) || bias == std::numeric_limits<double>::infinity())
      fail("--logit-bias: the bias of token {} must be a finite number or -inf (never), found {}", id, bias);
  }
}

nlohmann::ordered_json penalties_json(const SamplingParams& p) {
  return {{"repeat_penalty", p.repeat_penalty},
          {"repeat_last_n", p.repeat_last_n},
          {"presence_penalty", p.presence_penalty},
          {"frequency_penalty", p.frequency_penalty}};
}

nlohmann::ordered_json logit_bias_json(const SamplingParams& p) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const auto& [id, bias] : p.logit_bias)
    out.push_back(std::isinf(bias) ? nlohmann::ordered_json{id, false} : nlohmann::ordered_json{id, bias});
  return out;
}

std::vector<int64_t> argmax_rows(const at::Tensor& logits) {
  at::Tensor idx = logits.argmax(-1).to(at::kCPU).contiguous();
  const int64_t* p = idx.data_ptr<int64_t>();
  return std::vector<int64_t>(p, p + idx.numel());
}

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) { validate(params_); }

void Sampler::begin(const std::vector<int64_t>& prompt) {
  window_.clear();
  counts_.clear();
  accept(prompt.data(), prompt.size());
}

void Sampler::accept(const int64_t* tokens, size_t n) {
  if (!params_.penalized()) return;
  for (size_t i = 0; i < n; ++i) {
    window_.push_back(tokens[i]);
    ++counts_[tokens[i]];
    if (params_.repeat_last_n > 0 && window_.size() > static_cast<size_t>(params_.repeat_last_n)) {
      const int64_t oldest = window_.front();
      window_.pop_front();
      if (--counts_[oldest] == 0) counts_.erase(oldest);
    }
  }
}

at::Tensor Sampler::adjusted(const at::Tensor& logits, const std::vector<int64_t>& block) const {
  if (!params_.adjusts_logits()) return logits;
  const int64_t rows = logits.size(0);
  at::Tensor out = logits.clone();
  if (!params_.logit_bias.empty()) {
    // every row alike, a token named twice gets both biases (as llama.cpp adds them)
    std::vector<int64_t> ids;
    std::vector<float> biases;
    for (const auto& [id, bias] : params_.logit_bias) {
      if (id >= out.size(1)) fail("--logit-bias: token id {} is outside the vocabulary 0..{}", id, out.size(1) - 1);
      ids.push_back(id), biases.push_back(static_cast<float>(bias));
    }
    const at::Tensor index = at::tensor(ids, at::kLong).to(out.device());
    const at::Tensor add = at::tensor(biases, at::kFloat).to(out.device()).to(out.scalar_type());
    out.index_add_(1, index, add.unsqueeze(0).expand({rows, static_cast<int64_t>(ids.size())}).contiguous());
  }
  if (!params_.penalized()) return out;
  if (rows > 1 && static_cast<int64_t>(block.size()) < rows)
    fail("internal: {} verify rows penalised with a block of {} tokens", rows, block.size());
  // (row, token, count) for every token in every row's window; row r's window is the last repeat_last_n tokens of
  // the accepted context followed by block[1..r], so each row adds a block token and may drop the oldest one
  std::vector<int64_t> entries;  // rows, then tokens, then counts: one copy to the device
  std::vector<int64_t> row_of, token_of, count_of;
  std::unordered_map<int64_t, int64_t> row_counts = counts_;  // row 0's window: the accepted one
  const size_t n = params_.repeat_last_n < 0 ? SIZE_MAX : static_cast<size_t>(params_.repeat_last_n);
  size_t dropped = 0;  // tokens that left the window from the front of (window_, block[1..])
  for (int64_t r = 0; r < rows; ++r) {
    if (r > 0) {
      ++row_counts[block[r]];
      if (window_.size() + static_cast<size_t>(r) - dropped > n) {
        const int64_t oldest = dropped < window_.size() ? window_[dropped] : block[1 + dropped - window_.size()];
        ++dropped;
        if (--row_counts[oldest] == 0) row_counts.erase(oldest);
      }
    }
    for (const auto& [id, c] : row_counts) row_of.push_back(r), token_of.push_back(id), count_of.push_back(c);
  }
  const int64_t K = static_cast<int64_t>(row_of.size());
  if (K == 0) return out;
  entries.reserve(3 * K);
  for (const auto* v : {&row_of, &token_of, &count_of}) entries.insert(entries.end(), v->begin(), v->end());
  const at::Tensor e = at::tensor(entries, at::kLong).view({3, K}).to(out.device());
  const at::Tensor row_index = e[0], token_index = e[1], c = e[2].to(out.scalar_type());
  const at::Tensor v = out.index({row_index, token_index});
  const double rp = params_.repeat_penalty;
  // as llama.cpp's penalties sampler, in the logits' float type
  out.index_put_({row_index, token_index},
                 at::where(v <= 0, v * rp, v / rp) - (c * params_.frequency_penalty + params_.presence_penalty));
  return out;
}

at::Tensor Sampler::probabilities(const at::Tensor& raw_logits, const std::vector<int64_t>& block) const {
  const double neg_inf = -std::numeric_limits<double>::infinity();
  at::Tensor scores = adjusted(raw_logits, block).to(at::kDouble);
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

std::vector<int64_t> Sampler::sample(const at::Tensor& logits, const std::vector<int64_t>& block) {
  if (params_.greedy()) return argmax_rows(adjusted(logits, block));
  at::Tensor probs = probabilities(logits, block);
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
