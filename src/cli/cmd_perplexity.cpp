// cmd_perplexity.cpp — `specpress perplexity -m DIR (-f FILE | -p TEXT | --prompt-ids IDS) [-c 512] [--chunks N]`.
// Prints each chunk's running perplexity to stderr as llama-perplexity does ([1]x,[2]y,...), then
// "Final estimate: PPL = x +/- y" to stdout, or with --json one JSON object (with the build, device and dtype).
// --kl-base-dtype/--kl-base-device load the checkpoint a second time as the base and add llama-perplexity's
// --kl-divergence statistics (KL(base || model), same top token, the PPL ratio), e.g. bf16 on CUDA against f32.
#include "cli/cmd_perplexity.h"

#include <c10/core/InferenceMode.h>

#include <chrono>
#include <cstdio>
#include <memory>

#include "cli/common.h"
#include "core/error.h"
#include "model/qwen3.h"
#include "tools/build_info.h"
#include "tools/perplexity.h"
#include "tools/runner.h"

namespace specpress::cli {
namespace {

struct PerplexityOptions {
  std::string model_dir, prompt_ids, prompt_text, prompt_file, device = "cpu", dtype = "f32";
  std::string base_device, base_dtype;  // empty: as --device / --dtype; both empty: no base
  int64_t ctx_size = 512, chunks = 0;
  bool json = false;
};

int run_perplexity(const PerplexityOptions& o) {
  c10::InferenceMode inference_mode;
  const at::Device device = model::parse_device(o.device, "--device");
  const at::ScalarType dtype = model::parse_compute_dtype(o.dtype, "--dtype");
  model::check_dtype_on_device(dtype, device, "--dtype");
  const int given = !o.prompt_ids.empty() + !o.prompt_text.empty() + !o.prompt_file.empty();
  if (given != 1) fail("perplexity: give exactly one of -f/--file, -p/--prompt or --prompt-ids");
  std::vector<int64_t> tokens;
  if (!o.prompt_ids.empty()) {
    tokens = parse_id_list(o.prompt_ids, "--prompt-ids");
  } else {
    const std::optional<tok::Tokenizer> tokenizer = load_tokenizer_if_present(o.model_dir);
    if (!tokenizer)
      fail("{}: -f/-p need the model's tokenizer, but the directory has no tokenizer.json; pass --prompt-ids",
           o.model_dir);
    const std::vector<int32_t> ids = tokenizer->encode(read_prompt_text(o.prompt_text, o.prompt_file));
    tokens.assign(ids.begin(), ids.end());
  }

  const bool compare = !o.base_device.empty() || !o.base_dtype.empty();
  const at::Device base_device = model::parse_device(o.base_device.empty() ? o.device : o.base_device, "--kl-base-device");
  const at::ScalarType base_dtype =
      model::parse_compute_dtype(o.base_dtype.empty() ? o.dtype : o.base_dtype, "--kl-base-dtype");
  if (compare) model::check_dtype_on_device(base_dtype, base_device, "--kl-base-dtype");
  const model::Qwen3Model target = model::Qwen3Model::load(o.model_dir, dtype, device);
  std::unique_ptr<model::Qwen3Model> base;
  if (compare) base = std::make_unique<model::Qwen3Model>(model::Qwen3Model::load(o.model_dir, base_dtype, base_device));
  const int64_t n_chunks = static_cast<int64_t>(tokens.size()) / std::max<int64_t>(o.ctx_size, 1);
  std::fprintf(stderr, "perplexity: %zu tokens, %lld chunks of %lld (scoring the second half of each)\n",
               tokens.size(), static_cast<long long>(o.chunks > 0 ? std::min(o.chunks, n_chunks) : n_chunks),
               static_cast<long long>(o.ctx_size));
  const auto t0 = std::chrono::steady_clock::now();
  const tools::PerplexityResult r = tools::perplexity(target, tokens, o.ctx_size, o.chunks, [](int64_t done, double ppl) {
    std::fprintf(stderr, "[%lld]%.4f,", static_cast<long long>(done), ppl);
    std::fflush(stderr);
  }, base.get());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "\nperplexity: %lld tokens scored in %.2f s (%.1f tokens/s evaluated)\n",
               static_cast<long long>(r.tokens_scored), seconds,
               seconds > 0 ? static_cast<double>(r.chunks * r.n_ctx) / seconds : 0.0);
  if (o.json) {
    nlohmann::ordered_json j;
    j["build"] = tools::build_line();
    j["device"] = tools::device_description(device);
    j["dtype"] = o.dtype;
    j["model"] = o.model_dir;
    j["ctx_size"] = r.n_ctx;
    j["chunks"] = r.chunks;
    j["tokens"] = tokens.size();
    j["tokens_scored"] = r.tokens_scored;
    j["ppl"] = r.ppl;
    j["ppl_stderr"] = r.ppl_stderr;
    j["nll_mean"] = r.nll_mean;
    j["nll_stderr"] = r.nll_stderr;
    j["running_ppl"] = r.running_ppl;
    if (r.kl) {
      j["kl"] = {{"base_device", tools::device_description(base_device)},
                 {"base_dtype", o.base_dtype.empty() ? o.dtype : o.base_dtype},
                 {"base_ppl", r.kl->base_ppl},
                 {"ppl_ratio", r.kl->ppl_ratio},
                 {"kld_mean", r.kl->kld_mean},
                 {"kld_stderr", r.kl->kld_stderr},
                 {"kld_max", r.kl->kld_max},
                 {"kld_p99", r.kl->kld_p99},
                 {"same_top", r.kl->same_top}};
    }
    j["seconds"] = seconds;
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("Final estimate: PPL = %.4f +/- %.5f\n", r.ppl, r.ppl_stderr);
    if (r.kl) {
      std::printf("Base (%s, %s): PPL = %.4f\n", tools::device_description(base_device).c_str(),
                  (o.base_dtype.empty() ? o.dtype : o.base_dtype).c_str(), r.kl->base_ppl);
      std::printf("Mean PPL(model)/PPL(base): %.6f\n", r.kl->ppl_ratio);
      std::printf("Mean KLD: %.8f +/- %.8f\n", r.kl->kld_mean, r.kl->kld_stderr);
      std::printf("Maximum KLD: %.8f\n99.0%% KLD: %.8f\n", r.kl->kld_max, r.kl->kld_p99);
      std::printf("Same top token: %.3f%%\n", 100.0 * r.kl->same_top);
    }
  }
  return 0;
}

}  // namespace

