// cmd_perplexity.cpp — `specpress perplexity -m DIR (-f FILE | -p TEXT | --prompt-ids IDS | --prompt-ids-file FILE)
// [-c 512] [--chunks N]`.
// Prints each chunk's running perplexity to stderr as llama-perplexity does ([1]x,[2]y,...), then
// "Final estimate: PPL = x +/- y" to stdout, or with --json one JSON object (with the build, device, dtype and path).
// A bf16 model on CUDA is scored on the fast path's engine (tools/perplexity.h) unless --reference-path.
// --kl-base-model/--kl-base-dtype/--kl-base-device load a base (another checkpoint with the same vocabulary, or this
// one a second time, e.g. f32 against bf16 on CUDA) and print llama-perplexity --kl-divergence's per-chunk table and
// its three blocks of statistics in its own lines, so that scripts that read llama.cpp's output read ours.
#include "cli/cmd_perplexity.h"

#include <c10/core/InferenceMode.h>
#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <cstdio>
#include <memory>

#include "cli/common.h"
#include "cli/id_list.h"
#include "cli/prompt_flags.h"
#include "core/error.h"
#include "model/qwen3.h"
#include "tools/build_info.h"
#include "tools/perplexity.h"
#include "tools/runner.h"

namespace specpress::cli {
namespace {

struct PerplexityOptions {
  std::string model_dir, device = "auto", dtype = "auto";
  RawPromptFlags prompt;
  std::string base_model, base_device, base_dtype;  // empty: as -m / --device / --dtype; all empty: no base
  int64_t ctx_size = 512, chunks = 0;
  bool json = false, reference_path = false;
};

// llama-perplexity's label of a quantile line: "Maximum", "99.9%", "Median", " 5.0%", "Minimum", padded to 8.
std::string quantile_label(double fraction) {
  const std::string label = fraction == 1.0   ? "Maximum"
                            : fraction == 0.0 ? "Minimum"
                            : fraction == 0.5 ? "Median"
                                              : fmt::format("{:4.1f}%", 100 * fraction);
  return fmt::format("{:<8}", label);
}

nlohmann::ordered_json distribution_json(const tools::RowDistribution& d) {
  nlohmann::ordered_json quantiles;
  for (size_t i = 0; i < tools::kPerplexityQuantiles.size(); ++i) {
    const double f = tools::kPerplexityQuantiles[i];
    quantiles[f == 1.0 ? "max" : f == 0.0 ? "min" : f == 0.5 ? "median" : fmt::format("p{:g}", 100 * f)] =
        d.quantiles[i];
  }
  return {{"mean", d.mean}, {"stderr", d.stderr_mean}, {"quantiles", quantiles}};
}

// llama-perplexity --kl-divergence's three blocks, in its own lines (Q: the model, base: the base).
void print_kl_statistics(const tools::PerplexityResult& r) {
  const tools::KlDivergence& kl = *r.kl;
  std::printf("\n====== Perplexity statistics ======\n");
  std::printf("Mean PPL(Q)                   : %10.6f \u00b1 %10.6f\n", r.ppl, r.ppl_stderr);
  std::printf("Mean PPL(base)                : %10.6f \u00b1 %10.6f\n", kl.base_ppl, kl.base_ppl_stderr);
  std::printf("Cor(ln(PPL(Q)), ln(PPL(base))): %6.2f%%\n", 100 * kl.nll_correlation);
  std::printf("Mean ln(PPL(Q)/PPL(base))     : %10.6f \u00b1 %10.6f\n", kl.ln_ppl_ratio, kl.ln_ppl_ratio_stderr);
  std::printf("Mean PPL(Q)/PPL(base)         : %10.6f \u00b1 %10.6f\n", kl.ppl_ratio, kl.ppl_ratio_stderr);
  std::printf("Mean PPL(Q)-PPL(base)         : %10.6f \u00b1 %10.6f\n", kl.ppl_diff, kl.ppl_diff_stderr);
  std::printf("\n====== KL divergence statistics ======\n");
  std::printf("Mean    KLD: %10.6f \u00b1 %10.6f\n", kl.kld.mean, kl.kld.stderr_mean);
  for (size_t i = 0; i < tools::kPerplexityQuantiles.size(); ++i) {
    const double f = tools::kPerplexityQuantiles[i];
    if (f == 0.75 || f == 0.25) continue;  // llama prints these for Δp only
    std::printf("%sKLD: %10.6f\n", quantile_label(f).c_str(), kl.kld.quantiles[i]);
  }
  std::printf("\n====== Token probability statistics ======\n");
  std::printf("Mean    \u0394p: %6.3f \u00b1 %5.3f %%\n", 100 * kl.delta_p.mean, 100 * kl.delta_p.stderr_mean);
  for (size_t i = 0; i < tools::kPerplexityQuantiles.size(); ++i)
    std::printf("%s\u0394p: %6.3f%%\n", quantile_label(tools::kPerplexityQuantiles[i]).c_str(),
                100 * kl.delta_p.quantiles[i]);
  std::printf("RMS \u0394p    : %6.3f \u00b1 %5.3f %%\n", 100 * kl.rms_delta_p, 100 * kl.rms_delta_p_stderr);
  std::printf("Same top p: %6.3f \u00b1 %5.3f %%\n", 100 * kl.same_top, 100 * kl.same_top_stderr);
}

int run_perplexity(const PerplexityOptions& o) {
  c10::InferenceMode inference_mode;
  const auto [device, dtype] = parse_placement(o.device, o.dtype);
  const std::vector<int64_t> tokens = raw_prompt_tokens(o.prompt, o.model_dir, "perplexity");

  const bool compare = !o.base_model.empty() || !o.base_device.empty() || !o.base_dtype.empty();
  const std::string base_model = o.base_model.empty() ? o.model_dir : o.base_model;
  const at::Device base_device = model::parse_device(o.base_device.empty() ? o.device : o.base_device, "--kl-base-device");
  // an unset --kl-base-dtype is --dtype's value, auto resolved on the base's own device (a CPU base: f32)
  const at::ScalarType base_dtype = model::parse_compute_dtype(o.base_dtype.empty() ? o.dtype : o.base_dtype,
                                                               base_device, "--kl-base-dtype");
  const std::string base_dtype_name = model::compute_dtype_name(base_dtype);
  if (compare) model::check_dtype_on_device(base_dtype, base_device, "--kl-base-dtype");
  std::error_code ec;  // the same directory however spelt, the same GPU whether or not its index was named
  if (compare && std::filesystem::equivalent(base_model, o.model_dir, ec) &&
      tools::device_description(base_device) == tools::device_description(device) && base_dtype == dtype)
    std::fprintf(stderr, "warning: the base is the model itself (%s, %s, %s): it is compared with itself; give "
                 "--kl-base-dtype, --kl-base-device or --kl-base-model that differs\n", o.model_dir.c_str(),
                 tools::device_description(device).c_str(), base_dtype_name.c_str());
  if (!o.base_model.empty() && !std::filesystem::is_directory(o.base_model))
    fail("--kl-base-model: {} is not a directory (expected an HF Qwen3 checkpoint's)", o.base_model);
  const model::Qwen3Model target = model::Qwen3Model::load(o.model_dir, dtype, device);
  check_raw_prompt_vocab(o.prompt, tokens, target.config().vocab_size);
  std::unique_ptr<model::Qwen3Model> base;
  if (compare) base = std::make_unique<model::Qwen3Model>(model::Qwen3Model::load(base_model, base_dtype, base_device));
  const int64_t n_chunks = tools::perplexity_chunks(target, tokens, o.ctx_size, o.chunks, base.get());
  std::fprintf(stderr, "perplexity: %zu tokens, %lld chunks of %lld (scoring the second half of each)\n",
               tokens.size(), static_cast<long long>(n_chunks), static_cast<long long>(o.ctx_size));
  if (compare) {
    std::fprintf(stderr, "perplexity: base %s (%s, %s)\n", base_model.c_str(),
                 tools::device_description(base_device).c_str(), base_dtype_name.c_str());
    std::fprintf(stderr, "chunk             PPL               ln(PPL(Q)/PPL(base))          KL Divergence"
                         "              \u0394p RMS            Same top p\n");
  }
  const auto on_chunk = [](int64_t done, const tools::PerplexityResult& so_far) {
    if (!so_far.kl) {
      std::fprintf(stderr, "[%lld]%.4f,", static_cast<long long>(done), so_far.ppl);
    } else {
      const tools::KlDivergence& kl = *so_far.kl;
      std::fprintf(stderr, "%5lld %12.4f \u00b1 %10.4f %12.5f \u00b1 %10.5f %12.5f \u00b1 %10.5f %9.3f \u00b1 %6.3f %% "
                           "%9.3f \u00b1 %6.3f %%\n",
                   static_cast<long long>(done), so_far.ppl, so_far.ppl_stderr, kl.ln_ppl_ratio, kl.ln_ppl_ratio_stderr,
                   kl.kld.mean, kl.kld.stderr_mean, 100 * kl.rms_delta_p, 100 * kl.rms_delta_p_stderr,
                   100 * kl.same_top, 100 * kl.same_top_stderr);
    }
    std::fflush(stderr);
  };
  const auto t0 = std::chrono::steady_clock::now();
  const tools::PerplexityResult r =
      tools::perplexity(target, tokens, o.ctx_size, o.chunks, on_chunk, base.get(), 256, o.reference_path);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  auto path_name = [](bool fast) { return fast ? "the CUDA fast path" : "the reference path"; };
  std::fprintf(stderr, "%sperplexity: %lld tokens scored in %.2f s (%.1f tokens/s evaluated) on %s%s%s\n",
               compare ? "" : "\n", static_cast<long long>(r.tokens_scored), seconds,
               seconds > 0 ? static_cast<double>(r.chunks * r.n_ctx) / seconds : 0.0, path_name(r.fast_path),
               compare ? ", the base on " : "", compare ? path_name(r.base_fast_path) : "");
  if (o.json) {
    nlohmann::ordered_json j;
    j["build"] = tools::build_line();
    j["device"] = tools::device_description(device);
    j["dtype"] = model::compute_dtype_name(dtype);
    j["path"] = r.fast_path ? "cuda-fast" : "reference";
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
      const tools::KlDivergence& kl = *r.kl;
      j["kl"] = {{"base_model", base_model},
                 {"base_device", tools::device_description(base_device)},
                 {"base_dtype", base_dtype_name},
                 {"base_path", r.base_fast_path ? "cuda-fast" : "reference"},
                 {"base_ppl", kl.base_ppl},
                 {"base_ppl_stderr", kl.base_ppl_stderr},
                 {"nll_correlation", kl.nll_correlation},
                 {"ln_ppl_ratio", kl.ln_ppl_ratio},
                 {"ln_ppl_ratio_stderr", kl.ln_ppl_ratio_stderr},
                 {"ppl_ratio", kl.ppl_ratio},
                 {"ppl_ratio_stderr", kl.ppl_ratio_stderr},
                 {"ppl_diff", kl.ppl_diff},
                 {"ppl_diff_stderr", kl.ppl_diff_stderr},
                 {"kld", distribution_json(kl.kld)},
                 {"delta_p", distribution_json(kl.delta_p)},
                 {"rms_delta_p", kl.rms_delta_p},
                 {"rms_delta_p_stderr", kl.rms_delta_p_stderr},
                 {"same_top", kl.same_top},
                 {"same_top_stderr", kl.same_top_stderr}};
    }
    j["seconds"] = seconds;
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("Final estimate: PPL = %.4f +/- %.5f\n", r.ppl, r.ppl_stderr);
    if (r.kl) print_kl_statistics(r);
  }
  return 0;
}

}  // namespace

