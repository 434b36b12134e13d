// cmd_dump.cpp — `specpress dump -m DIR --prompt-ids IDS --out FILE [--hidden] [--device] [--dtype]`.
// Writes `logits` [T, V] fp32 for every prompt position and, with --hidden, `hidden_states.i` in the
// transformers convention (0 = embedding, i = output of layer i-1, L = final norm).
#include "cli/cmd_dump.h"

#include <c10/core/InferenceMode.h>

#include <cstdio>
#include <memory>

#include "cli/common.h"
#include "core/error.h"
#include "io/checkpoint.h"
#include "io/output_paths.h"
#include "model/qwen3.h"

namespace specpress::cli {
namespace {

struct DumpOptions {
  std::string model_dir, prompt_ids, out, device = "auto", dtype = "auto";
  bool hidden = false;
};

int run_dump(const DumpOptions& o) {
  c10::InferenceMode inference_mode;
  const auto [device, dtype] = parse_placement(o.device, o.dtype);
  std::vector<int64_t> prompt = parse_id_list(o.prompt_ids, "--prompt-ids");
  if (prompt.empty()) fail("--prompt-ids: empty (expected at least one token id)");
  io::check_output_files({{"-o/--out", o.out}}, {{"-m/--model", o.model_dir}});
  model::Qwen3Model target = model::Qwen3Model::load(o.model_dir, dtype, device);
  for (size_t i = 0; i < prompt.size(); ++i)
    if (prompt[i] < 0 || prompt[i] >= target.config().vocab_size)
      fail("--prompt-ids: token id {} at index {} is outside the vocabulary 0..{}", prompt[i], i,
           target.config().vocab_size - 1);
  model::KVCache cache = target.make_cache(static_cast<int64_t>(prompt.size()));
  model::ForwardOutput out =
      target.forward(at::tensor(prompt, at::kLong).to(device), 0, cache, {true, {}, o.hidden});
  std::vector<std::pair<std::string, at::Tensor>> tensors = {{"input_ids", at::tensor(prompt, at::kLong)},
                                                             {"logits", out.logits.to(at::kCPU)}};
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
  cmd->add_option("-m,--model", o->model_dir, "target model directory (HF Qwen3)")->required();
  cmd->add_option("--prompt-ids", o->prompt_ids, "input token ids, comma-separated")->required();
  cmd->add_option("-o,--out", o->out, "output .safetensors file")->required()->check(non_empty_check("a file path"));
  cmd->add_flag("--hidden", o->hidden, "also save every hidden state (transformers convention)");
  add_placement_flags(*cmd, o->device, o->dtype);
  cmd->callback([&run, o]() { run = [o]() { return run_dump(*o); }; });
}

}  // namespace specpress::cli
