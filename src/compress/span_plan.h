// span_plan.h — when compression happens: which committed tokens form units (a verify-step span, or
// m-token pieces of the generated text) and at which commit each unit ages out of the raw window of W
// generated tokens (compression-design.md §7.1; the prompt and the first `sinks` positions always stay raw). One
// implementation for the live compressor (KVCompressor) and for the trainer's parallel layout, so a compressor is
// trained on exactly the events it will see at inference.
#pragma once
#include <cstdint>
#include <deque>
#include <vector>

#include "compress/policy.h"

namespace specpress::compress {

struct Unit {
  int64_t begin = 0, end = 0;  // positions [begin, end), all generated
  int64_t size() const { return end - begin; }
};

class UnitTracker {
 public:
  UnitTracker(const Policy& policy, int64_t prompt_tokens);
  // Positions [begin, end) were committed (end = one past the last committed position). Returns the
  // units that aged out of the window with this commit, oldest first.
  std::vector<Unit> commit(int64_t begin, int64_t end);
  // Positions below it never join a unit.
  int64_t raw_head() const { return raw_head_; }

 private:
  int64_t window_, merge_;
  int64_t raw_head_;  // positions below it never join a unit: the prompt and the first `sinks` positions
  std::deque<Unit> raw_;       // committed units still raw, oldest first
  int64_t pending_begin_ = -1;  // merge > 0: start of the current partial unit
};

struct CompressionEvent {
  Unit unit;
  int64_t forward = 0;
};
struct CompressionPlan {
  std::vector<int64_t> forward_of;  // per position
  std::vector<CompressionEvent> events;
};
// A teacher-forced trajectory (prompt + generated tokens, committed in runs of `span_lengths`) under a
// policy: which forward wrote each position (0 = the prompt's prefill, s = the s-th commit's forward)
// and each compression event with the forward its latent is fused into (the one after the commit that
// aged the unit out). Events whose forward lies past the trajectory are left out. The spans go through
// spans_covering first.
CompressionPlan plan_compression(const Policy& policy, int64_t prompt_tokens, const std::vector<int64_t>& span_lengths,
                                 int64_t total_tokens);

// `span_lengths` for a trajectory of `generated` tokens: as given, plus a closing span of 1 when they
// cover all but the last token (a DFlash run that ends on its bonus token outputs it without a verify
// step). Errors when they cover fewer.
std::vector<int64_t> spans_covering(const std::vector<int64_t>& span_lengths, int64_t generated);

}  // namespace specpress::compress
