// fast_generation.cpp — see fast_generation.h. Mirrors plain.cpp and dflash.cpp line for line.
#include "decode/fast_generation.h"

#include <cuda_runtime.h>

#include <array>
#include <chrono>

#include "core/env_switch.h"
#include "core/error.h"
#include "decode/device_draw.h"
#include "decode/output.h"

namespace specpress::decode {
namespace {

EnvSwitch& pipeline_switch() {
  static EnvSwitch s("SPECPRESS_PIPELINE", true);
  return s;
}

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

bool pipelined_loops() { return pipeline_switch().on(); }

void set_pipelined_loops(bool on) { pipeline_switch().set(on); }

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
  const auto temperature_draw = attach_temperature_draw(sampler, 1, engine.device());  // sampled steps only
  // greedy: the graph's argmax picks each token; with a bias or penalties the host picks it from the logits
  const bool greedy = params.sampling.greedy() && !params.sampling.adjusts_logits();

  engine.capture_graphs();  // one-time set-up (matmul tuning, graph capture): not part of the prefill time
  auto t0 = std::chrono::steady_clock::now();
  const at::Tensor prefill_logits = engine.prefill(prompt);
  check_prefill_logits(prefill_logits);
  sampler.begin(prompt);
  int64_t next = sampler.sample(prefill_logits)[0];
  sampler.accept(next);
  std::vector<TokenLogprob> next_logprobs = logprobs_if_asked(params, prefill_logits, {next});
  result.prefill_ms = elapsed_ms(t0);