void add_perplexity_command(CLI::App& app, std::function<int()>& run) {
  auto o = std::make_shared<PerplexityOptions>();
  CLI::App* cmd = app.add_subcommand(
      "perplexity", "the target's perplexity over a text, as llama-perplexity measures it (second half of each chunk)");
  cmd->add_option("-m,--model", o->model_dir, "target model directory (HF Qwen3)")->required();
  cmd->add_option("-f,--file", o->prompt_file, "the text to score (a file's exact bytes, e.g. wikitext-2's test set)");
  cmd->add_option("-p,--prompt", o->prompt_text, "the text to score");
  cmd->add_option("--prompt-ids", o->prompt_ids, "token ids to score, comma-separated");
  cmd->add_option("-c,--ctx-size", o->ctx_size, "tokens a chunk (its second half is scored)")->capture_default_str();
  cmd->add_option("--chunks", o->chunks, "score at most this many chunks (0 or -1: all)")->capture_default_str();
  cmd->add_option("--device", o->device, "cpu or cuda")->capture_default_str();
  cmd->add_option("--dtype", o->dtype, "compute dtype: f32, bf16 or f16")->capture_default_str();
  cmd->add_option("--kl-base-dtype", o->base_dtype,
                  "also score with the checkpoint in this dtype as the base: KL(base || model), same top token");
  cmd->add_option("--kl-base-device", o->base_device, "the base's device (default: --device)");
  cmd->add_flag("--json", o->json, "print one JSON object (perplexity, its error, each chunk's running value, build)");
  cmd->callback([&run, o]() { run = [o]() { return run_perplexity(*o); }; });
}

}  // namespace specpress::cli
