// sampler.cpp — see sampler.h.
#include "decode/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <numeric>
#include <string>
#include <unordered_map>

#include "core/env_switch.h"
#include "core/error.h"

namespace specpress::decode {
namespace {

EnvSwitch& candidates_switch() {
  static EnvSwitch s("SPECPRESS_SAMPLER_CANDIDATES", true);
  return s;
}

// 0 .. n - 1.
std::vector<int64_t> all_rows(int64_t n) {
  std::vector<int64_t> rows(static_cast<size_t>(n));
  for (int64_t r = 0; r < n; ++r) rows[static_cast<size_t>(r)] = r;
  return rows;
}

// Rows `rows` of `t` (t itself when they are all of its rows, in order).
at::Tensor select_rows(const at::Tensor& t, const std::vector<int64_t>& rows) {
  if (static_cast<int64_t>(rows.size()) == t.size(0)) return t;
  return t.index_select(0, at::tensor(rows, at::kLong).to(t.device()));
}

constexpr double kInf = std::numeric_limits<double>::infinity();

// A row with no token to draw, on either path.
[[noreturn]] void fail_row_without_mass(int64_t row) {
  fail("sampling: every token of row {} has a logit of -inf or NaN (banned by the logit bias or penalties?)", row);
}

// The largest finite value of a floating-point type of the logits.
double largest_finite(at::ScalarType type) {
  switch (type) {
    case at::kDouble: return std::numeric_limits<double>::max();
    case at::kFloat: return std::numeric_limits<float>::max();
    case at::kBFloat16: return static_cast<double>(std::numeric_limits<c10::BFloat16>::max());
    case at::kHalf: return static_cast<double>(std::numeric_limits<c10::Half>::max());
    default: fail("internal: logits of type {}, expected a floating-point type", c10::toString(type));
  }
}

// Adjusted logits pushed past their type's range by a bias or a penalty (a bias of 1e300, a logit divided by a
// repeat penalty of 1e-40) saturate at its largest finite value instead of +inf, which would make the softmax NaN:
// in the limit such tokens take all the mass, shared equally, and greedy takes the lowest id of them. -inf (a ban)
// stays.
at::Tensor saturated(const at::Tensor& logits) { return logits.clamp_max_(largest_finite(logits.scalar_type())); }

}  // namespace

bool sampler_candidates() { return candidates_switch().on(); }

void set_sampler_candidates(bool on) { candidates_switch().set(on); }

namespace {

// llama.cpp's name of a sampler (its alternative spellings accepted); unknown names fail naming `what`.
std::string canonical_sampler(const std::string& name, const std::string& what) {
  static const std::map<std::string, std::string> kCanonical = {
      {"penalties", "penalties"}, {"dry", "dry"},         {"top_n_sigma", "top_n_sigma"},
      {"top-n-sigma", "top_n_sigma"}, {"top_k", "top_k"}, {"top-k", "top_k"},
      {"typ_p", "typ_p"},         {"typ-p", "typ_p"},     {"typical_p", "typ_p"},
      {"typical-p", "typ_p"},     {"typical", "typ_p"},   {"typ", "typ_p"},
      {"top_p", "top_p"},         {"top-p", "top_p"},     {"nucleus", "top_p"},
      {"min_p", "min_p"},         {"min-p", "min_p"},     {"xtc", "xtc"},
      {"temperature", "temperature"}, {"temp", "temperature"}};
  const auto it = kCanonical.find(name);
  if (it == kCanonical.end())
    fail("{}: unknown sampler '{}' (expected penalties, top_k, top_p, min_p, temperature, or dry, typ_p, xtc, "
         "top_n_sigma, which stay off here)", what, name);
  return it->second;
}

}  // namespace

void apply_sampler_sequence(const std::vector<std::string>& names, SamplingParams& p, const std::string& what) {
  std::map<std::string, size_t> at;  // the engine's samplers: where each is named
  std::vector<std::string> kept;     // their llama.cpp names, in order
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string name = canonical_sampler(names[i], what);
    if (name == "dry" || name == "typ_p" || name == "xtc" || name == "top_n_sigma") continue;
    if (!at.emplace(name, i).second) fail("{}: '{}' is named twice", what, names[i]);
    kept.push_back(name);
  }
  if (!at.count("temperature")) fail("{}: the sequence must name the temperature (0 = greedy)", what);
  auto position = [&](const char* name) { return at.count(name) ? static_cast<int64_t>(at.at(name)) : -1; };
  const int64_t pen = position("penalties"), k = position("top_k"), tp = position("top_p"), mp = position("min_p"),
                t = position("temperature");
  for (const int64_t other : {k, tp, mp, t})
    if (pen >= 0 && other >= 0 && other < pen)
      fail("{}: the penalties must come before top_k, top_p, min_p and the temperature (the order applied here)", what);
  if ((k >= 0 && tp >= 0 && tp < k) || (k >= 0 && mp >= 0 && mp < k) || (tp >= 0 && mp >= 0 && mp < tp))
    fail("{}: top_k, top_p and min_p must come in that order (the order applied here)", what);
  const bool before = (tp < 0 || t < tp) && (mp < 0 || t < mp), after = (tp < 0 || t > tp) && (mp < 0 || t > mp);
  if (!before && !after)
    fail("{}: the temperature must come before top_p and min_p (transformers' order) or after both (llama.cpp's)",
         what);
  p.temperature_last = !before;
  p.sequence = std::move(kept);
  if (pen < 0) p.repeat_penalty = 1.0, p.frequency_penalty = 0.0, p.presence_penalty = 0.0;  // left out: off
  if (k < 0) p.top_k = 0;
  if (tp < 0) p.top_p = 1.0;
  if (mp < 0) p.min_p = 0.0;
}

