// cmd_dump.cpp — `specpress dump -m DIR (-p TEXT | -f FILE | --prompt-ids IDS | --prompt-ids-file FILE) --out FILE
// [--hidden] [--device] [--dtype]`. Writes one forward over the prompt (kDumpLayout below) for numeric comparisons
// with other implementations (transformers' output_hidden_states convention, without the batch dimension).
#include "cli/cmd_dump.h"

#include <c10/core/InferenceMode.h>

#include <cstdio>
#include <memory>

#include "cli/common.h"
#include "cli/prompt_flags.h"
#include "core/error.h"
#include "io/checkpoint.h"
#include "io/output_paths.h"
#include "model/qwen3.h"

namespace specpress::cli {
namespace {

constexpr const char* kDumpLayout =
    "the safetensors file holds input_ids (I64 [T]), logits (F32 [T, V], every position's, whatever --dtype; [1, V], "
    "the last position's, with --logits last; none with --logits none) and, with --hidden, hidden_states.0 .. "
    "hidden_states.L (F32 [T, H]; 0 the embeddings, i the output after i layers, L after the final norm, as "
    "transformers' output_hidden_states)";

struct DumpOptions {
  std::string model_dir, out, device = "auto", dtype = "auto", logits = "all";
  RawPromptFlags prompt;
  bool hidden = false;
};

int run_dump(const DumpOptions& o) {
  c10::InferenceMode inference_mode;
  const auto [device, dtype] = parse_placement(o.device, o.dtype);
  if (o.out == "-")
    fail("-o/--out: '-' would be a file named '-' (safetensors are binary; give a file path, not standard output)");
  // the output is checked against every input (the model's files, a prompt's file) before anything is read
  std::vector<io::NamedPath> inputs = {{"-m/--model", o.model_dir}};
  if (!o.prompt.file.empty() && o.prompt.file != "-") inputs.push_back({"-f/--file", o.prompt.file});
  if (!o.prompt.ids_file.empty() && o.prompt.ids_file != "-")
    inputs.push_back({"--prompt-ids-file", o.prompt.ids_file});
  io::check_output_files({{"-o/--out", o.out}}, inputs);
  std::vector<int64_t> prompt = raw_prompt_tokens(o.prompt, o.model_dir, "dump");
  const char* flag = raw_prompt_flag(o.prompt);
  if (prompt.empty()) fail("{}: empty (expected at least one token)", flag);
  model::Qwen3Model target = model::Qwen3Model::load(o.model_dir, dtype, device);
  check_raw_prompt_vocab(o.prompt, prompt, target.config().vocab_size);
  if (const int64_t most = target.config().max_position_embeddings; static_cast<int64_t>(prompt.size()) > most)
    fail("{}: the prompt has {} tokens, more than the model's max_position_embeddings {}", flag, prompt.size(), most);
  model::KVCache cache = target.make_cache(static_cast<int64_t>(prompt.size()));
  model::ForwardOutput out =
      target.forward(at::tensor(prompt, at::kLong).to(device), 0, cache, {o.logits == "all", {}, o.hidden});
  std::vector<std::pair<std::string, at::Tensor>> tensors = {{"input_ids", at::tensor(prompt, at::kLong)}};
  if (o.logits != "none") tensors.push_back({"logits", out.logits.to(at::kCPU)});
  for (size_t i = 0; i < out.hidden_states.size(); ++i)
    tensors.push_back({"hidden_states." + std::to_string(i), out.hidden_states[i].to(at::kFloat).to(at::kCPU)});
  io::save_safetensors(o.out, tensors);
  std::fprintf(stderr, "wrote %zu tensors to %s\n", tensors.size(), o.out.c_str());
  return 0;
}

}  // namespace

void add_dump_command(CLI::App& app, std::function<int()>& run) {
  auto o = std::make_shared<DumpOptions>();
  CLI::App* cmd = app.add_subcommand("dump", "save a target forward's logits (and hidden states) as safetensors");
  cmd->footer(std::string("Output: ") + kDumpLayout + ".");
  cmd->add_option("-m,--model", o->model_dir, "target model directory (HF Qwen3)")->required();
  add_raw_prompt_flags(*cmd, o->prompt, "the input");
  cmd->add_option("-o,--out", o->out, "output .safetensors file")->required()->check(non_empty_check("a file path"));
  cmd->add_option("--logits", o->logits,
                  "which positions' logits to save: all, last (a long prompt's [T, V] is T x 0.6 MB at Qwen3's "
                  "vocabulary) or none")
      ->check(CLI::IsMember({"all", "last", "none"}))
      ->capture_default_str();
  cmd->add_flag("--hidden", o->hidden, "also save every hidden state (transformers convention)");
  add_placement_flags(*cmd, o->device, o->dtype);
  cmd->callback([&run, o]() { run = [o]() { return run_dump(*o); }; });
}

}  // namespace specpress::cli
