// perplexity.h — the target's perplexity over a token sequence, as llama.cpp's llama-perplexity measures it: the
// tokens are cut into chunks of n_ctx, each chunk is one forward from position 0, and only the predictions of its
// second half are scored (positions n_ctx/2 .. n_ctx-2 predicting the next token), so that every scored token has at
// least n_ctx/2 tokens of context. PPL = exp(mean NLL); its error the standard error of the mean NLL, times PPL.
// Each row's log_softmax is taken in float64 (from the forward's fp32 logits).
// Numbers compare with llama-perplexity's at the same -c on the same text (Qwen3 adds no BOS token).
//
// With a base model (the same checkpoint in another dtype or on another device), the same rows are also scored by
// the base, as llama-perplexity's --kl-divergence compares a quantized model with its base: the KL divergence
// KL(base || model) of each scored row's distributions, the share of rows whose most likely token agrees, and both
// perplexities.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "model/qwen3.h"

namespace specpress::tools {

struct KlDivergence {
  double base_ppl = 0, ppl_ratio = 0;  // ppl_ratio: the model's PPL / the base's
  double kld_mean = 0, kld_stderr = 0, kld_max = 0, kld_p99 = 0;  // nats a row; p99 interpolated between neighbours
  double same_top = 0;                 // share of rows whose argmax agrees
};

struct PerplexityResult {
  int64_t n_ctx = 0, chunks = 0, tokens_scored = 0;
  double nll_mean = 0, nll_stderr = 0;  // nats a token
  double ppl = 0, ppl_stderr = 0;
  std::vector<double> running_ppl;      // after each chunk, as llama-perplexity prints [1]x,[2]y,...
  std::optional<KlDivergence> kl;       // with a base model
};

// Chunks: floor(tokens / n_ctx), at most max_chunks (0 or -1: all, -1 as llama-perplexity's default). Errors name
// -c/--ctx-size (n_ctx < 4 or past the model's max_position_embeddings), --chunks and the token count (fewer than
// n_ctx tokens). on_chunk(done, running_ppl) after each chunk, for progress. `base`: null, or the model to compare
// with (same vocabulary). `piece`: tokens a forward (decode::ForwardPieces), which bounds the logits held at once.
PerplexityResult perplexity(const model::Qwen3Model& target, const std::vector<int64_t>& tokens, int64_t n_ctx,
                            int64_t max_chunks = 0, const std::function<void(int64_t, double)>& on_chunk = {},
                            const model::Qwen3Model* base = nullptr, int64_t piece = 256);

}  // namespace specpress::tools