std::vector<std::string> sampler_names_of_letters(const std::string& letters, const std::string& what) {
  static const std::map<char, std::string> kLetter = {{'e', "penalties"}, {'d', "dry"},   {'s', "top_n_sigma"},
                                                      {'k', "top_k"},     {'y', "typ_p"}, {'p', "top_p"},
                                                      {'m', "min_p"},     {'x', "xtc"},   {'t', "temperature"}};
  std::vector<std::string> names;
  for (const char c : letters) {
    const auto it = kLetter.find(c);
    if (it == kLetter.end())
      fail("{}: unknown sampler letter '{}' in \"{}\" (expected e, d, s, k, y, p, m, x or t)", what, c, letters);
    names.push_back(it->second);
  }
  return names;
}

std::vector<std::string> sampler_sequence(const SamplingParams& p) {
  std::vector<std::string> all = p.temperature_last
                                     ? std::vector<std::string>{"penalties", "top_k", "top_p", "min_p", "temperature"}
                                     : std::vector<std::string>{"penalties", "temperature", "top_k", "top_p", "min_p"};
  if (p.sequence.empty()) return all;
  std::vector<std::string> on;  // those the sequence keeps, in the order applied
  for (const std::string& name : all)
    if (std::find(p.sequence.begin(), p.sequence.end(), name) != p.sequence.end()) on.push_back(name);
  return on;
}

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
    // every row alike, a token named twice gets both biases (as llama.cpp adds them), summed here in fp64 so that
    // a ban (-inf) wins over any bias (no inf - inf) and a sum past the logits' range saturates (below)
    std::map<int64_t, double> bias_of;
    for (const auto& [id, bias] : params_.logit_bias) {
      if (id >= out.size(1)) fail("--logit-bias: token id {} is outside the vocabulary 0..{}", id, out.size(1) - 1);
      bias_of[id] += bias;
    }
    std::vector<int64_t> ids;
    std::vector<double> biases;
    for (const auto& [id, bias] : bias_of) ids.push_back(id), biases.push_back(std::isnan(bias) ? -kInf : bias);
    const at::Tensor index = at::tensor(ids, at::kLong).to(out.device());
    const at::Tensor add =
        at::tensor(biases, at::kDouble).clamp_max(largest_finite(out.scalar_type())).to(out.device());
    out.index_add_(1, index, add.to(out.scalar_type()).unsqueeze(0).expand({rows, add.size(0)}).contiguous());
  }
  if (!params_.penalized()) return saturated(out);
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
  if (K == 0) return saturated(out);
  entries.reserve(3 * K);
  for (const auto* v : {&row_of, &token_of, &count_of}) entries.insert(entries.end(), v->begin(), v->end());
  const at::Tensor e = at::tensor(entries, at::kLong).view({3, K}).to(out.device());
  const at::Tensor row_index = e[0], token_index = e[1], c = e[2].to(out.scalar_type());
  const at::Tensor v = out.index({row_index, token_index});
  const double rp = params_.repeat_penalty;
  // as llama.cpp's penalties sampler, in the logits' float type
  out.index_put_({row_index, token_index},
                 at::where(v <= 0, v * rp, v / rp) - (c * params_.frequency_penalty + params_.presence_penalty));
  return saturated(out);
}

