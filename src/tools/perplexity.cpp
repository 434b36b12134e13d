// perplexity.cpp — see perplexity.h.
#include "tools/perplexity.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "decode/logprobs.h"

namespace specpress::tools {
namespace {

// The mean of xs and its standard error.
std::pair<double, double> mean_and_stderr(const std::vector<double>& xs) {
  const double n = static_cast<double>(xs.size());
  double sum = 0, sum_sq = 0;
  for (double x : xs) sum += x, sum_sq += x * x;
  const double mean = sum / n;
  const double variance = std::max(0.0, sum_sq / n - mean * mean);
  return {mean, n > 1 ? std::sqrt(variance / (n - 1)) : 0.0};
}

// Appends a 1-D tensor's values, times `sign`, to `out` (one copy to the host).
void append(std::vector<double>& out, const at::Tensor& values, double sign = 1.0) {
  const at::Tensor host = values.to(at::kCPU, at::kDouble).contiguous();
  const double* v = host.data_ptr<double>();
  for (int64_t i = 0; i < host.numel(); ++i) out.push_back(sign * v[i]);
}

}  // namespace

PerplexityResult perplexity(const model::Qwen3Model& target, const std::vector<int64_t>& tokens, int64_t n_ctx,
                            int64_t max_chunks, const std::function<void(int64_t, double)>& on_chunk,
                            const model::Qwen3Model* base, int64_t piece) {
  const int64_t max_positions = target.config().max_position_embeddings;
  if (n_ctx < 4) fail("-c/--ctx-size: {} is too small to score anything (at least 4)", n_ctx);
  if (n_ctx > max_positions) fail("-c/--ctx-size: {} exceeds the model's max_position_embeddings {}", n_ctx, max_positions);
  if (max_chunks < -1) fail("--chunks: must be >= 0 (0 or -1: all), got {}", max_chunks);
  const int64_t n_tokens = static_cast<int64_t>(tokens.size());
  if (n_tokens < n_ctx)
    fail("the text has {} tokens, fewer than one chunk of -c/--ctx-size {}: give a longer text or a smaller -c",
         n_tokens, n_ctx);
  const int64_t vocab = target.config().vocab_size;
  for (int64_t i = 0; i < n_tokens; ++i)
    if (tokens[i] < 0 || tokens[i] >= vocab)
      fail("token id {} at index {} is outside the vocabulary 0..{}", tokens[i], i, vocab - 1);
  if (base && base->config().vocab_size != vocab)
    fail("the base model's vocabulary ({}) differs from the model's ({})", base->config().vocab_size, vocab);

  PerplexityResult r;
  r.n_ctx = n_ctx;
  r.chunks = n_tokens / n_ctx;
  if (max_chunks > 0 && max_chunks < r.chunks) r.chunks = max_chunks;
  const int64_t first = n_ctx / 2;  // the first scored row: the prediction of token first + 1
  std::vector<double> nlls, base_nlls, klds;
  double nll_sum = 0;  // of nlls, for each chunk's running value
  int64_t same_top = 0;
  for (int64_t c = 0; c < r.chunks; ++c) {
    const std::vector<int64_t> chunk(tokens.begin() + c * n_ctx, tokens.begin() + (c + 1) * n_ctx);
    decode::ForwardPieces pieces(target, chunk, piece);
    std::optional<decode::ForwardPieces> base_pieces;  // in step with `pieces`: the same rows each next()
    if (base) base_pieces.emplace(*base, chunk, piece);
    for (at::Tensor logits = pieces.next(); logits.defined(); logits = pieces.next()) {
      const at::Tensor base_logits = base ? base_pieces->next() : at::Tensor();
      const int64_t start = pieces.start(), T = logits.size(0);
      const int64_t lo = std::max(start, first);  // the piece's scored rows: lo .. start+T-1
      if (lo >= start + T) continue;
      // log_softmax in float64: float32's sum over a 151936-token vocabulary is off by about 1e-5 nats a row
      const at::Tensor rows = at::log_softmax(logits.narrow(0, lo - start, start + T - lo).to(at::kDouble), -1);
      const at::Tensor next = at::tensor(std::vector<int64_t>(chunk.begin() + lo + 1, chunk.begin() + start + T + 1),
                                         at::kLong).to(rows.device()).unsqueeze(1);
      const size_t scored_before = nlls.size();
      append(nlls, rows.gather(1, next).squeeze(1), -1.0);
      for (size_t i = scored_before; i < nlls.size(); ++i) nll_sum += nlls[i];
      if (!base) continue;
      // KL(base || model) on the model's device
      const at::Tensor base_rows =
          at::log_softmax(base_logits.narrow(0, lo - start, start + T - lo).to(rows.device()).to(at::kDouble), -1);
      append(klds, (base_rows.exp() * (base_rows - rows)).sum(-1));
      append(base_nlls, base_rows.gather(1, next).squeeze(1), -1.0);
      same_top += rows.argmax(-1).eq(base_rows.argmax(-1)).sum().item<int64_t>();
    }
    r.running_ppl.push_back(std::exp(nll_sum / static_cast<double>(nlls.size())));
    if (on_chunk) on_chunk(c + 1, r.running_ppl.back());
  }
  r.tokens_scored = static_cast<int64_t>(nlls.size());
  std::tie(r.nll_mean, r.nll_stderr) = mean_and_stderr(nlls);
  r.ppl = std::exp(r.nll_mean);
  r.ppl_stderr = r.ppl * r.nll_stderr;
  if (base) {
    KlDivergence kl;
    kl.base_ppl = std::exp(mean_and_stderr(base_nlls).first);
    kl.ppl_ratio = r.ppl / kl.base_ppl;
    std::tie(kl.kld_mean, kl.kld_stderr) = mean_and_stderr(klds);
    std::vector<double> sorted = klds;
    std::sort(sorted.begin(), sorted.end());
    kl.kld_max = sorted.back();
    const double at = 0.99 * static_cast<double>(sorted.size() - 1);  // linear between the two nearest ranks
    const size_t lo = static_cast<size_t>(std::floor(at)), hi = std::min(lo + 1, sorted.size() - 1);
    kl.kld_p99 = sorted[lo] + (at - static_cast<double>(lo)) * (sorted[hi] - sorted[lo]);
    kl.same_top = static_cast<double>(same_top) / static_cast<double>(sorted.size());
    r.kl = kl;
  }
  return r;
}

}  // namespace specpress::tools
