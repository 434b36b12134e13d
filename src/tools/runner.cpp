// runner.cpp — see runner.h. The fast engines are sized for the largest generation seen so far and
// rebuilt only when a longer one comes (building one fuses weights and captures CUDA graphs).
#include "tools/runner.h"

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
};
#else
struct GenerationRunner::FastEngines {};
#endif

GenerationRunner::GenerationRunner(const model::Qwen3Model& target, const model::DFlashDraft* draft, bool reference_only)
    : target_(&target), draft_(draft) {
#ifdef SPECPRESS_FAST_PATH
  if (!reference_only && model::fast_path_supported(target, draft, nullptr)) fast_ = std::make_unique<FastEngines>();
#else
  (void)reference_only;
#endif
}

GenerationRunner::~GenerationRunner() = default;

decode::GenerationResult GenerationRunner::plain(const std::vector<int64_t>& prompt, const decode::GenerationParams& params,
                                                 const decode::TokenCallback& on_tokens) {
#ifdef SPECPRESS_FAST_PATH
  if (fast_ && params.observer == nullptr) {
    decode::validate_generation(*target_, prompt, params, 1);
    const int64_t needed = static_cast<int64_t>(prompt.size()) + params.max_new_tokens + 1;
    if (!fast_->plain || fast_->plain->capacity() < needed)
      fast_->plain = std::make_unique<model::FastEngine>(*target_, nullptr, needed);
    return decode::generate_plain_fast(*fast_->plain, *target_, prompt, params, on_tokens);
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
    if (!fast_->dflash || fast_->dflash->capacity() < needed || fast_->dflash_block != B) {
      fast_->dflash = std::make_unique<model::FastEngine>(*target_, draft_, needed, B);
      fast_->dflash_block = B;
    }
    return decode::generate_dflash_fast(*fast_->dflash, *target_, *draft_, prompt, params, on_tokens);
  }
#endif
  return decode::generate_dflash(*target_, *draft_, prompt, params, on_tokens);
}

}  // namespace specpress::tools
