// runner.cpp — see runner.h. The fast engines are sized for the largest generation (or echo scoring, sized for the
// generation after it) seen so far, or for what reserve() asked, and rebuilt only when a longer one comes (its first
// prefill captures the CUDA graphs). The first engine fuses the target's weights; the others share them.
#include "tools/runner.h"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>

#include "core/error.h"

#ifdef SPECPRESS_FAST_PATH
#include <cuda_runtime.h>

#include "decode/fast_generation.h"
#include "model/qwen3_fast.h"
#endif

namespace specpress::tools {

std::string device_description(const at::Device& device) {
  if (!device.is_cuda()) return device.str();
  int index = device.has_index() ? device.index() : 0;
#ifdef SPECPRESS_FAST_PATH
  if (!device.has_index() && cudaGetDevice(&index) != cudaSuccess) index = 0;
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, index) == cudaSuccess) return fmt::format("cuda:{} {}", index, prop.name);
#endif
  return fmt::format("cuda:{}", index);
}

#ifdef SPECPRESS_FAST_PATH
struct GenerationRunner::FastEngines {
  std::unique_ptr<model::FastEngine> plain, dflash;
  int64_t dflash_block = 0;
  model::FastTargetLayers target_layers;  // the newest engine's, shared by the engines built after it
};
#else
struct GenerationRunner::FastEngines {};
#endif

GenerationRunner::GenerationRunner(const model::Qwen3Model& target, const model::DFlashDraft* draft, bool reference_only)
    : target_(&target), draft_(draft) {
#ifdef SPECPRESS_FAST_PATH
  if (reference_only)
    why_not_fast_ = "the reference path was asked for";
  else if (model::fast_path_supported(target, draft, &why_not_fast_))
    fast_ = std::make_unique<FastEngines>();
#else
  (void)reference_only;
  why_not_fast_ = "a build without the CUDA fast path (SPECPRESS_CUDA off)";
#endif
}

GenerationRunner::~GenerationRunner() = default;

#ifdef SPECPRESS_FAST_PATH
model::FastEngine& GenerationRunner::fast_engine(bool dflash, int64_t block, int64_t capacity) {
  std::unique_ptr<model::FastEngine>& engine = dflash ? fast_->dflash : fast_->plain;
  if (!engine || engine->capacity() < capacity || (dflash && fast_->dflash_block != block)) {
    engine.reset();  // the old engine's buffers go before the new one's come
    const bool made = !fast_->target_layers.layers.empty();
    engine = std::make_unique<model::FastEngine>(*target_, dflash ? draft_ : nullptr, capacity, dflash ? block : 0,
                                                 made ? &fast_->target_layers : nullptr);
    fast_->target_layers = engine->target_layers();  // the same where shared; the newest where the folding changed
    if (dflash) fast_->dflash_block = block;
    ++engines_built_;
  }
  return *engine;
}
#endif

double GenerationRunner::reserve(int64_t positions, int64_t block_size) {
  const bool dflash = draft_ != nullptr;
  return build_now(dflash, dflash ? decode::resolve_block_size(*draft_, block_size) : 1, positions);
}

double GenerationRunner::reserve_plain(int64_t positions) { return build_now(false, 1, positions); }

double GenerationRunner::build_now(bool dflash, int64_t B, int64_t positions) {
#ifdef SPECPRESS_FAST_PATH
  if (!fast_) return 0;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    fast_engine(dflash, B, positions).capture_graphs();
  } catch (const c10::OutOfMemoryError& e) {
    (dflash ? fast_->dflash : fast_->plain).reset();
    fail("the CUDA fast path's engine for {} positions does not fit the device's memory (fewer positions need "
         "less): {}", positions, e.what_without_backtrace());
  } catch (...) {
    (dflash ? fast_->dflash : fast_->plain).reset();  // no half-built engine for the next generation
    throw;
  }
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
#else
  (void)dflash, (void)B, (void)positions;
  return 0;
#endif
}

decode::GenerationResult GenerationRunner::plain(const std::vector<int64_t>& prompt, const decode::GenerationParams& params,
                                                 const decode::TokenCallback& on_tokens) {
#ifdef SPECPRESS_FAST_PATH
  if (fast_ && params.observer == nullptr) {
    decode::validate_generation(*target_, prompt, params, 1);
    const int64_t needed = static_cast<int64_t>(prompt.size()) + params.max_new_tokens + 1;
    return decode::generate_plain_fast(fast_engine(false, 1, needed), *target_, prompt, params, on_tokens);
  }
#endif
  return decode::generate_plain(*target_, prompt, params, on_tokens);
}

decode::GenerationResult GenerationRunner::dflash(const std::vector<int64_t>& prompt, const decode::GenerationParams& params,
                                                  const decode::TokenCallback& on_tokens) {
  if (draft_ == nullptr) fail("internal: DFlash generation without a draft");
#ifdef SPECPRESS_FAST_PATH
  if (fast_ && params.observer == nullptr) {
    const int64_t B = decode::resolve_block_size(*draft_, params.block_size);
    decode::validate_generation(*target_, prompt, params, B);
    const int64_t needed = static_cast<int64_t>(prompt.size()) + params.max_new_tokens + B;
    return decode::generate_dflash_fast(fast_engine(true, B, needed), *target_, *draft_, prompt, params, on_tokens);
  }
#endif
  return decode::generate_dflash(*target_, *draft_, prompt, params, on_tokens);
}

std::vector<decode::TokenLogprob> GenerationRunner::prompt_logprobs(const std::vector<int64_t>& prompt,
                                                                    const decode::GenerationParams& params,
                                                                    int64_t top_n, int64_t chunk,
                                                                    const std::function<bool()>& keep_going,
                                                                    at::Tensor* next_logits) {
#ifdef SPECPRESS_FAST_PATH
  const int64_t N = static_cast<int64_t>(prompt.size()), max_positions = target_->config().max_position_embeddings;
  // (a lone token without its next row has nothing to score: no engine for it)
  if (fast_ && params.observer == nullptr && N <= max_positions && (N > 1 || next_logits != nullptr)) {
    decode::validate_prompt_ids(*target_, prompt);  // the engine's embedding does not check them
    // the engine the generation after the scoring takes (DFlash with a draft), sized for it where that fits the
    // model's positions, else for the prompt alone; an engine already holding that many positions (a server's:
    // reserve) is taken as it is. With max_tokens 0 (no generation) the DFlash engine of any block size serves:
    // the scoring runs only the target's forward.
    const bool dflash = draft_ != nullptr;
    int64_t B = dflash ? decode::resolve_block_size(*draft_, params.block_size) : 1;
    if (dflash && params.max_new_tokens == 0 && fast_->dflash && fast_->dflash->capacity() >= N)
      B = fast_->dflash_block;
    const int64_t generation = params.max_new_tokens > 0 ? N + params.max_new_tokens + B : N;
    // an engine holds at least a block and a position past it
    const int64_t capacity = std::max(generation <= max_positions ? generation : N, B + 1);
    model::FastEngine& engine = fast_engine(dflash, B, capacity);
    return decode::prompt_logprobs_fast(engine, prompt, top_n, chunk, keep_going, next_logits);
  }
#endif
  return decode::prompt_logprobs(*target_, prompt, top_n, chunk, keep_going, next_logits);
}

}  // namespace specpress::tools
