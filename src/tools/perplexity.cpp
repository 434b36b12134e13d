// perplexity.cpp — see perplexity.h.
#include "tools/perplexity.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>

#include "core/error.h"
#include "decode/logprobs.h"

#ifdef SPECPRESS_FAST_PATH
#include "decode/fast_generation.h"
#include "model/qwen3_fast.h"
#endif

namespace specpress::tools {
namespace {

// One model's forward over a chunk at a time: the CUDA fast path's engine where it applies (decode::fast_piece_logits,
// bf16 logits), else the reference forward (decode::reference_piece_logits).
class ChunkForward {
 public:
  ChunkForward(const model::Qwen3Model& m, int64_t n_ctx, bool reference_only) : model_(m) {
#ifdef SPECPRESS_FAST_PATH
    if (!reference_only && model::fast_path_supported(m, nullptr, nullptr))
      engine_ = std::make_unique<model::FastEngine>(m, nullptr, n_ctx);
#else
    (void)n_ctx, (void)reference_only;
#endif
  }
  bool fast() const {
#ifdef SPECPRESS_FAST_PATH
    return engine_ != nullptr;
#else
    return false;
#endif
  }
  // The forward over `chunk` (its rows 0 .. N-2, each predicting the next token).
  decode::PieceLogits over(const std::vector<int64_t>& chunk) {
#ifdef SPECPRESS_FAST_PATH
    if (engine_) return decode::fast_piece_logits(*engine_, chunk);
#endif
    return decode::reference_piece_logits(model_, chunk);
  }

 private:
  const model::Qwen3Model& model_;
#ifdef SPECPRESS_FAST_PATH
  std::unique_ptr<model::FastEngine> engine_;
#endif
};

// Appends a 1-D tensor's values, times `sign`, to `out` (one copy to the host).
void append(std::vector<double>& out, const at::Tensor& values, double sign = 1.0) {
  const at::Tensor host = values.to(at::kCPU, at::kDouble).contiguous();
  const double* v = host.data_ptr<double>();
  for (int64_t i = 0; i < host.numel(); ++i) out.push_back(sign * v[i]);
}

// Running sums over the scored rows, from which every mean, error and the correlation follow; summing as rows come
// keeps each chunk's progress report O(1).
struct Sums {
  double n = 0, nll = 0, nll_sq = 0, base_nll = 0, base_nll_sq = 0, nll_base_nll = 0;
  double kld = 0, kld_sq = 0, dp = 0, dp_sq = 0, dp_4 = 0, same_top = 0;
};

double population_variance(double sum, double sum_sq, double n) {
  const double mean = sum / n;
  return std::max(0.0, sum_sq / n - mean * mean);
}

// The standard error of a mean of n rows whose population variance is `variance` (0 for one row).
double stderr_of_mean(double variance, double n) { return n > 1 ? std::sqrt(variance / (n - 1)) : 0.0; }

// The value at `fraction` of ascending `sorted`, interpolated linearly between the two nearest ranks.
double quantile(const std::vector<double>& sorted, double fraction) {
  const double at = fraction * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(at)), hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (at - static_cast<double>(lo)) * (sorted[hi] - sorted[lo]);
}

std::vector<double> quantiles(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  std::vector<double> out;
  for (double f : kPerplexityQuantiles) out.push_back(quantile(values, f));
  return out;
}

// The statistics of the rows summed so far (quantiles not included).
void summarize(const Sums& s, bool with_base, PerplexityResult& r) {
  const double n = s.n;
  r.tokens_scored = static_cast<int64_t>(n);
  const double nll_var = population_variance(s.nll, s.nll_sq, n);
  r.nll_mean = s.nll / n;
  r.nll_stderr = stderr_of_mean(nll_var, n);
  r.ppl = std::exp(r.nll_mean);
  r.ppl_stderr = r.ppl * r.nll_stderr;
  if (!with_base) return;
  KlDivergence& kl = r.kl ? *r.kl : r.kl.emplace();
  const double base_mean = s.base_nll / n, base_var = population_variance(s.base_nll, s.base_nll_sq, n);
  const double base_stderr = stderr_of_mean(base_var, n);
  kl.base_ppl = std::exp(base_mean);
  kl.base_ppl_stderr = kl.base_ppl * base_stderr;
  const double covariance = s.nll_base_nll / n - r.nll_mean * base_mean;  // population covariance of the NLLs
  kl.nll_correlation = nll_var > 0 && base_var > 0 ? covariance / std::sqrt(nll_var * base_var) : 1.0;
  const double mean_covariance = n > 1 ? covariance / (n - 1) : 0.0;     // covariance of the two means
  kl.ln_ppl_ratio = r.nll_mean - base_mean;
  kl.ln_ppl_ratio_stderr =
      std::sqrt(std::max(0.0, r.nll_stderr * r.nll_stderr + base_stderr * base_stderr - 2 * mean_covariance));
  kl.ppl_ratio = std::exp(kl.ln_ppl_ratio);
  kl.ppl_ratio_stderr = kl.ppl_ratio * kl.ln_ppl_ratio_stderr;
  kl.ppl_diff = r.ppl - kl.base_ppl;
  kl.ppl_diff_stderr = std::sqrt(std::max(0.0, r.ppl_stderr * r.ppl_stderr + kl.base_ppl_stderr * kl.base_ppl_stderr -
                                                   2 * r.ppl * kl.base_ppl * mean_covariance));
  kl.kld.mean = s.kld / n;
  kl.kld.stderr_mean = stderr_of_mean(population_variance(s.kld, s.kld_sq, n), n);
  kl.delta_p.mean = s.dp / n;
  kl.delta_p.stderr_mean = stderr_of_mean(population_variance(s.dp, s.dp_sq, n), n);
  kl.rms_delta_p = std::sqrt(s.dp_sq / n);
  // the error of sqrt(mean Δp²) from the error of mean Δp², to first order
  const double dp_sq_stderr = stderr_of_mean(population_variance(s.dp_sq, s.dp_4, n), n);
  kl.rms_delta_p_stderr = kl.rms_delta_p > 0 ? 0.5 * dp_sq_stderr / kl.rms_delta_p : 0.0;
  kl.same_top = s.same_top / n;
  kl.same_top_stderr = stderr_of_mean(kl.same_top * (1 - kl.same_top), n);
}

}  // namespace

