// onpolicy.cpp — see onpolicy.h.
#include "train/onpolicy.h"

#include <c10/core/InferenceMode.h>

#include <cstdio>
#include <filesystem>
#include <memory>

#include <fmt/format.h>

#include "core/error.h"
#include "core/json_depth.h"
#include "io/mapped_file.h"
#include "tools/progress.h"
#include "tools/runner.h"
#include "tools/stop_signals.h"

namespace specpress::train {

Generations generate_greedy(const model::Qwen3Model& trainer_target, const std::string& target_dir,
                            const std::string& draft_dir, const std::vector<std::vector<int64_t>>& prompts,
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
  Generations out;
  const tools::StopSignals signals("after the generation in flight, with the ones done saved");
  tools::ProgressBar progress(label, static_cast<int64_t>(prompts.size()));
  int64_t generated = 0;
  const std::string how = fmt::format("{}, greedy, {}{}", draft ? "DFlash" : "plain", device.is_cuda() ? "bf16" : "f32",
                                      runner.fast() ? ", CUDA fast path" : "");
  for (size_t i = 0; i < prompts.size() && signals.received() == 0; ++i) {
    out.results.push_back(draft ? runner.dflash(prompts[i], params) : runner.plain(prompts[i], params));
    generated += static_cast<int64_t>(out.results.back().output_ids.size());
    progress.update(static_cast<int64_t>(i) + 1, fmt::format("{} tokens generated ({})", generated, how));
  }
  out.stopped_by = signals.received();
  if (out.stopped_by != 0) progress.stop();
  else progress.finish();
  return out;
}

namespace {
nlohmann::json read_cache_records(const std::string& out) {
  const std::string path = (std::filesystem::path(out) / "generations.json").string();
  if (!std::filesystem::exists(path)) return nlohmann::json::object();
  const nlohmann::json records = nlohmann::json::parse(depth_checked(io::read_text_file(path), path), nullptr, false);
  if (!records.is_object()) fail("{}: not a JSON object (the record of OUT's generation caches); delete it", path);
  return records;
}
}  // namespace

std::optional<std::string> cache_made_otherwise(const std::string& out, const std::string& file,
                                                const nlohmann::json& made_with) {
  const nlohmann::json records = read_cache_records(out);
  if (!records.contains(file)) return std::nullopt;
  const nlohmann::json& was = records[file];
  for (const auto& [key, value] : made_with.items()) {
    const nlohmann::json then = was.contains(key) ? was[key] : nlohmann::json();
    if (then.is_null() && key.size() > 12 && key.compare(key.size() - 12, 12, "_fingerprint") == 0) {
      // recorded since: an older run's cache is reused as its path and options vouch for it
      if (value == "") continue;  // no such model now either (no --draft)
      std::fprintf(stderr, "note: %s/generations.json records no %s for %s (an older run's); the model that made "
                   "it is not checked\n", out.c_str(), key.c_str(), file.c_str());
      continue;
    }
    if (then != value) return fmt::format("{} is {} now but was {}", key, value.dump(), then.dump());
  }
  return std::nullopt;
}

void record_cache(const std::string& out, const std::string& file, const nlohmann::json& made_with) {
  nlohmann::json records = read_cache_records(out);
  records[file] = made_with;
  io::write_file_atomic((std::filesystem::path(out) / "generations.json").string(), records.dump(2) + "\n");
}

void generation_interrupted(const std::string& trainer, int signal, size_t done, size_t total,
                            const std::string& file) {
  if (done == 0)
    throw Interrupted(signal, fmt::format("{}: stopped by {} before its first generation ended; nothing was saved",
                                          trainer, tools::StopSignals::name(signal)));
  throw Interrupted(signal, fmt::format("{}: stopped by {} after {} of {} generations; {} holds them: the same command "
                                        "with --resume continues from there", trainer, tools::StopSignals::name(signal),
                                        done, total, file));
}

}  // namespace specpress::train
