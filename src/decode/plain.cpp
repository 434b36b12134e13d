// plain.cpp — plain autoregressive decoding with the target (the speedup baseline, block size 1).
#include <algorithm>
#include <chrono>

#include "core/error.h"
#include "decode/generation.h"
#include "decode/logprobs.h"
#include "decode/output.h"

namespace specpress::decode {

void validate_prompt_ids(const model::Qwen3Model& target, const std::vector<int64_t>& prompt) {
  if (prompt.empty()) fail("prompt: empty (expected at least one token id)");
  const int64_t vocab = target.config().vocab_size;
  for (size_t i = 0; i < prompt.size(); ++i)
    if (prompt[i] < 0 || prompt[i] >= vocab)
      fail("prompt: token id {} at index {} is outside the vocabulary 0..{}", prompt[i], i, vocab - 1);
}

void validate_generation(const model::Qwen3Model& target, const std::vector<int64_t>& prompt,
                         const GenerationParams& params, int64_t block_size) {
  validate_prompt_ids(target, prompt);
  const int64_t vocab = target.config().vocab_size;
  for (int64_t id : params.stop_ids)
    if (id < 0 || id >= vocab) fail("--stop-ids: id {} is outside the vocabulary 0..{}", id, vocab - 1);
  for (const auto& [id, bias] : params.sampling.logit_bias)
    if (id < 0 || id >= vocab) fail("--logit-bias: token id {} is outside the vocabulary 0..{}", id, vocab - 1);
  if (params.max_new_tokens < 1) fail("-n/--n-predict: must be at least 1, found {}", params.max_new_tokens);
  if (params.logprobs < -1 || params.logprobs > kMaxLogprobs)
    fail("--logprobs: must be 0..{} top alternatives (or -1: none), found {}", kMaxLogprobs, params.logprobs);
  validate(params.sampling);
  const int64_t max_positions = target.config().max_position_embeddings;
  const int64_t room = max_positions - static_cast<int64_t>(prompt.size()) - block_size;  // compared, never summed
  if (params.max_new_tokens > room)
    fail("prompt ({} tokens) + -n {} + block {} exceeds the model's max_position_embeddings {} (at most {} new tokens "
         "fit)", prompt.size(), params.max_new_tokens, block_size, max_positions, std::max<int64_t>(room, 0));
}

void check_prefill_logits(const at::Tensor& logits) {
  if (logits.isnan().any().item<bool>())
    fail("the target's logits after the prompt are NaN: its weights hold NaN or infinite values, or its config "
         "computes them (check model.safetensors and config.json)");
}

GenerationResult generate_one_from_logits(const model::Qwen3Model& target, const std::vector<int64_t>& prompt,
                                          const at::Tensor& last_logits, const GenerationParams& params,
                                          const TokenCallback& on_tokens) {
  validate_generation(target, prompt, params, 1);
  if (params.max_new_tokens != 1)
    fail("internal: one token from the prompt's last logits, but -n {} asked", params.max_new_tokens);
  if (params.observer != nullptr) fail("internal: one token from the prompt's last logits has no cache to observe");
  if (last_logits.dim() != 2 || last_logits.size(0) != 1 || last_logits.size(1) != target.config().vocab_size)
    fail("internal: the prompt's last logits as [1, {}], got {}", target.config().vocab_size,
         c10::str(last_logits.sizes()));
  GenerationResult result = new_result(1, static_cast<int64_t>(prompt.size()), params);
  CommittedOutput output(params, result, on_tokens);
  auto t0 = std::chrono::steady_clock::now();
  check_prefill_logits(last_logits);
  Sampler sampler(params.sampling);
  sampler.begin(prompt);
  const int64_t next = sampler.sample(last_logits)[0];
  output.commit({next}, logprobs_if_asked(params, last_logits, {next}));
  result.prefill_ms = elapsed_ms(t0);  // as generate_plain's first token, part of the prefill
  return result;
}

GenerationResult generate_plain(const model::Qwen3Model& target, const std::vector<int64_t>& prompt,
                                const GenerationParams& params, const TokenCallback& on_tokens) {
  validate_generation(target, prompt, params, 1);
  const int64_t N = static_cast<int64_t>(prompt.size());
  GenerationResult result = new_result(1, N, params);
  CommittedOutput output(params, result, on_tokens);
  Sampler sampler(params.sampling);
  const int64_t headroom = params.observer != nullptr ? params.observer->reserve(1) : 0;
  const int64_t positions = N + params.max_new_tokens + 1;
  model::KVCache cache = target.make_cache(
      params.observer != nullptr ? params.observer->cache_slots(positions, 1) : positions, headroom);
  if (params.observer != nullptr) params.observer->on_cache_created(cache);
  auto long_opts = at::TensorOptions().dtype(at::kLong).device(target.device());
  at::Tensor token = at::empty({1}, long_opts);  // the decode step's input, reused

  auto t0 = std::chrono::steady_clock::now();
  model::ForwardOutput out = target.forward(at::tensor(prompt, at::kLong).to(target.device()), 0, cache, {});
  check_prefill_logits(out.logits);
  sampler.begin(prompt);
  int64_t next = sampler.sample(out.logits)[0];
  sampler.accept(next);
  std::vector<TokenLogprob> next_logprobs = logprobs_if_asked(params, out.logits, {next});
  result.prefill_ms = elapsed_ms(t0);

  auto t1 = std::chrono::steady_clock::now();
  int64_t position = N;
  CommittedSpan span;  // what the observer is told; features only when it asks for them
  while (output.commit({next}, next_logprobs)) {
    token.fill_(next);
    out = observed_forward(target, token, position, cache, {}, params.observer, &span.features);
    if (params.observer != nullptr) {
      span.begin = position;
      span.end = position + 1;
      span.ids.assign(1, next);
      params.observer->on_commit(cache, span);
    }
    next = sampler.sample(out.logits)[0];
    sampler.accept(next);
    next_logprobs = logprobs_if_asked(params, out.logits, {next});
    ++position;
  }
  result.decode_ms = elapsed_ms(t1);
  return result;
}

}  // namespace specpress::decode
