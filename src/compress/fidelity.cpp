// fidelity.cpp — teacher-forced replay of a trajectory with and without compression (see fidelity.h).
#include "compress/fidelity.h"
#include "compress/span_plan.h"

#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"

namespace specpress::compress {

int64_t FidelityResult::pairs() const {
  int64_t n = 0;
  for (int64_t c : count) n += c;
  return n;
}
namespace {
// sum / pairs, or NaN where nothing was compared (JSON writes null), never a false perfect score
double pooled(const std::vector<double>& sums, const std::vector<int64_t>& count) {
  double s = 0, n = 0;
  for (size_t d = 0; d < count.size(); ++d) s += sums[d], n += static_cast<double>(count[d]);
  return n > 0 ? s / n : std::numeric_limits<double>::quiet_NaN();
}
}  // namespace
double FidelityResult::mean_top1() const { return pooled(top1, count); }
double FidelityResult::mean_kl() const { return std::max(pooled(kl, count), 0.0); }  // >= 0 but for float rounding
double FidelityResult::mean_tv() const { return pooled(tv, count); }
double FidelityResult::perplexity_delta() const {
  if (scored_tokens == 0) return 0.0;
  return std::exp((nll_compressed - nll_uncompressed) / static_cast<double>(scored_tokens)) - 1.0;
}
void FidelityResult::merge(const FidelityResult& o) {
  if (count.empty()) {
    *this = o;
    return;
  }
  for (size_t d = 0; d < count.size() && d < o.count.size(); ++d) {
    count[d] += o.count[d];
    top1[d] += o.top1[d];
    kl[d] += o.kl[d];
    tv[d] += o.tv[d];
  }
  nll_uncompressed += o.nll_uncompressed;
  nll_compressed += o.nll_compressed;
  scored_tokens += o.scored_tokens;
  stats.events += o.stats.events;
  stats.tokens_compressed += o.stats.tokens_compressed;
  stats.slots_freed += o.stats.slots_freed;
  stats.overhead_ms += o.stats.overhead_ms;
  stats.positions += o.stats.positions;
  stats.slots += o.stats.slots;
  stats.peak_slots = std::max(stats.peak_slots, o.stats.peak_slots);
}

FidelityResult evaluate_fidelity(const model::Qwen3Model& target, const std::vector<int64_t>& prompt,
                                 const std::vector<int64_t>& output, const std::vector<int64_t>& span_lengths,
                                 const Policy& policy, int64_t max_offset) {
  c10::InferenceMode inference_mode;
  if (max_offset < 1) fail("fidelity: max offset must be at least 1");
  // A DFlash run's last step may commit past the output's end (trimmed at max_new_tokens or a stop), or
  // end on a bonus token no step verified (spans_covering adds it).
  const std::vector<int64_t> spans = spans_covering(span_lengths, static_cast<int64_t>(output.size()));
  std::vector<int64_t> traj = prompt;
  traj.insert(traj.end(), output.begin(), output.end());
  const int64_t N = static_cast<int64_t>(prompt.size()), T = static_cast<int64_t>(traj.size());
  const at::Device device = target.device();
  auto ids = [&](int64_t from, int64_t n) {
    return at::tensor(std::vector<int64_t>(traj.begin() + from, traj.begin() + from + n), at::kLong).to(device);
  };

  FidelityResult r;
  r.max_offset = max_offset;
  r.count.assign(max_offset, 0);
  r.top1.assign(max_offset, 0);
  r.kl.assign(max_offset, 0);
  r.tv.assign(max_offset, 0);

  model::KVCache full_cache = target.make_cache(T);
  at::Tensor u_logp = at::log_softmax(target.forward(ids(0, T), 0, full_cache, {true, {}, false}).logits, -1);

  KVCompressor compressor(policy, target, N);
  const int64_t max_span = spans.empty() ? 1 : *std::max_element(spans.begin(), spans.end());
  const int64_t headroom = compressor.reserve(max_span);
  model::KVCache cache = target.make_cache(compressor.cache_slots(T, max_span), headroom);
  compressor.on_cache_created(cache);
  std::vector<at::Tensor> rows;  // compressed log-probs for rows N-1 .. T-1
  rows.push_back(at::log_softmax(target.forward(ids(0, N), 0, cache, {}).logits, -1));
  std::vector<int64_t> events;  // positions P_e
  int64_t pos = N;
  decode::CommittedSpan span;
  for (int64_t len : spans) {
    if (pos >= T) break;
    const int64_t n = std::min(len, T - pos);
    // As the loops run it: the compressor's features tapped and its pending latents fused.
    model::ForwardOutput out = decode::observed_forward(target, ids(pos, n), pos, cache, {true, {}, false}, &compressor,
                                                        &span.features);
    rows.push_back(at::log_softmax(out.logits, -1));
    span.begin = pos;
    span.end = pos + n;
    span.ids.assign(traj.begin() + pos, traj.begin() + pos + n);
    const size_t before = compressor.stats().event_positions.size();
    compressor.on_commit(cache, span);
    pos += n;
    if (compressor.stats().event_positions.size() > before) events.push_back(pos);
  }
  at::Tensor c_logp = at::cat(rows, 0);      // rows for positions N-1 .. T-1
  at::Tensor u_rows = u_logp.narrow(0, N - 1, T - N + 1);
  // Per-row comparisons, then attribute each row to every event within max_offset before it.
  at::Tensor pu = u_rows.exp(), pc = c_logp.exp();
  at::Tensor agree = u_rows.argmax(-1).eq(c_logp.argmax(-1)).to(at::kCPU);
  at::Tensor kl = (pu * (u_rows - c_logp)).sum(-1).to(at::kDouble).to(at::kCPU);
  at::Tensor tv = (pu - pc).abs().sum(-1).mul(0.5).to(at::kDouble).to(at::kCPU);
  for (size_t e = 0; e < events.size(); ++e) {
    for (int64_t d = 1; d <= max_offset; ++d) {
      const int64_t p = events[e] + d - 1;  // row of position p predicts p+1; offset d
      if (p >= T - 1) break;               // the last row predicts past the trajectory
      const int64_t row = p - (N - 1);
      r.count[d - 1] += 1;
      r.top1[d - 1] += agree[row].item<bool>() ? 1.0 : 0.0;
      r.kl[d - 1] += kl[row].item<double>();
      r.tv[d - 1] += tv[row].item<double>();
    }
  }
  // Perplexity of the trajectory's generated tokens (rows N-1 .. T-2 predict positions N .. T-1).
  if (T - N >= 1) {
    at::Tensor next = ids(N, T - N).unsqueeze(1);
    r.nll_uncompressed = -u_rows.narrow(0, 0, T - N).gather(1, next).sum().item<double>();
    r.nll_compressed = -c_logp.narrow(0, 0, T - N).gather(1, next).sum().item<double>();
    r.scored_tokens = T - N;
  }
  r.stats = compressor.stats();
  return r;
}

}  // namespace specpress::compress
