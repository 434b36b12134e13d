// sampler.h — token selection for plain and speculative decoding. First the logit bias, then llama.cpp's repetition
// penalties (repeat, frequency, presence) over the last repeat_last_n tokens of the context, the prompt's included
// (llama.cpp's sampler order); then greedy (argmax, ties to the lowest id) when temperature < 1e-5, else temperature
// -> top-k -> top-p -> min-p (transformers' warper order; or llama.cpp's default, the temperature last) and
// inverse-CDF sampling with a seeded host RNG, so CPU and CUDA draw the same stream for the same logits.
// Sampling with top-k, top-p or min-p reads only the row's largest scores back (the candidate path): the transform
// runs on the host in fp64 over them, and where they cannot be shown to hold every token the whole-vocabulary
// transform keeps (a nucleus wider than the candidates, or scores tied at the top-k or top-p cut that may go on past
// them) that row alone falls back to that transform (probabilities()). Both draw the same token for the same uniform,
// up to fp64 rounding at a CDF boundary. Where equal scores straddle the top-p cut, the lower ids of them are dropped
// first (the whole vocabulary's sort is stable), on every device. The fast loops hand the whole-vocabulary work at a
// plain temperature, top-p's normaliser without top-k, and the candidates, to CUDA kernels (set_temperature_draw),
// whose twins are this file's ATen transform and topk.
// Every verify row gets exactly the transform plain decoding applies: row r of a block is penalised for the context
// it would follow, the accepted tokens and the block's tokens before it, so DFlash stays lossless under penalties.
#pragma once
#include <cstdint>
#include <deque>
#include <optional>
#include <random>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

namespace specpress::decode {

struct SamplingParams {
  double temperature = 0.0;  // 0 = greedy
  int64_t top_k = 0;         // 0 = off
  double top_p = 1.0;        // 1 = off
  double min_p = 0.0;        // 0 = off
  uint64_t seed = 0;
  // llama.cpp's penalties, applied to the logits before everything else: a token seen c > 0 times in the window has
  // its logit divided by repeat_penalty (multiplied where it is <= 0), then lowered by c * frequency_penalty +
  // presence_penalty.
  double repeat_penalty = 1.0;     // 1 = off
  double frequency_penalty = 0.0;  // 0 = off
  double presence_penalty = 0.0;   // 0 = off
  int64_t repeat_last_n = 64;      // the window: the context's last tokens; 0 = off, -1 = the whole context
  // (token id, bias) pairs added to the logits first (OpenAI's and llama.cpp's logit_bias); -inf bans the token
  std::vector<std::pair<int64_t, double>> logit_bias;
  // false: transformers' order, temperature before top-k, top-p and min-p; true: llama.cpp's default order, where
  // they see the untempered logits and the temperature applies to the tokens they keep (set by a sampler sequence)
  bool temperature_last = false;
  // the engine's samplers of the sequence it came from (apply_sampler_sequence; llama.cpp's names), empty for none:
  // every sampler on, transformers' order; kept so that a request's values can be applied under a server's default
  // sequence, as llama-server's chain
  std::vector<std::string> sequence;
  bool greedy() const { return temperature < 1e-5; }
  bool penalized() const {
    return repeat_last_n != 0 && (repeat_penalty != 1.0 || frequency_penalty != 0.0 || presence_penalty != 0.0);
  }
  bool adjusts_logits() const { return penalized() || !logit_bias.empty(); }  // a bias or penalties
};

// llama.cpp's sampler sequence (its server's `samplers` field, its `--samplers` flag): sampler names in the order
// they apply ("top_k" or "top-k", "top_p", "min_p", "temperature" or "temp", "penalties", ...). The engine applies
// them in one of two orders, so a sequence must be one of them: penalties first, top-k, top-p and min-p in that order,
// and the temperature before top-p and min-p (transformers') or after them (llama.cpp's default). As in llama.cpp a
// sampler left out is off (top_k 0, top_p 1, min_p 0, no penalties); the temperature must be named (0 is greedy);
// dry, typ_p, xtc and top_n_sigma may be named and stay off. `what` names the field or flag in errors.
void apply_sampler_sequence(const std::vector<std::string>& names, SamplingParams& params, const std::string& what);
// llama.cpp's one-letter form (`--sampling-seq`, a `samplers` string): e penalties, d dry, s top_n_sigma, k top_k,
// y typ_p, p top_p, m min_p, x xtc, t temperature.
std::vector<std::string> sampler_names_of_letters(const std::string& letters, const std::string& what);
// The sequence the engine applies under `params` (llama.cpp's names, those of samplers a sequence left out
// omitted), as /props reports it.
std::vector<std::string> sampler_sequence(const SamplingParams& params);

// Validates ranges; the error names the flag (--temp, --top-k, --top-p, --min-p, --repeat-penalty,
// --frequency-penalty, --presence-penalty, --repeat-last-n, --logit-bias). Token ids are checked against the
// vocabulary by validate_generation.
void validate(const SamplingParams& params);

// Device routines for the sampler's whole-vocabulary work, the fast path's kernels (decode/device_draw.h), which the
// ATen transform and topk twin. scores: contiguous fp32 [rows, V] on the device.
class TemperatureDraw {
 public:
  virtual ~TemperatureDraw() = default;
  // At a plain temperature (no top-k, top-p or min-p): each row's inverse-CDF pick at its uniform, or -1 for a row
  // with a NaN or no finite maximum.
  virtual std::vector<int64_t> draw(const at::Tensor& scores, double temperature, const std::vector<double>& u) = 0;
  // Each row's sum of exp(s / T - max), fp64 [rows] on the device (top-p's normaliser without top-k; NaN for a row
  // with a NaN or no finite maximum), queued on the current stream; valid until the next call.
  virtual at::Tensor row_sums(const at::Tensor& scores, double temperature) = 0;
  // Each row's `count` largest scores, score descending and equal scores by id ascending, as fp64 [rows, 2 * count]
  // on the device: the scores, then their ids (a row whose first score is NaN: the sampler's exact fallback). Queued
  // on the current stream; valid until the next call. Undefined where the routine does not apply (`count` past its
  // limit, or switched off), for topk to do it.
  virtual at::Tensor top_candidates(const at::Tensor& scores, int64_t count) = 0;
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);
  // Rows at a plain temperature on a CUDA device are drawn by `draw`, and top-p's whole-vocabulary normaliser
  // without top-k and the candidates of top-k, top-p and min-p come from it there (not owned; it must outlive the
  // sampler's sample() calls); the rest runs in ATen. nullptr (the default): ATen everywhere.
  void set_temperature_draw(TemperatureDraw* draw) { temperature_draw_ = draw; }
  // The context the penalties read: begin() with the prompt, then accept() each token as it is decided (a DFlash
  // cycle's accepted tokens and its new bonus). Without penalties they keep nothing.
  void begin(const std::vector<int64_t>& prompt);
  void accept(const int64_t* tokens, size_t n);
  void accept(int64_t token) { accept(&token, 1); }
  // logits: fp32 [rows, V]. Returns one token per row, rows sampled independently. `block`: empty (one row, which
  // follows the accepted tokens), or a verify block whose block[0] is the last accepted token; row r then follows
  // the accepted tokens and block[1..r].
  std::vector<int64_t> sample(const at::Tensor& logits, const std::vector<int64_t>& block = {});
  // The logits after the bias and the penalties (the same tensor when there are none); rows and `block` as in
  // sample().
  at::Tensor adjusted(const at::Tensor& logits, const std::vector<int64_t>& block = {}) const;
  // The distribution sample() draws from (fp64 [rows, V]); for tests and diagnostics.
  at::Tensor probabilities(const at::Tensor& logits, const std::vector<int64_t>& block = {}) const;
  // The tokens a row can draw (ascending ids) and their probabilities.
  struct Nucleus {
    std::vector<int64_t> ids;
    std::vector<double> probs;
  };
  // The candidate path's nucleus of every row, or nothing where some row needs the whole vocabulary (or the settings
  // truncate nothing); rows and `block` as in sample(). For tests and diagnostics.
  std::optional<std::vector<Nucleus>> nuclei(const at::Tensor& logits, const std::vector<int64_t>& block = {}) const;
  const SamplingParams& params() const { return params_; }