at::Tensor Sampler::probabilities(const at::Tensor& raw_logits, const std::vector<int64_t>& block) const {
  return probabilities_of(adjusted(raw_logits, block));
}

at::Tensor Sampler::probabilities_of(const at::Tensor& adjusted_logits) const {
  const double neg_inf = -std::numeric_limits<double>::infinity();
  at::Tensor scores = adjusted_logits.to(at::kDouble);
  if (params_.greedy()) {
    at::Tensor idx = scores.argmax(-1, /*keepdim=*/true);
    return at::zeros_like(scores).scatter_(-1, idx, 1.0);
  }
  scores = scores / filter_temperature();
  const int64_t V = scores.size(-1);
  if (params_.top_k > 0 && params_.top_k < V) {
    at::Tensor kth = std::get<0>(scores.topk(params_.top_k, -1)).narrow(-1, params_.top_k - 1, 1);
    scores = scores.masked_fill(scores < kth, neg_inf);
  }
  if (params_.top_p < 1.0) {
    // Drop the low tail whose total mass is <= 1 - top_p; keep at least the most likely token. The sort is stable, so
    // a cut between equal scores drops the lower ids of them first on every device, and the candidate path can keep
    // the same ones.
    auto [sorted, order] = scores.sort(/*stable=*/true, -1, /*descending=*/false);
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
  if (params_.temperature_last) scores = scores / params_.temperature;
  return scores.softmax(-1);
}

std::optional<std::vector<Sampler::Nucleus>> Sampler::nuclei(const at::Tensor& logits,
                                                             const std::vector<int64_t>& block) const {
  if (params_.greedy()) return std::nullopt;
  std::vector<std::optional<Nucleus>> rows;
  if (!candidate_nuclei(adjusted(logits, block), rows).empty()) return std::nullopt;
  std::vector<Nucleus> out;
  for (auto& row : rows) out.push_back(std::move(*row));
  return out;
}

std::vector<int64_t> Sampler::candidate_nuclei(const at::Tensor& scores,
                                               std::vector<std::optional<Nucleus>>& nuclei) const {
  const double T = filter_temperature();
  const int64_t rows = scores.size(0), V = scores.size(1);
  std::vector<int64_t> left = all_rows(rows);
  nuclei.assign(static_cast<size_t>(rows), std::nullopt);
  if (!truncates(V)) return left;  // plain temperature: every token can be drawn
  const bool top_k = params_.top_k > 0 && params_.top_k < V, top_p = params_.top_p < 1.0;
  // Candidate counts to try: top-k's own and a margin for ties at its k-th value; else a nucleus of a few hundred
  // tokens (a trained LM at the temperatures people sample at), then a few thousand for the rows still left.
  const std::vector<int64_t> tries = top_k ? std::vector<int64_t>{params_.top_k + 64} : std::vector<int64_t>{256, 4096};
  // top-p alone normalises over the whole vocabulary: each row's sum of exp(s / T - max), from the device with the
  // first try's candidates
  const bool need_z = top_p && !top_k;
  std::vector<double> z(static_cast<size_t>(rows), 0.0);
  // the C largest scores of `of`'s rows, then their ids, in fp64 (ids < 2^53: exact) [rows, 2C]
  auto topk_candidates = [&](const std::vector<int64_t>& of, int64_t C) {
    auto [values, ids] = select_rows(scores, of).topk(C, -1, /*largest=*/true, /*sorted=*/true);
    return at::cat({values.to(at::kDouble), ids.to(at::kDouble)}, 1);
  };
  const bool device = temperature_draw_ != nullptr && scores.is_cuda() && scores.scalar_type() == at::kFloat;
  for (size_t t = 0; t < tries.size() && !left.empty(); ++t) {
    const int64_t C = std::min(tries[t], V);
    at::Tensor candidates;  // the fast loops' kernels, where they apply; else topk
    if (device && static_cast<int64_t>(left.size()) == rows)
      candidates = temperature_draw_->top_candidates(scores.contiguous(), C);
    const bool from_kernels = candidates.defined();
    if (!from_kernels) candidates = topk_candidates(left, C);
    std::vector<at::Tensor> parts;  // filled by push_back: GCC 12 warns falsely on an initializer list here
    parts.reserve(2);
    parts.push_back(candidates);
    const bool with_z = need_z && t == 0;  // every row is left at the first try
    if (with_z && device) {
      parts.push_back(temperature_draw_->row_sums(scores.contiguous(), T).unsqueeze(1));  // the fast loops' kernel
    } else if (with_z) {
      const at::Tensor s = scores.to(at::kDouble) / T;
      parts.push_back((s - candidates.narrow(1, 0, 1) / T).exp().sum(1, /*keepdim=*/true));
    }
    const at::Tensor host = at::cat(parts, 1).to(at::kCPU).contiguous();  // one copy, one synchronisation
    const double* h = host.data_ptr<double>();
    const int64_t width = host.size(1);
    std::vector<int64_t> still, again;
    // row r's nucleus from its candidates v (scores, then ids), or r among the rows still left
    auto take = [&](int64_t r, const double* v) {
      Nucleus nu;
      if (row_nucleus(v, v + C, C, V, z[static_cast<size_t>(r)], nu)) nuclei[static_cast<size_t>(r)] = std::move(nu);
      else still.push_back(r);
    };
    for (size_t i = 0; i < left.size(); ++i) {
      const int64_t r = left[i];
      const double* v = h + static_cast<int64_t>(i) * width;
      if (with_z) z[static_cast<size_t>(r)] = v[2 * C];
      if (from_kernels && std::isnan(v[0])) again.push_back(r);  // the kernels' flag (or a NaN score): topk's turn
      else take(r, v);
    }
    if (!again.empty()) {
      const at::Tensor redo = topk_candidates(again, C).to(at::kCPU).contiguous();
      const double* h_redo = redo.data_ptr<double>();
      for (size_t i = 0; i < again.size(); ++i) take(again[i], h_redo + static_cast<int64_t>(i) * 2 * C);
      std::sort(still.begin(), still.end());
    }
    left = std::move(still);
  }
  return left;
}

bool Sampler::row_nucleus(const double* values, const double* ids, int64_t C, int64_t V, double z_whole,
                          Nucleus& out) const {
  // The whole-vocabulary transform of probabilities_of() on the row's C largest scores, in its top-p order (the score
  // descending; equal scores by id descending, the reverse of its stable ascending sort): each step keeps a prefix
  // of them. `rest` says whether the tokens past the candidates could still be kept, in which case a step must show
  // that it drops them all, or the row falls back to the whole vocabulary.
  if (!std::isfinite(values[0])) return false;  // topk puts a NaN first
  // topk's order is already by score; only a run of equal scores is put in id order
  std::vector<int64_t> order(static_cast<size_t>(C));
  std::iota(order.begin(), order.end(), 0);
  for (int64_t i = 0, j = 1; i < C; i = j++) {
    while (j < C && values[j] == values[i]) ++j;
    if (j - i > 1)
      std::sort(order.begin() + i, order.begin() + j, [&](int64_t a, int64_t b) { return ids[a] > ids[b]; });
  }
  const double T = filter_temperature();
  std::vector<double> s(static_cast<size_t>(C));  // as probabilities_of()'s scores.to(double) / T
  for (int64_t i = 0; i < C; ++i) s[static_cast<size_t>(i)] = values[order[static_cast<size_t>(i)]] / T;
  const double m = s[0];
  auto e = [&](int64_t i) { return std::exp(s[static_cast<size_t>(i)] - m); };
  int64_t n = C;
  bool rest = C < V;
  if (params_.top_k > 0 && params_.top_k < V) {
    const double kth = s[static_cast<size_t>(params_.top_k - 1)];
    n = params_.top_k;
    while (n < C && s[static_cast<size_t>(n)] >= kth) ++n;  // ties at the k-th value stay
    if (n == C && rest) return false;                        // they may go on past the candidates
    rest = false;
  }
  if (params_.top_p < 1.0) {
    double Z = z_whole;
    if (!rest) {
      Z = 0.0;
      for (int64_t i = 0; i < n; ++i) Z += e(i);
    }
    // a token stays while the mass above it is below top_p (the largest always)
    int64_t keep = 1;
    double above = e(0) / Z;
    while (keep < n && above < params_.top_p) above += e(keep++) / Z;
    if (keep == n && rest) return false;  // the cut may lie past the candidates
    // a cut between equal scores keeps the higher ids of them (the order above), which needs all of them here: a
    // score the last candidate shares may go on past the candidates
    const double cut = s[static_cast<size_t>(keep - 1)];
    if (keep < n && s[static_cast<size_t>(keep)] == cut && rest && s[static_cast<size_t>(C - 1)] == cut) return false;
    // the whole vocabulary sums the masses from the other end, so a token whose mass above lies within rounding of
    // top_p may fall the other way there (equal scores make that exact: 6 of 12 at top-p 0.5)
    constexpr double kCutMargin = 1e-9;
    const double last_above = above - e(keep - 1) / Z;  // the mass above the last token kept, < top_p
    if ((keep < n && above - params_.top_p <= kCutMargin) || params_.top_p - last_above <= kCutMargin) return false;
    n = keep;
    rest = false;
  }
  if (params_.min_p > 0.0) {
    // p < max p * min_p is dropped: exp(s - max) < min_p, whatever the normaliser
    int64_t keep = 1;
    while (keep < n && e(keep) >= params_.min_p) ++keep;
    if (keep == n && rest) return false;
    n = keep;
    rest = false;
  }
  if (rest) return false;
  std::vector<std::pair<int64_t, double>> kept(static_cast<size_t>(n));
  double sum = 0.0;
  // the temperature last: the kept tokens' softmax at it, as probabilities_of() divides the filtered scores
  const double t_last = params_.temperature, m_last = m / t_last;
  auto weight = [&](int64_t i) {
    return params_.temperature_last ? std::exp(s[static_cast<size_t>(i)] / t_last - m_last) : e(i);
  };
  for (int64_t i = 0; i < n; ++i) {
    kept[static_cast<size_t>(i)] = {static_cast<int64_t>(ids[order[static_cast<size_t>(i)]]), weight(i)};
    sum += kept[static_cast<size_t>(i)].second;
  }
  std::sort(kept.begin(), kept.end());  // by id, as the whole-vocabulary CDF runs
  out.ids.resize(kept.size());
  out.probs.resize(kept.size());
  for (size_t i = 0; i < kept.size(); ++i) out.ids[i] = kept[i].first, out.probs[i] = kept[i].second / sum;
  return true;
}

std::vector<int64_t> Sampler::sample(const at::Tensor& logits, const std::vector<int64_t>& block) {
  const at::Tensor scores = adjusted(logits, block);
  if (params_.greedy()) {
    // a bias can ban every token of a row: an error, not the argmax of -inf
    if (params_.adjusts_logits() && !scores.amax(-1).isfinite().all().item<bool>())
      fail("sampling: every token of a row has a logit of -inf or NaN (banned by the logit bias or penalties?)");
    return argmax_rows(scores);
  }
  const int64_t rows = scores.size(0);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  std::vector<double> u(static_cast<size_t>(rows));
  for (auto& x : u) x = uniform(rng_);
  std::vector<int64_t> out(static_cast<size_t>(rows));
  std::vector<std::optional<Nucleus>> nuclei(static_cast<size_t>(rows));
  std::vector<int64_t> left = sampler_candidates() ? candidate_nuclei(scores, nuclei) : all_rows(rows);
  for (int64_t r = 0; r < rows; ++r) {
    const std::optional<Nucleus>& nu = nuclei[static_cast<size_t>(r)];
    if (!nu) continue;
    // The inverse CDF over the nucleus in id order: the first token whose cumulative mass exceeds u * total (a
    // token of zero mass never does); the u * total == total rounding edge takes the last token with mass.
    double total = 0.0;
    for (double p : nu->probs) total += p;
    const double target = u[static_cast<size_t>(r)] * total;
    double cum = 0.0;
    int64_t pick = -1, last_with_mass = nu->ids.front();
    for (size_t i = 0; i < nu->ids.size() && pick < 0; ++i) {
      cum += nu->probs[i];
      if (nu->probs[i] > 0.0) last_with_mass = nu->ids[i];
      if (cum > target) pick = nu->ids[i];
    }
    out[static_cast<size_t>(r)] = pick >= 0 ? pick : last_with_mass;
  }
  if (left.empty()) return out;
  // The rows left: the whole vocabulary, with their own uniforms.
  std::vector<double> u_left;
  for (int64_t r : left) u_left.push_back(u[static_cast<size_t>(r)]);
  if (temperature_draw_ != nullptr && !truncates(scores.size(1)) && scores.is_cuda() &&
      scores.scalar_type() == at::kFloat) {
    const std::vector<int64_t> picks =
        temperature_draw_->draw(select_rows(scores, left).contiguous(), params_.temperature, u_left);
    for (size_t i = 0; i < left.size(); ++i) {
      if (picks[i] < 0) fail_row_without_mass(left[i]);
      out[static_cast<size_t>(left[i])] = picks[i];
    }
    return out;
  }
  const at::Tensor probs = probabilities_of(select_rows(scores, left));
  const int64_t V = probs.size(1);
  const at::Tensor cdf = probs.cumsum(-1);
  const at::Tensor u_rows = at::tensor(u_left, at::TensorOptions().dtype(at::kDouble)).to(cdf.device()).unsqueeze(1);
  const at::Tensor targets = u_rows * cdf.narrow(1, V - 1, 1);
  // First index whose cumulative mass exceeds u * total: the inverse CDF. Zero-probability tokens
  // have cdf equal to their predecessor and are never chosen.
  const at::Tensor idx = at::searchsorted(cdf.contiguous(), targets.contiguous(), /*out_int32=*/false, /*right=*/true)
                             .clamp_max(V - 1);
  // each pick and its mass in one copy
  const at::Tensor picked = at::cat({idx.to(at::kDouble), probs.gather(1, idx)}, 1).to(at::kCPU).contiguous();
  const double* h = picked.data_ptr<double>();
  for (size_t i = 0; i < left.size(); ++i) {
    int64_t pick = static_cast<int64_t>(h[2 * i]);
    if (std::isnan(h[2 * i + 1])) fail_row_without_mass(left[i]);  // -inf everywhere (or NaN logits)
    if (h[2 * i + 1] == 0.0) {  // the u * total == total rounding edge: step back to the last token with mass
      const at::Tensor nz = probs[static_cast<int64_t>(i)].nonzero();
      pick = nz[nz.size(0) - 1][0].item<int64_t>();
    }
    out[static_cast<size_t>(left[i])] = pick;
  }
  return out;
}

}  // namespace specpress::decode