  auto t1 = std::chrono::steady_clock::now();
  if (greedy && pipelined_loops() && params.logprobs < 0) {
    // Pipelined: step s + 1 (its input is step s's argmax, already on the device) is queued before step s's
    // token is read, so the GPU never waits for the host. A step is queued only while the output has room
    // for two more tokens (as many steps as the synchronous loop runs at most); after a stop token the one
    // step in flight is discarded.
    if (output.commit({next})) {
      engine.set_token(next);
      engine.decode_step();
      engine.queue_token_copy(0);
      for (int64_t s = 0;; ++s) {
        if (static_cast<int64_t>(result.output_ids.size()) + 1 < params.max_new_tokens) {
          engine.decode_step();
          engine.queue_token_copy(static_cast<int>((s + 1) % 2));
        }
        if (!output.commit({engine.wait_token(static_cast<int>(s % 2))})) break;
      }
    }
    result.decode_ms = elapsed_ms(t1);  // the output is complete here
    engine.sync();                      // the step past a stop token, if one was queued
    return result;
  }
  bool first = true;
  while (output.commit({next}, next_logprobs)) {
    if (first || !greedy) engine.set_token(next);  // greedy: the graph's argmax already is the next input
    first = false;
    engine.decode_step();
    if (greedy && params.logprobs < 0) {
      next = engine.read_token();
    } else {
      const at::Tensor logits = engine.decode_logits();
      next = greedy ? engine.read_token() : sampler.sample(logits)[0];
      sampler.accept(next);
      next_logprobs = logprobs_if_asked(params, logits, {next});
    }
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
  const auto temperature_draw = attach_temperature_draw(sampler, B, engine.device());  // sampled steps only
  // greedy: the verify graph's argmax is the posterior; with a bias or penalties the host picks it from the logits
  const bool greedy = params.sampling.greedy() && !params.sampling.adjusts_logits();
  CycleTimer timer;
  const cudaStream_t stream = engine.stream().stream();

  engine.capture_graphs();  // one-time set-up (matmul tuning, graph capture): not part of the prefill time
  auto t0 = std::chrono::steady_clock::now();
  const at::Tensor prefill_logits = engine.prefill(prompt);
  check_prefill_logits(prefill_logits);
  sampler.begin(prompt);
  int64_t bonus = sampler.sample(prefill_logits)[0];
  sampler.accept(bonus);
  BlockLogprobs logprobs(params);
  logprobs.first_bonus(prefill_logits, bonus);
  result.prefill_ms = elapsed_ms(t0);

  // The first draft call consumes every prompt row; like the reference, it is timed apart from decoding.
  auto td = std::chrono::steady_clock::now();
  engine.first_draft(bonus);
  cudaStreamSynchronize(stream);
  result.first_draft_ms = elapsed_ms(td);
  result.draft_ms = result.first_draft_ms;
  auto decode_start = std::chrono::steady_clock::now();

  int64_t start = N;
  std::vector<int64_t> block(B), posterior(B);
  if (greedy && pipelined_loops() && !logprobs.on()) {
    // Pipelined: cycle k + 1 (draft, verify, accept: everything it needs is on the device after cycle k's
    // accept) is queued before cycle k's record is read, so the GPU never waits for the host's sync, its
    // read of the record and its next launches. Cycle k commits at most B tokens, so while start + B <
    // max_length only a stop token can end decoding with it; then cycle k + 1 is queued ahead, and after a
    // stop it is discarded (it writes cache rows below start + 2B <= the capacity). Near the length limit
    // the loop queues each cycle after reading the previous one, as the synchronous loop does.
    std::array<CycleTimer, 2> timers;
    auto queue_cycle = [&](int64_t k) {
      CycleTimer& t = timers[k % 2];
      t.mark(0, stream);
      if (k > 0) engine.draft_step();  // cycle 0's block was drafted by first_draft
      t.mark(1, stream);
      engine.verify_step();
      engine.accept_into(static_cast<int>(k % 2));  // + the record's copy, where accept_into makes one
      t.mark(2, stream);
    };
    queue_cycle(0);
    for (int64_t k = 0;; ++k) {
      const bool ahead = start + B < max_length;
      // cycle k + 1 starts below start + B and writes B rows from there: below max_length + B <= the capacity
      if (ahead && start + 2 * B > engine.capacity())
        fail("fast path: internal error: a cycle queued at start {} would pass the cache capacity {}", start + B,
             engine.capacity());
      if (ahead) queue_cycle(k + 1);
      const int64_t* rec = engine.wait_record(static_cast<int>(k % 2));
      std::copy(rec, rec + B, block.begin());
      std::copy(rec + B, rec + 2 * B, posterior.begin());
      const int64_t a = rec[2 * B];
      result.draft_ms += timers[k % 2].ms(0, 1);
      result.verify_ms += timers[k % 2].ms(1, 2);
      if (!finish_verify_step(output, result, params, block, posterior, a, max_length, start, bonus, logprobs, {}))
        break;
      if (!ahead) queue_cycle(k + 1);
    }
    result.decode_ms = elapsed_ms(decode_start);  // the output is complete here
    engine.sync();                                // the cycle past a stop token, if one was queued
    return result;
  }
  bool first_cycle = true;
  while (start < max_length) {
    timer.mark(0, stream);
    if (!first_cycle) engine.draft_step();
    first_cycle = false;
    timer.mark(1, stream);
    engine.verify_step();
    at::Tensor logits;  // the verify's rows, read back for sampling or the logprobs
    if (!greedy || logprobs.on()) logits = engine.verify_logits();
    if (greedy) {
      engine.accept();
    } else {
      std::vector<int64_t> drafted;  // the block on the host: the penalties' context of each row
      if (params.sampling.penalized()) {
        const at::Tensor ids = engine.draft_proposals().to(at::kCPU).contiguous();
        drafted.assign(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + B);
      }
      std::vector<int64_t> sampled = sampler.sample(logits, drafted);
      engine.accept(&sampled);
    }
    timer.mark(2, stream);
    const int64_t* rec = engine.read_record();  // the cycle's one host synchronisation
    std::copy(rec, rec + B, block.begin());
    std::copy(rec + B, rec + 2 * B, posterior.begin());
    const int64_t a = rec[2 * B];
    result.draft_ms += timer.ms(0, 1);
    result.verify_ms += timer.ms(1, 2);
    sampler.accept(posterior.data(), static_cast<size_t>(a + 1));  // block[1..a] and the new bonus

    if (!finish_verify_step(output, result, params, block, posterior, a, max_length, start, bonus, logprobs, logits))
      break;
  }
  result.decode_ms = elapsed_ms(decode_start);
  return result;
}

std::vector<TokenLogprob> prompt_logprobs_fast(model::FastEngine& engine, const std::vector<int64_t>& prompt,
                                               int64_t top_n, int64_t chunk, const std::function<bool()>& keep_going,
                                               at::Tensor* next_logits) {
  return prompt_logprobs_from(fast_piece_logits(engine, prompt), prompt, top_n, chunk, keep_going, next_logits);
}

PieceLogits fast_piece_logits(model::FastEngine& engine, const std::vector<int64_t>& tokens) {
  const at::Tensor ids = at::tensor(tokens, at::kLong).to(engine.device());
  return [&engine, ids](int64_t start, int64_t rows) { return engine.forward_rows(ids.narrow(0, start, rows), start); };
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
