// perplexity.cpp — see perplexity.h.
#include "tools/perplexity.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "decode/logprobs.h"

namespace specpress::tools {

PerplexityResult perplexity(const model::Qwen3Model& target, const std::vector<int64_t>& tokens, int64_t n_ctx,
                            int64_t max_chunks, const std::function<void(int64_t, double)>& on_chunk) {
  const int64_t max_positions = target.config().max_position_embeddings;
  if (n_ctx < 4) fail("-c/--ctx-size: {} is too small to score anything (at least 4)", n_ctx);
  if (n_ctx > max_positions) fail("-c/--ctx-size: {} exceeds the model's max_position_embeddings {}", n_ctx, max_positions);
  if (max_chunks < 0) fail("--chunks: must be >= 0 (0: all), got {}", max_chunks);
  const int64_t n_tokens = static_cast<int64_t>(tokens.size());
  if (n_tokens < n_ctx)
    fail("the text has {} tokens, fewer than one chunk of -c/--ctx-size {}: give a longer text or a smaller -c",
         n_tokens, n_ctx);
  const int64_t vocab = target.config().vocab_size;
  for (int64_t i = 0; i < n_tokens; ++i)
    if (tokens[i] < 0 || tokens[i] >= vocab)
      fail("token id {} at index {} is outside the vocabulary 0..{}", tokens[i], i, vocab - 1);

  PerplexityResult r;
  r.n_ctx = n_ctx;
  r.chunks = n_tokens / n_ctx;
  if (max_chunks > 0 && max_chunks < r.chunks) r.chunks = max_chunks;
  const int64_t first = n_ctx / 2;  // the first scored row: the prediction of token first + 1
  double sum = 0, sum_sq = 0;       // of the NLLs, for the mean and its standard error
  for (int64_t c = 0; c < r.chunks; ++c) {
    const std::vector<int64_t> chunk(tokens.begin() + c * n_ctx, tokens.begin() + (c + 1) * n_ctx);
    // entry j - 1: token j's log-probability given tokens 0 .. j-1 of the chunk
    const std::vector<decode::TokenLogprob> scored = decode::prompt_logprobs(target, chunk, 0);
    for (int64_t j = first + 1; j < n_ctx; ++j) {
      const double nll = -static_cast<double>(scored[j - 1].logprob);
      sum += nll;
      sum_sq += nll * nll;
      ++r.tokens_scored;
    }
    r.running_ppl.push_back(std::exp(sum / static_cast<double>(r.tokens_scored)));
    if (on_chunk) on_chunk(c + 1, r.running_ppl.back());
  }
  const double n = static_cast<double>(r.tokens_scored);
  r.nll_mean = sum / n;
  const double variance = std::max(0.0, sum_sq / n - r.nll_mean * r.nll_mean);
  r.nll_stderr = n > 1 ? std::sqrt(variance / (n - 1)) : 0.0;
  r.ppl = std::exp(r.nll_mean);
  r.ppl_stderr = r.ppl * r.nll_stderr;
  return r;
}

}  // namespace specpress::tools
