// output.h — what both decoding loops share: the committed-output buffer with the reference's trimming
// (cap at max_new_tokens, cut right after the first stop token), the streaming hand-off, cancellation
// (GenerationParams::cancel ends the output like a length cap), and a clock.
#pragma once
#include <algorithm>
#include <atomic>
#include <chrono>
#include <vector>

#include "core/error.h"
#include "decode/generation.h"
#include "decode/logprobs.h"

namespace specpress::decode {

class CommittedOutput {
 public:
  CommittedOutput(const GenerationParams& params, GenerationResult& result, const TokenCallback& on_tokens)
      : params_(params), result_(result), on_tokens_(on_tokens) {}

  // Appends committed tokens (and, when the params ask for logprobs, their entries: one a token); returns false
  // once the output is complete (stop token or length).
  bool commit(const std::vector<int64_t>& tokens, const std::vector<TokenLogprob>& logprobs = {}) {
    const bool with_logprobs = params_.logprobs >= 0;
    if (with_logprobs && logprobs.size() != tokens.size())
      fail("internal: {} tokens committed with {} logprobs", tokens.size(), logprobs.size());
    std::vector<int64_t> fresh;
    std::vector<TokenLogprob> fresh_logprobs;
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (done()) break;
      const int64_t t = tokens[i];
      fresh.push_back(t);
      result_.output_ids.push_back(t);
      if (with_logprobs) fresh_logprobs.push_back(logprobs[i]), result_.logprobs.push_back(logprobs[i]);
      if (std::find(params_.stop_ids.begin(), params_.stop_ids.end(), t) != params_.stop_ids.end())
        result_.stopped = true;
    }
    if (!fresh.empty() && on_tokens_) on_tokens_(fresh, fresh_logprobs);
    return !done();
  }
  bool done() const {
    return result_.stopped || static_cast<int64_t>(result_.output_ids.size()) >= params_.max_new_tokens ||
           (params_.cancel != nullptr && params_.cancel->load(std::memory_order_relaxed));
  }

 private:
  const GenerationParams& params_;
  GenerationResult& result_;
  const TokenCallback& on_tokens_;
};

// The end of a DFlash verify step (dflash-spec.md §3.3), as the reference loop (dflash.cpp) does it: record
// it, commit block[0..a], take posterior[a] as the new bonus and advance `start` by a + 1. Returns
// false once decoding is over; like the reference, the bonus is committed too when it is a stop token
// or the length is reached. logits: the verify's rows, for the logprobs (undefined when none are asked for).
inline bool finish_verify_step(CommittedOutput& output, GenerationResult& result, const GenerationParams& params,
                               const std::vector<int64_t>& block, const std::vector<int64_t>& posterior, int64_t a,
                               int64_t max_length, int64_t& start, int64_t& bonus, BlockLogprobs& logprobs,
                               const at::Tensor& logits) {
  if (params.record_steps) result.steps.push_back(StepRecord{start, block, posterior, a});
  result.acceptance_lengths.push_back(a + 1);
  std::vector<int64_t> committed(block.begin(), block.begin() + a + 1);
  bonus = posterior[a];
  start += a + 1;
  // The reference checks for a stop token in everything written so far, the new bonus included.
  if (!output.commit(committed, logprobs.commit(logits, posterior, a))) return false;
  if (start >= max_length || std::find(params.stop_ids.begin(), params.stop_ids.end(), bonus) != params.stop_ids.end()) {
    output.commit({bonus}, logprobs.bonus());
    return false;
  }
  return true;
}

// A result ready to be filled by a loop: block size (1 for plain decoding), prompt length, and room for
// every output token reserved up front.
inline GenerationResult new_result(int64_t block_size, int64_t prompt_tokens, const GenerationParams& params) {
  GenerationResult result;
  result.block_size = block_size;
  result.prompt_tokens = prompt_tokens;
  result.output_ids.reserve(params.max_new_tokens);
  if (params.logprobs >= 0) result.logprobs.reserve(params.max_new_tokens);
  return result;
}

inline double elapsed_ms(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - since).count();
}

}  // namespace specpress::decode