void add_perplexity_command(CLI::App& app, std::function<int()>& run) {
  auto o = std::make_shared<PerplexityOptions>();
  CLI::App* cmd = app.add_subcommand(
      "perplexity", "the target's perplexity over a text, as llama-perplexity measures it (second half of each chunk)");
  cmd->add_option("-m,--model", o->model_dir, "target model directory (HF Qwen3)")->required();
  add_raw_prompt_flags(*cmd, o->prompt, "the text to score (e.g. wikitext-2's test set)");
  cmd->add_option("-c,--ctx-size", o->ctx_size, "tokens a chunk (its second half is scored)")->capture_default_str();
  cmd->add_option("--chunks", o->chunks, "score at most this many chunks (0 or -1: all)")->capture_default_str();
  add_placement_flags(*cmd, o->device, o->dtype);
  cmd->add_option("--kl-base-model", o->base_model,
                  "also score with this checkpoint (same vocabulary) as the base: llama-perplexity --kl-divergence's "
                  "statistics (KL(base || model), PPL ratio, \u0394p, same top token)");
  cmd->add_option("--kl-base-dtype", o->base_dtype,
                  "the base's dtype (default: --dtype, auto resolved on the base's device); alone, the base is -m "
                  "itself in this dtype");
  cmd->add_option("--kl-base-device", o->base_device, "the base's device (default: --device)");
  cmd->add_flag("--reference-path", o->reference_path,
                "use the reference ATen forward even where the CUDA fast path applies (the model and the base)");
  cmd->add_flag("--json", o->json, "print one JSON object (perplexity, its error, each chunk's running value, build)");
  cmd->callback([&run, o]() { run = [o]() { return run_perplexity(*o); }; });
}

}  // namespace specpress::cli
