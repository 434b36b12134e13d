// dflash.cpp — the DFlash speculative loop, step for step as z-lab's dflash_generate
// (dflash-spec.md §3): prefill with taps; then repeat: draft [bonus, MASK x B-1] from the new context
// features, verify the block with the target, accept the longest prefix where draft token i+1 equals
// the target's token for row i, commit it plus the target's next token (the new bonus), roll the target
// cache back to the committed length and hand the committed rows' taps to the draft.
#include <chrono>

#include "core/error.h"
#include "decode/generation.h"
#include "decode/logprobs.h"
#include "decode/output.h"

namespace specpress::decode {

int64_t resolve_block_size(const model::DFlashDraft& draft, int64_t requested) {
  const int64_t trained = draft.config().block_size;
  const int64_t B = requested == 0 ? trained : requested;
  if (B < 2) fail("--block-size: must be at least 2 for speculative decoding, found {}", B);
  if (B > trained) fail("--block-size: {} exceeds the draft's trained block_size {}", B, trained);
  return B;
}

GenerationResult generate_dflash(const model::Qwen3Model& target, const model::DFlashDraft& draft,
                                 const std::vector<int64_t>& prompt, const GenerationParams& params,
                                 const TokenCallback& on_tokens) {
  const model::DFlashConfig& dc = draft.config();
  const int64_t B = resolve_block_size(draft, params.block_size);
  validate_generation(target, prompt, params, B);

  const int64_t N = static_cast<int64_t>(prompt.size());
  const int64_t max_length = N + params.max_new_tokens;
  GenerationResult result = new_result(B, N, params);
  CommittedOutput output(params, result, on_tokens);
  Sampler sampler(params.sampling);
  const int64_t headroom = params.observer != nullptr ? params.observer->reserve(B) : 0;
  const int64_t slots = params.observer != nullptr ? params.observer->cache_slots(max_length + B, B) : max_length + B;
  model::KVCache target_cache = target.make_cache(slots, headroom);
  model::DraftCache draft_cache = draft.make_cache(max_length + B);
  if (params.observer != nullptr) params.observer->on_cache_created(target_cache);
  model::ForwardOptions verify_options{/*all_logits=*/true, dc.target_layer_ids, false};
  verify_options.may_roll_back = true;  // its rejected rows go (top-attention's scores count committed rows alone)
  auto long_opts = at::TensorOptions().dtype(at::kLong).device(target.device());
  at::Tensor block_ids = at::empty({B}, long_opts);
  std::vector<int64_t> block(B, dc.mask_token_id);

  // ---- prefill: logits of the last row, taps of every prompt row
  auto t0 = std::chrono::steady_clock::now();
  model::ForwardOutput out = target.forward(at::tensor(prompt, at::kLong).to(target.device()), 0, target_cache,
                                            {false, dc.target_layer_ids, false});
  check_prefill_logits(out.logits);
  sampler.begin(prompt);
  int64_t bonus = sampler.sample(out.logits)[0];
  sampler.accept(bonus);
  BlockLogprobs logprobs(params);
  logprobs.first_bonus(out.logits, bonus);
  at::Tensor context_features = out.taps;  // rows for positions draft_cache.length .. start-1
  result.prefill_ms = elapsed_ms(t0);

  int64_t start = N;
  auto decode_start = std::chrono::steady_clock::now();
  bool first_draft = true;
  CommittedSpan span;  // what the observer is told; features only when it asks for them
  while (start < max_length) {
    // ---- draft
    auto td = std::chrono::steady_clock::now();
    block.assign(B, dc.mask_token_id);
    block[0] = bonus;
    block_ids.copy_(at::tensor(block, at::kLong));
    at::Tensor hidden = draft.forward(context_features, block_ids, draft_cache);
    std::vector<int64_t> proposals = argmax_rows(target.lm_head_logits(hidden.narrow(0, 1, B - 1)));
    std::copy(proposals.begin(), proposals.end(), block.begin() + 1);
    const double draft_ms = elapsed_ms(td);
    result.draft_ms += draft_ms;
    if (first_draft) {
      result.first_draft_ms = draft_ms;
      decode_start = std::chrono::steady_clock::now();
      first_draft = false;
    }
    if (draft_cache.length != start) fail("internal: draft context holds {} positions, expected {}", draft_cache.length, start);

    // ---- verify
    auto tv = std::chrono::steady_clock::now();
    block_ids.copy_(at::tensor(block, at::kLong));
    out = observed_forward(target, block_ids, start, target_cache, verify_options, params.observer, &span.features);
    std::vector<int64_t> posterior = sampler.sample(out.logits, block);
    int64_t a = 0;
    while (a < B - 1 && block[a + 1] == posterior[a]) ++a;
    sampler.accept(posterior.data(), a + 1);  // block[1..a] (equal to posterior[0..a-1]) and the new bonus
    result.verify_ms += elapsed_ms(tv);

    // ---- commit block[0..a], then the new bonus posterior[a]
    if (params.record_steps) result.steps.push_back(StepRecord{start, block, posterior, a});
    result.acceptance_lengths.push_back(a + 1);
    std::vector<int64_t> committed(block.begin(), block.begin() + a + 1);
    bonus = posterior[a];
    start += a + 1;
    target_cache.rollback(start);
    if (params.observer != nullptr) {
      span.begin = start - (a + 1);
      span.end = start;
      span.ids = committed;
      if (span.features.defined()) span.features = span.features.narrow(0, 0, a + 1);
      params.observer->on_commit(target_cache, span);
    }
    context_features = out.taps.narrow(0, 0, a + 1);
    const bool more = output.commit(committed, logprobs.commit(out.logits, posterior, a));
    // The reference checks for a stop token in everything written so far, the new bonus included.
    if (!more) break;
    if (start >= max_length || std::find(params.stop_ids.begin(), params.stop_ids.end(), bonus) != params.stop_ids.end()) {
      output.commit({bonus}, logprobs.bonus());
      break;
    }
  }
  result.decode_ms = elapsed_ms(decode_start);
  return result;
}

}  // namespace specpress::decode
