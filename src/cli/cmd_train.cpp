// cmd_train.cpp — `specpress train-lm --config JSON --data FILE... --out DIR [...]` and
// `specpress train-draft --target DIR (--data FILE... | --on-policy-prompts FILE...) --out DIR [...]` and
// `specpress train-compressor --target DIR [--draft DIR] (--on-policy-prompts FILE... | --data FILE...) --out DIR`.
// Text data is tokenized with the model directory's tokenizer (the target's, or --tokenizer for
// train-lm); progress goes to stderr, the model and checkpoints to --out.
#include "cli/cmd_train.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "cli/common.h"
#include "cli/id_list.h"
#include "core/error.h"
#include "train/compressor_trainer.h"
#include "train/draft_trainer.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "tools/progress.h"
#include "train/lm_trainer.h"

namespace specpress::cli {
namespace {
namespace fs = std::filesystem;

// Text -> ids with the tokenizer of `dir` (named by `flag` in messages); empty functions when unavailable.
train::TextCodec make_codec(const std::string& dir, const std::string& flag) {
  train::TextCodec codec;
  if (dir.empty() || !fs::exists(fs::path(dir) / "tokenizer.json")) {
    codec.missing = dir.empty() ? fmt::format("pass {} DIR with a tokenizer.json", flag)
                                : fmt::format("{} ({}) has no tokenizer.json", dir, flag);
    return codec;
  }
  auto tokenizer = std::make_shared<tok::Tokenizer>(tok::Tokenizer::from_dir(dir));
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja"})
    if (fs::exists(fs::path(dir) / name)) codec.files.push_back((fs::path(dir) / name).string());
  codec.used = std::make_shared<bool>(false);
  codec.encode = [tokenizer, used = codec.used](const std::string& text) {
    *used = true;
    std::vector<int32_t> ids = tokenizer->encode(text);
    return std::vector<int64_t>(ids.begin(), ids.end());
  };
  codec.chat = [tokenizer, dir, used = codec.used](const train::TextCodec::Messages& messages,
                                                  bool add_generation_prompt) {
    *used = true;
    if (!tok::is_qwen3_chat_template(tokenizer->chat_template()))
      fail("{}: chat data needs the Qwen3 chat template (tokenizer_config.json or chat_template.jinja)", dir);
    std::vector<tok::ChatMessage> chat;
    for (const auto& [role, content] : messages) chat.push_back(tok::ChatMessage{role, content, std::nullopt});
    return tok::render_qwen3_chat(chat, add_generation_prompt, /*enable_thinking=*/false);
  };
  return codec;
}

void add_common_options(CLI::App* cmd, train::CommonOptions& o) {
  cmd->add_option("--data", o.data,
                  "training data: records (ids, text, messages, prompt+completion) a line in .jsonl/.ndjson or in one "
                  "array in .json, or text files");
  cmd->add_option("-o,--out", o.out, "output directory (model, checkpoint)")->required();
  cmd->add_option("--steps", o.steps, "optimizer steps")->capture_default_str();
  cmd->add_option("--batch", o.batch, "sequences per step")->capture_default_str();
  cmd->add_option("--seq-len", o.seq_len,
                  "tokens per sequence (train-lm: a window of the packed stream; the others cut longer ones to it)")
      ->capture_default_str();
  cmd->add_option("--lr", o.optim.lr, "peak learning rate (AdamW)")->capture_default_str();
  cmd->add_option("--min-lr-ratio", o.optim.min_lr_ratio,
                  "where the cosine decay ends, as a fraction of --lr (one step after the last)")
      ->capture_default_str();
  cmd->add_option("--warmup", o.optim.warmup_steps, "linear warmup steps")->capture_default_str();
  cmd->add_option("--weight-decay", o.optim.weight_decay, "AdamW decoupled weight decay (matrices only)")
      ->capture_default_str();
  cmd->add_option("--grad-clip", o.optim.grad_clip, "max global gradient norm (0 = off)")->capture_default_str();
  cmd->add_option("--seed", o.seed, "seed of the initialisation and the data order (and train-draft's anchors)")
      ->capture_default_str();
  add_device_flag(*cmd, o.device);
  cmd->add_option("--save-dtype", o.save_dtype, "dtype of the exported model: bf16, f32 or f16")->capture_default_str();
  cmd->add_flag_callback("--no-autocast", [&o] { o.autocast = false; },
                         "train in float32 on CUDA too (default: bf16 autocast on CUDA)");
  cmd->add_option("--save-every", o.save_every, "checkpoint and export every N steps (0 = at the end)")
      ->capture_default_str();
  cmd->add_option("--stop-after", o.stop_after,
                  "stop after N steps of this invocation, leaving a checkpoint (0 = off)");
  cmd->add_flag("--resume", o.resume, "continue the training in --out from its checkpoint");
  cmd->add_flag("--force", o.force, "delete an existing --out first (one that holds only a training's files)");
}

void print_summary(const char* label, const train::TrainSummary& s, std::chrono::steady_clock::time_point t0) {
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (s.losses.empty()) {
    std::fprintf(stderr, "%s: nothing to do (already at step %lld)\n", label, static_cast<long long>(s.last_step));
    return;
  }
  auto mean = [&](size_t from, size_t to) {
    double sum = 0;
    for (size_t i = from; i < to; ++i) sum += s.losses[i].second;
    return sum / static_cast<double>(to - from);
  };
  const size_t n = s.losses.size(), k = std::max<size_t>(1, std::min<size_t>(10, n / 2));
  std::fprintf(stderr, "%s: steps %lld..%lld in %s; loss %.4f (first %zu) -> %.4f (last %zu)\n", label,
               static_cast<long long>(s.first_step + 1), static_cast<long long>(s.last_step),
               tools::format_duration(seconds).c_str(), mean(0, k), k, mean(n - k, n), k);
  if (!s.eval_values.empty())
    std::fprintf(stderr, "%s: final eval %s %.4f\n", label, s.eval_name.c_str(), s.eval_values.back());
}

}  // namespace

void add_train_commands(CLI::App& app, std::function<int()>& run) {
  auto lm = std::make_shared<train::LmOptions>();
  CLI::App* lm_cmd = app.add_subcommand("train-lm", "train a small Qwen3-architecture LM from scratch (HF checkpoint out)");
  lm_cmd->footer("The documents are packed into one stream, and every token is trained on, prompt parts included.");
  lm_cmd->add_option("--config", lm->config_path, "Qwen3 config.json of the model to train")->required();
  lm_cmd->add_option("--tokenizer", lm->tokenizer_dir, "directory with tokenizer.json (text data; copied into --out)");
  add_common_options(lm_cmd, *lm);
  lm_cmd->get_option("--data")->required();  // the others can generate their data instead
  lm_cmd->callback([&run, lm]() {
    run = [lm]() {
      auto t0 = std::chrono::steady_clock::now();
      print_summary("train-lm", train::train_lm(*lm, make_codec(lm->tokenizer_dir, "--tokenizer")), t0);
      return 0;
    };
  });

  auto d = std::make_shared<train::DraftOptions>();
  auto tap_ids = std::make_shared<std::string>();
  CLI::App* d_cmd = app.add_subcommand("train-draft", "train a DFlash draft for a frozen Qwen3 target (z-lab format out)");
  d_cmd->add_option("--target", d->target_dir, "target model directory (HF Qwen3)")->required();
  d_cmd->add_option("--on-policy-prompts", d->on_policy_prompts,
                    "prompts the target answers greedily; its generations become training data");
  d_cmd->add_option("--gen-tokens", d->gen_tokens, "new tokens per on-policy generation")->capture_default_str();
  d_cmd->add_option("--draft-layers", d->draft_layers, "draft decoder layers")->capture_default_str();
  d_cmd->add_option("--block-size", d->block_size, "block size B (anchor + B-1 masks)")->capture_default_str();
  d_cmd->add_option("--target-layer-ids", *tap_ids, "tapped target layers, e.g. \"1,9,17,25,33\" (default: z-lab's)");
  d_cmd->add_option("--mask-token-id", d->mask_token_id, "mask token id (default 151669, or the last id of a smaller vocab)");
  d_cmd->add_option("--gamma", d->gamma,
                    "loss weight decay exp(-(k-1)/gamma) (0 = the default: 7/5/4 for block 16/10/8, else "
                    "max(1, (B-1)/2))");
  d_cmd->add_option("--anchors", d->anchors, "blocks per sequence per step (fewer where it has fewer positions)")
      ->capture_default_str();
  d_cmd->add_option("--eval-prompts", d->eval_prompts, "prompts for the tau evaluation (default: on-policy or data prompts)");
  d_cmd->add_option("--eval-every", d->eval_every, "evaluate tau every N steps (0 = at the end)")->capture_default_str();
  d_cmd->add_option("--eval-samples", d->eval_samples, "prompts per evaluation")->capture_default_str();
  d_cmd->add_option("--eval-tokens", d->eval_tokens, "new tokens per evaluation prompt")->capture_default_str();
  add_common_options(d_cmd, *d);
  d_cmd->callback([&run, d, tap_ids]() {
    run = [d, tap_ids]() {
      d->target_layer_ids = parse_id_list(*tap_ids, "--target-layer-ids", "layer index");
      auto t0 = std::chrono::steady_clock::now();
      print_summary("train-draft", train::train_draft(*d, make_codec(d->target_dir, "--target")), t0);
      return 0;
    };
  });

  auto c = std::make_shared<train::CompressorOptions>();
  auto feature_ids = std::make_shared<std::string>();
  CLI::App* c_cmd = app.add_subcommand(
      "train-compressor", "train the beacon KV compressor for a frozen Qwen3 target (KL to the uncompressed target)");
  c_cmd->add_option("--target", c->target_dir, "target model directory (HF Qwen3)")->required();
  c_cmd->add_option("--draft,--model-draft", c->draft_dir, "DFlash draft: generate with it, its verify spans become the units");
  c_cmd->add_option("--on-policy-prompts", c->on_policy_prompts,
                    "prompts the target answers greedily; its generations are the training trajectories");
  c_cmd->add_option("--gen-tokens", c->gen_tokens, "new tokens per generated trajectory")->capture_default_str();
  c_cmd->add_option("--feature-layers", *feature_ids, "target layers whose outputs feed the compressor (default: the draft's taps)");
  c_cmd->add_option("--width", c->width, "compressor width")->capture_default_str();
  c_cmd->add_option("--max-span", c->max_span, "rows of the span-length embedding (longer spans share the last row)")
      ->capture_default_str();
  c_cmd->add_option("--ce-weight", c->ce_weight, "weight of the next-token cross-entropy next to the KL")->capture_default_str();
  c_cmd->add_option("--feature-passes", c->feature_passes,
                    "no-grad passes that refine the span features towards the compressed engine's")
      ->capture_default_str();
  c_cmd->add_option("--span-max", c->span_max, "without --draft: span lengths drawn uniformly from 1..N")->capture_default_str();
  c_cmd->add_option("--compress-window", c->policy.window, "recent generated tokens kept raw")->capture_default_str();
  c_cmd->add_option("--compress-sinks", c->policy.sinks, "first positions never compressed")->capture_default_str();
  c_cmd->add_option("--compress-merge", c->policy.merge_tokens, "0: one unit per verify span; m: units of m tokens")
      ->capture_default_str();
  c_cmd->add_option("--eval-prompts", c->eval_prompts, "held-out prompts (default: the last trajectories are held out)");
  c_cmd->add_option("--eval-every", c->eval_every, "evaluate every N steps (0 = at the end)")->capture_default_str();
  c_cmd->add_option("--eval-samples", c->eval_samples, "held-out trajectories per evaluation")->capture_default_str();
  add_common_options(c_cmd, *c);
  c_cmd->callback([&run, c, feature_ids]() {
    run = [c, feature_ids]() {
      c->feature_layers = parse_id_list(*feature_ids, "--feature-layers", "layer index");
      auto t0 = std::chrono::steady_clock::now();
      print_summary("train-compressor", train::train_compressor(*c, make_codec(c->target_dir, "--target")), t0);
      return 0;
    };
  });
}

}  // namespace specpress::cli
