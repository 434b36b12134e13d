// perplexity.h — the target's perplexity over a token sequence, as llama.cpp's llama-perplexity measures it: the
// tokens are cut into chunks of n_ctx, each chunk is one forward from position 0, and only the predictions of its
// second half are scored (positions n_ctx/2 .. n_ctx-2 predicting the next token), so that every scored token has at
// least n_ctx/2 tokens of context. PPL = exp(mean NLL); its error the standard error of the mean NLL, times PPL.
// Numbers compare with llama-perplexity's at the same -c on the same text (Qwen3 adds no BOS token).
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "model/qwen3.h"

namespace specpress::tools {

struct PerplexityResult {
  int64_t n_ctx = 0, chunks = 0, tokens_scored = 0;
  double nll_mean = 0, nll_stderr = 0;  // nats a token
  double ppl = 0, ppl_stderr = 0;
  std::vector<double> running_ppl;      // after each chunk, as llama-perplexity prints [1]x,[2]y,...
};

// Chunks: floor(tokens / n_ctx), at most max_chunks (0: all). Errors name -c/--ctx-size (n_ctx < 4 or past the
// model's max_position_embeddings) and the token count (fewer than n_ctx tokens). on_chunk(done, running_ppl)
// after each chunk, for progress.
PerplexityResult perplexity(const model::Qwen3Model& target, const std::vector<int64_t>& tokens, int64_t n_ctx,
                            int64_t max_chunks = 0,
                            const std::function<void(int64_t, double)>& on_chunk = {});

}  // namespace specpress::tools