int64_t perplexity_chunks(const model::Qwen3Model& target, const std::vector<int64_t>& tokens, int64_t n_ctx,
                          int64_t max_chunks, const model::Qwen3Model* base) {
  const int64_t max_positions = target.config().max_position_embeddings;
  if (n_ctx < 4) fail("-c/--ctx-size: {} is too small to score anything (at least 4)", n_ctx);
  if (n_ctx > max_positions) fail("-c/--ctx-size: {} exceeds the model's max_position_embeddings {}", n_ctx, max_positions);
  if (base && n_ctx > base->config().max_position_embeddings)
    fail("-c/--ctx-size: {} exceeds the base model's max_position_embeddings {}", n_ctx,
         base->config().max_position_embeddings);
  if (max_chunks < -1) fail("--chunks: must be >= 0 (0 or -1: all), got {}", max_chunks);
  const int64_t n_tokens = static_cast<int64_t>(tokens.size());
  const int64_t vocab = target.config().vocab_size;
  for (int64_t i = 0; i < n_tokens; ++i)  // a bad id first: it is wrong whatever the length
    if (tokens[i] < 0 || tokens[i] >= vocab)
      fail("token id {} at index {} is outside the vocabulary 0..{}", tokens[i], i, vocab - 1);
  if (n_tokens < n_ctx)
    fail("the input has {} tokens, fewer than one chunk of -c/--ctx-size {}: give a longer input or a smaller -c",
         n_tokens, n_ctx);
  if (base && base->config().vocab_size != vocab)
    fail("--kl-base-model: the base model's vocabulary ({}) differs from the model's ({}): compare checkpoints of "
         "one tokenizer", base->config().vocab_size, vocab);
  const int64_t chunks = n_tokens / n_ctx;
  return max_chunks > 0 && max_chunks < chunks ? max_chunks : chunks;
}

