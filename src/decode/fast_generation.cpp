// fast_generation.cpp — see fast_generation.h. Mirrors plain.cpp and dflash.cpp line for line.
#include "decode/fast_generation.h"

#include <cuda_runtime.h>

#include <chrono>

#include "core/error.h"
#include "decode/output.h"

namespace specpress::decode {
namespace {

// CUDA events around the draft and verify parts of a cycle, read after the cycle's one sync.
struct CycleTimer {
  cudaEvent_t e[3]{};
  CycleTimer() {
    for (auto& ev : e) cudaEventCreate(&ev);
  }
  ~CycleTimer() {
    for (auto& ev : e) cudaEventDestroy(ev);
  }
  void mark(int i, cudaStream_t s) { cudaEventRecord(e[i], s); }
  double ms(int a, int b) const {
    float v = 0.f;
    cudaEventElapsedTime(&v, e[a], e[b]);
    return v;
  }
};

}  // namespace

GenerationResult generate_plain_fast(model::FastEngine& engine, const model::Qwen3Model& target,
                                     const std::vector<int64_t>& prompt, const GenerationParams& params,
                                     const TokenCallback& on_tokens) {
  validate_generation(target, prompt, params, 1);
  const int64_t N = static_cast<int64_t>(prompt.size());
  if (N + params.max_new_tokens + 1 > engine.capacity())
    fail("fast path: prompt + -n {} exceeds the engine's cache capacity {}", params.max_new_tokens, engine.capacity());
  GenerationResult result = new_result(1, N, params);
  CommittedOutput output(params, result, on_tokens);
  Sampler sampler(params.sampling);
  const bool greedy = params.sampling.greedy();

  engine.capture_graphs();  // one-time set-up (matmul tuning, graph capture): not part of the prefill time
  auto t0 = std::chrono::steady_clock::now();
  int64_t next = sampler.sample(engine.prefill(prompt))[0];
  result.prefill_ms = elapsed_ms(t0);

  auto t1 = std::chrono::steady_clock::now();
  bool first = true;
  while (output.commit({next})) {
    if (first || !greedy) engine.set_token(next);  // greedy: the graph's argmax already is the next input
    first = false;
    engine.decode_step();
    next = greedy ? engine.read_token() : sampler.sample(engine.decode_logits())[0];
  }
  result.decode_ms = elapsed_ms(t1);
  return result;
}

GenerationResult generate_dflash_fast(model::FastEngine& engine, const model::Qwen3Model& target,
                                      const model::DFlashDraft& draft, const std::vector<int64_t>& prompt,
                                      const GenerationParams& params, const TokenCallback& on_tokens) {
  const int64_t B = engine.block_size();
  if (params.block_size != 0 && params.block_size != B)
    fail("fast path: engine block size {} differs from --block-size {}", B, params.block_size);
  validate_generation(target, prompt, params, B);
  const int64_t N = static_cast<int64_t>(prompt.size());
  const int64_t max_length = N + params.max_new_tokens;
  if (max_length + B > engine.capacity())
    fail("fast path: prompt + -n {} + block exceeds the engine's cache capacity {}", params.max_new_tokens,
         engine.capacity());
  GenerationResult result = new_result(B, N, params);
  CommittedOutput output(params, result, on_tokens);
  Sampler sampler(params.sampling);
  const bool greedy = params.sampling.greedy();
  CycleTimer timer;
  const cudaStream_t stream = engine.stream().stream();

  engine.capture_graphs();  // one-time set-up (matmul tuning, graph capture): not part of the prefill time
  auto t0 = std::chrono::steady_clock::now();
  int64_t bonus = sampler.sample(engine.prefill(prompt))[0];
  result.prefill_ms = elapsed_ms(t0);

  // The first draft call consumes every prompt row; like the reference, it is timed apart from decoding.
  auto td = std::chrono::steady_clock::now();
  engine.first_draft(bonus);
  cudaStreamSynchronize(stream);
  result.first_draft_ms = elapsed_ms(td);
  result.draft_ms = result.first_draft_ms;
  auto decode_start = std::chrono::steady_clock::now();

  int64_t start = N;
  bool first_cycle = true;
  std::vector<int64_t> block(B), posterior(B);
  while (start < max_length) {
    timer.mark(0, stream);
    if (!first_cycle) engine.draft_step();
    first_cycle = false;
    timer.mark(1, stream);
    engine.verify_step();
    if (greedy) {
      engine.accept();
    } else {
      std::vector<int64_t> sampled = sampler.sample(engine.verify_logits());
      engine.accept(&sampled);
    }
    timer.mark(2, stream);
    const int64_t* rec = engine.read_record();  // the cycle's one host synchronisation
    std::copy(rec, rec + B, block.begin());
    std::copy(rec + B, rec + 2 * B, posterior.begin());
    const int64_t a = rec[2 * B];
    result.draft_ms += timer.ms(0, 1);
    result.verify_ms += timer.ms(1, 2);

    if (!finish_verify_step(output, result, params, block, posterior, a, max_length, start, bonus)) break;
  }
  result.decode_ms = elapsed_ms(decode_start);
  return result;
}

GenerationResult generate_fast(const model::Qwen3Model& target, const model::DFlashDraft* draft,
                               const std::vector<int64_t>& prompt, const GenerationParams& params,
                               const TokenCallback& on_tokens) {
  const int64_t N = static_cast<int64_t>(prompt.size());
  if (draft == nullptr) {
    validate_generation(target, prompt, params, 1);
    model::FastEngine engine(target, nullptr, N + params.max_new_tokens + 1);
    return generate_plain_fast(engine, target, prompt, params, on_tokens);
  }
  const int64_t B = resolve_block_size(*draft, params.block_size);
  validate_generation(target, prompt, params, B);
  model::FastEngine engine(target, draft, N + params.max_new_tokens + B, B);
  return generate_dflash_fast(engine, target, *draft, prompt, params, on_tokens);
}

}  // namespace specpress::decode