 private:
  at::Tensor probabilities_of(const at::Tensor& adjusted_logits) const;
  // The temperature the top-k, top-p and min-p filters see: the temperature, or 1 where it applies last.
  double filter_temperature() const { return params_.temperature_last ? 1.0 : params_.temperature; }
  // Whether top-k, top-p or min-p cut a vocabulary of V tokens; where none does the temperature alone applies (and
  // its place in the order does not matter).
  bool truncates(int64_t V) const {
    return (params_.top_k > 0 && params_.top_k < V) || params_.top_p < 1.0 || params_.min_p > 0.0;
  }
  // The candidate path: each row's nucleus from its largest scores where they hold it; returns the rows left, which
  // need the whole vocabulary.
  std::vector<int64_t> candidate_nuclei(const at::Tensor& adjusted_logits,
                                        std::vector<std::optional<Nucleus>>& nuclei) const;
  // One row: its C largest raw scores (descending) and their ids, the vocabulary size V and, for top-p without
  // top-k, the row's sum of exp(s / T - max) over the whole vocabulary (T: filter_temperature()).
  bool row_nucleus(const double* values, const double* ids, int64_t C, int64_t V, double z_whole,
                   Nucleus& out) const;

  SamplingParams params_;
  TemperatureDraw* temperature_draw_ = nullptr;
  std::mt19937_64 rng_;
  // the penalties' window over the prompt and the accepted tokens (its last repeat_last_n; all for -1) and each
  // token's count in it, kept as tokens are accepted (only while penalized())
  std::deque<int64_t> window_;
  std::unordered_map<int64_t, int64_t> counts_;
};

// SPECPRESS_SAMPLER_CANDIDATES (default 1): the candidate path where it applies; 0 always takes the whole vocabulary
// (for benchmarks and tests, which may also set it for the process).
bool sampler_candidates();
void set_sampler_candidates(bool on);

// {repeat_penalty, repeat_last_n, presence_penalty, frequency_penalty}, for reports and checkpoints.
nlohmann::ordered_json penalties_json(const SamplingParams& params);
// [[id, bias], ...] (-inf as false, as llama-server reads it), for reports and checkpoints.
nlohmann::ordered_json logit_bias_json(const SamplingParams& params);

// Argmax per row of fp32 logits [rows, V], ties to the lowest index.
std::vector<int64_t> argmax_rows(const at::Tensor& logits);

}  // namespace specpress::decode
