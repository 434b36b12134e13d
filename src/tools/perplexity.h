// perplexity.h — the target's perplexity over a token sequence, as llama.cpp's llama-perplexity measures it: the
// tokens are cut into chunks of n_ctx, each chunk is one forward from position 0, and only the predictions of its
// second half are scored (positions n_ctx/2 .. n_ctx-2 predicting the next token), so that every scored token has at
// least n_ctx/2 tokens of context. PPL = exp(mean NLL); its error the standard error of the mean NLL, times PPL.
// Each row's log_softmax is taken in float64 (from the forward's fp32 logits).
// Numbers compare with llama-perplexity's at the same -c on the same text (Qwen3 adds no BOS token).
//
// With a base model (the same checkpoint in another dtype or on another device, or another checkpoint with the same
// vocabulary), the same rows are also scored by the base, and the result carries every statistic llama-perplexity's
// --kl-divergence prints, computed the same way: both perplexities, the correlation of the rows' NLLs, the log PPL
// ratio with its paired error, KL(base || model) a row (exact, over the whole vocabulary; llama.cpp's stored base
// drops tokens under e^-16), the change of the next token's probability (Δp) and the share of rows whose most
// likely token agrees, with percentiles interpolated linearly between the two nearest ranks.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "model/qwen3.h"

namespace specpress::tools {

// The fractions at which the KL and Δp distributions are read, from the maximum (1) to the minimum (0); llama's KLD
// lines print all but 0.75 and 0.25.
inline constexpr std::array<double, 13> kPerplexityQuantiles = {1.0, 0.999, 0.99, 0.95, 0.90, 0.75, 0.5,
                                                                0.25, 0.10, 0.05, 0.01, 0.001, 0.0};

// A per-row quantity's mean, the mean's standard error and (in the final result only) its quantiles.
struct RowDistribution {
  double mean = 0, stderr_mean = 0;
  std::vector<double> quantiles;  // at kPerplexityQuantiles; empty in progress reports
};

struct KlDivergence {
  double base_ppl = 0, base_ppl_stderr = 0;
  double nll_correlation = 0;                    // Pearson's, of the rows' NLLs under the model and the base
  double ln_ppl_ratio = 0, ln_ppl_ratio_stderr = 0;  // mean NLL(model) - NLL(base), its error paired by row
  double ppl_ratio = 0, ppl_ratio_stderr = 0;    // the model's PPL / the base's
  double ppl_diff = 0, ppl_diff_stderr = 0;      // the model's PPL - the base's
  RowDistribution kld;                           // KL(base || model), nats a row
  RowDistribution delta_p;                       // p_model(next token) - p_base(next token)
  double rms_delta_p = 0, rms_delta_p_stderr = 0;
  double same_top = 0, same_top_stderr = 0;      // share of rows whose argmax agrees
};

struct PerplexityResult {
  int64_t n_ctx = 0, chunks = 0, tokens_scored = 0;
  double nll_mean = 0, nll_stderr = 0;  // nats a token
  double ppl = 0, ppl_stderr = 0;
  std::vector<double> running_ppl;      // after each chunk, as llama-perplexity prints [1]x,[2]y,...
  std::optional<KlDivergence> kl;       // with a base model
  bool fast_path = false, base_fast_path = false;  // whether the model's (the base's) forward ran on the fast path
};

// Chunks: floor(tokens / n_ctx), at most max_chunks (0 or -1: all, -1 as llama-perplexity's default). Errors name
// -c/--ctx-size (n_ctx < 4 or past the model's max_position_embeddings), --chunks and the token count (fewer than
// n_ctx tokens). on_chunk(done, so_far) after each chunk, for progress: the statistics of the chunks done, without
// quantiles. `base`: null, or the model to compare with (same vocabulary). `piece`: tokens a forward, which bounds
// the logits held at once. Each model's forward runs on the CUDA fast path where it applies (CUDA builds, a bf16 model
// on a CUDA device: an engine of n_ctx positions, FastEngine::forward_rows, bf16 logits within noise of the
// reference's) unless `reference_only`, else on the reference forward (decode::reference_piece_logits).
PerplexityResult perplexity(const model::Qwen3Model& target, const std::vector<int64_t>& tokens, int64_t n_ctx,
                            int64_t max_chunks = 0,
                            const std::function<void(int64_t, const PerplexityResult&)>& on_chunk = {},
                            const model::Qwen3Model* base = nullptr, int64_t piece = 256, bool reference_only = false);

// The chunks perplexity() scores for these arguments, after the same checks (the CLI's first line says it before
// the run, and never for arguments the run refuses).
int64_t perplexity_chunks(const model::Qwen3Model& target, const std::vector<int64_t>& tokens, int64_t n_ctx,
                          int64_t max_chunks = 0, const model::Qwen3Model* base = nullptr);

}  // namespace specpress::tools