PerplexityResult perplexity(const model::Qwen3Model& target, const std::vector<int64_t>& tokens, int64_t n_ctx,
                            int64_t max_chunks, const std::function<void(int64_t, const PerplexityResult&)>& on_chunk,
                            const model::Qwen3Model* base, int64_t piece, bool reference_only) {
  PerplexityResult r;
  r.n_ctx = n_ctx;
  r.chunks = perplexity_chunks(target, tokens, n_ctx, max_chunks, base);
  const int64_t first = n_ctx / 2;  // the first scored row: the prediction of token first + 1
  Sums sums;
  std::vector<double> nlls, base_nlls, klds, same_top;  // this piece's rows
  std::vector<double> all_klds, all_dps;                // every row's, for the quantiles
  if (piece < 1) fail("internal: a forward in pieces of {} tokens", piece);
  ChunkForward model_forward(target, n_ctx, reference_only);
  std::optional<ChunkForward> base_forward;  // in step with the model's: the same rows each piece
  if (base) base_forward.emplace(*base, n_ctx, reference_only);
  r.fast_path = model_forward.fast();
  r.base_fast_path = base && base_forward->fast();
  for (int64_t c = 0; c < r.chunks; ++c) {
    const std::vector<int64_t> chunk(tokens.begin() + c * n_ctx, tokens.begin() + (c + 1) * n_ctx);
    const decode::PieceLogits model_pieces = model_forward.over(chunk);
    const decode::PieceLogits base_pieces = base ? base_forward->over(chunk) : decode::PieceLogits();
    for (int64_t start = 0; start < n_ctx - 1; start += piece) {  // rows 0 .. n_ctx-2 predict tokens 1 .. n_ctx-1
      const int64_t T = std::min(piece, n_ctx - 1 - start);
      // every piece runs (the next one attends to its keys); only rows from `first` on are scored
      const at::Tensor logits = model_pieces(start, T);
      const at::Tensor base_logits = base ? base_pieces(start, T) : at::Tensor();
      const int64_t lo = std::max(start, first);  // the piece's scored rows: lo .. start+T-1
      if (lo >= start + T) continue;
      // log_softmax in float64: float32's sum over a 151936-token vocabulary is off by about 1e-5 nats a row
      const at::Tensor rows = at::log_softmax(logits.narrow(0, lo - start, start + T - lo).to(at::kDouble), -1);
      const at::Tensor next = at::tensor(std::vector<int64_t>(chunk.begin() + lo + 1, chunk.begin() + start + T + 1),
                                         at::kLong).to(rows.device()).unsqueeze(1);
      nlls.clear();
      append(nlls, rows.gather(1, next).squeeze(1), -1.0);
      for (const double v : nlls)
        if (std::isnan(v))
          fail("chunk {}: the model's log-probabilities are NaN: its weights hold NaN or infinite values, or its "
               "config computes them", c + 1);
      if (base) {
        // KL(base || model) on the model's device
        const at::Tensor base_rows =
            at::log_softmax(base_logits.narrow(0, lo - start, start + T - lo).to(rows.device()).to(at::kDouble), -1);
        klds.clear(), base_nlls.clear(), same_top.clear();
        append(klds, (base_rows.exp() * (base_rows - rows)).sum(-1));
        append(base_nlls, base_rows.gather(1, next).squeeze(1), -1.0);
        append(same_top, rows.argmax(-1).eq(base_rows.argmax(-1)));
      }
      for (size_t i = 0; i < nlls.size(); ++i) {
        sums.n += 1, sums.nll += nlls[i], sums.nll_sq += nlls[i] * nlls[i];
        if (!base) continue;
        const double b = base_nlls[i], dp = std::exp(-nlls[i]) - std::exp(-b);
        sums.base_nll += b, sums.base_nll_sq += b * b, sums.nll_base_nll += nlls[i] * b;
        sums.kld += klds[i], sums.kld_sq += klds[i] * klds[i];
        sums.dp += dp, sums.dp_sq += dp * dp, sums.dp_4 += dp * dp * dp * dp;
        sums.same_top += same_top[i];
        all_klds.push_back(klds[i]);
        all_dps.push_back(dp);
      }
    }
    summarize(sums, base != nullptr, r);
    r.running_ppl.push_back(r.ppl);
    if (on_chunk) on_chunk(c + 1, r);
  }
  if (r.kl) {
    r.kl->kld.quantiles = quantiles(std::move(all_klds));
    r.kl->delta_p.quantiles = quantiles(std::move(all_dps));
  }
  return r;
}

}  // namespace specpress::tools
