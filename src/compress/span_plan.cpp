// span_plan.cpp — see span_plan.h.
#include "compress/span_plan.h"

#include <algorithm>

#include "core/error.h"

namespace specpress::compress {

UnitTracker::UnitTracker(const Policy& policy, int64_t prompt_tokens)
    : window_(policy.window), merge_(policy.merge_tokens), raw_head_(std::max(prompt_tokens, policy.sinks)) {}

std::vector<Unit> UnitTracker::commit(int64_t begin, int64_t end) {
  begin = std::max(begin, raw_head_);  // the prompt and the sinks stay raw
  if (begin < end) {
    if (merge_ == 0) {
      raw_.push_back({begin, end});
    } else {
      if (pending_begin_ < 0) pending_begin_ = begin;
      while (end - pending_begin_ >= merge_) {
        raw_.push_back({pending_begin_, pending_begin_ + merge_});
        pending_begin_ += merge_;
      }
    }
  }
  std::vector<Unit> aged;
  while (!raw_.empty() && raw_.front().end <= end - window_) {
    aged.push_back(raw_.front());
    raw_.pop_front();
  }
  return aged;
}

CompressionPlan plan_compression(const Policy& policy, int64_t prompt_tokens, const std::vector<int64_t>& span_lengths,
                                 int64_t total_tokens) {
  if (prompt_tokens < 1 || prompt_tokens > total_tokens)
    fail("compression plan: prompt of {} tokens in a trajectory of {}", prompt_tokens, total_tokens);
  CompressionPlan plan;
  plan.forward_of.assign(total_tokens, 0);
  UnitTracker tracker(policy, prompt_tokens);
  const std::vector<int64_t> spans = spans_covering(span_lengths, total_tokens - prompt_tokens);
  int64_t pos = prompt_tokens, forward = 0;
  for (int64_t len : spans) {
    if (pos >= total_tokens) break;
    if (len < 1) fail("compression plan: span length {} must be positive", len);
    const int64_t n = std::min(len, total_tokens - pos);
    ++forward;
    std::fill(plan.forward_of.begin() + pos, plan.forward_of.begin() + pos + n, forward);
    pos += n;
    if (pos >= total_tokens) break;  // a latent fused after the last forward would never be read
    for (const Unit& u : tracker.commit(pos - n, pos)) plan.events.push_back({u, forward + 1});
  }
  return plan;
}

std::vector<int64_t> spans_covering(const std::vector<int64_t>& span_lengths, int64_t generated) {
  std::vector<int64_t> spans = span_lengths;
  int64_t covered = 0;
  for (int64_t len : spans) {
    if (len < 1) fail("span length {} must be positive", len);
    covered += len;
  }
  if (covered == generated - 1) spans.push_back(1);
  else if (covered < generated) fail("spans cover {} of {} generated tokens", covered, generated);
  return spans;
}

}  // namespace specpress::compress
