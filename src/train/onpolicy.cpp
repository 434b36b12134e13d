// onpolicy.cpp — see onpolicy.h.
#include "train/onpolicy.h"

#include <c10/core/InferenceMode.h>

#include <memory>

#include <fmt/format.h>

#include "tools/progress.h"
#include "tools/runner.h"

namespace specpress::train {

std::vector<decode::GenerationResult> generate_greedy(const model::Qwen3Model& trainer_target, const std::string& target_dir,
                                                      const std::string& draft_dir,
                                                      const std::vector<std::vector<int64_t>>& prompts,
                                                      int64_t max_new_tokens, const std::string& label) {
  c10::InferenceMode inference;
  const at::Device device = trainer_target.device();
  std::unique_ptr<model::Qwen3Model> bf16_target;  // CUDA only: the fast path runs bf16
  if (device.is_cuda())
    bf16_target = std::make_unique<model::Qwen3Model>(model::Qwen3Model::load(target_dir, at::kBFloat16, device));
  const model::Qwen3Model& target = bf16_target ? *bf16_target : trainer_target;
  std::unique_ptr<model::DFlashDraft> draft;
  if (!draft_dir.empty())
    draft = std::make_unique<model::DFlashDraft>(model::DFlashDraft::load(draft_dir, target, target.dtype(), device));
  tools::GenerationRunner runner(target, draft.get());
  decode::GenerationParams params;
  params.max_new_tokens = max_new_tokens;
  params.stop_ids = target.config().eos_token_ids;
  std::vector<decode::GenerationResult> out;
  tools::ProgressBar progress(label, static_cast<int64_t>(prompts.size()));
  int64_t generated = 0;
  const std::string how = fmt::format("{}, greedy, {}{}", draft ? "DFlash" : "plain", device.is_cuda() ? "bf16" : "f32",
                                      runner.fast() ? ", CUDA fast path" : "");
  for (size_t i = 0; i < prompts.size(); ++i) {
    out.push_back(draft ? runner.dflash(prompts[i], params) : runner.plain(prompts[i], params));
    generated += static_cast<int64_t>(out.back().output_ids.size());
    progress.update(static_cast<int64_t>(i) + 1, fmt::format("{} tokens generated ({})", generated, how));
  }
  progress.finish();
  return out;
}

}  // namespace specpress::train
