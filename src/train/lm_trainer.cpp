// lm_trainer.cpp — see lm_trainer.h.
#include "train/lm_trainer.h"

#include <filesystem>

#include "core/compat.h"
#include "core/error.h"
#include "core/json_depth.h"
#include "io/mapped_file.h"
#include "train/checkpoint.h"
#include "train/sequence_forward.h"

namespace specpress::train {
namespace fs = std::filesystem;

void copy_tokenizer_files(const std::string& from, const std::string& to) {
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt", "chat_template.jinja",
                           "special_tokens_map.json"}) {
    const fs::path src = fs::path(from) / name;
    if (fs::exists(src)) io::write_file_atomic((fs::path(to) / name).string(), io::read_text_file(src.string()));
  }
}

TrainSummary train_lm(const LmOptions& o, const TextCodec& codec) {
  validate_common(o);
  keep_freed_memory();
  const at::Device device = training_device(o);
  const at::ScalarType save_dtype = parse_save_dtype(o.save_dtype);
  if (o.config_path.empty()) fail("--config: required (a Qwen3 config.json)");
  if (!fs::exists(o.config_path)) fail("--config: {} not found", o.config_path);
  const model::Qwen3Config config = model::parse_qwen3_config(o.config_path);
  if (config.eos_token_ids.empty()) fail("{}: field 'eos_token_id' is needed to separate documents", o.config_path);
  if (o.seq_len > config.max_position_embeddings)  // a window of seq_len + 1 ids: positions 0..seq_len-1 predict
    fail("--seq-len {}: exceeds max_position_embeddings {} of {}", o.seq_len, config.max_position_embeddings, o.config_path);
  if (!o.tokenizer_dir.empty() && !fs::exists(fs::path(o.tokenizer_dir) / "tokenizer.json"))
    fail("--tokenizer: {} has no tokenizer.json", o.tokenizer_dir);

  // Data first: bad data fails before the output directory is touched.
  const std::vector<Sequence> documents = read_documents(o.data, codec, config.vocab_size);
  const std::vector<int64_t> stream = concat_documents(documents, config.eos_token_ids[0]);
  if (static_cast<int64_t>(stream.size()) < o.seq_len + 1)
    fail("--seq-len {}: the training data holds only {} tokens (need at least seq-len + 1)", o.seq_len, stream.size());
  std::vector<InputPath> inputs = {{"--config", o.config_path}, {"--tokenizer", o.tokenizer_dir}};
  add_inputs(inputs, "--data", o.data);
  const OutputDir output = prepare_output_dir(o.out, o.resume, o.force, inputs);  // locked while it lives
  const bool resume = output.resume;
  std::fprintf(stderr, "train-lm: %zu documents, %zu tokens; %lld steps of %lld x %lld tokens\n", documents.size(),
               stream.size(), static_cast<long long>(o.steps), static_cast<long long>(o.batch),
               static_cast<long long>(o.seq_len));

  model::Qwen3Weights init = init_qwen3_weights(config, o.seed);
  NamedTensors params = qwen3_named(init, config);
  make_trainable(params, device);
  const model::Qwen3Weights weights = qwen3_from_named(params, config);
  const ops::RopeTable rope = ops::make_rope_table(config.head_dim, config.rope_theta, o.seq_len + 1, device);
  AdamW optimizer(params, o.schedule());

  nlohmann::json run = common_run_json("train-lm", o, device);
  run["model"] = qwen3_config_json(config, "float32");
  run["input_fingerprints"].update(input_fingerprints(codec.used_files()));
  check_resume_matches(o, run, resume);  // before the tokenizer's files are copied into OUT
  nlohmann::ordered_json out_config = qwen3_config_json(config, dtype_config_name(save_dtype));
  {  // the engine has no use for bos_token_id, but HF tools read it: kept from --config where it is there
    const nlohmann::json given =
        nlohmann::json::parse(depth_checked(io::read_text_file(o.config_path), o.config_path), nullptr, false);
    if (given.is_object() && given.contains("bos_token_id")) out_config["bos_token_id"] = given["bos_token_id"];
  }
  if (!o.tokenizer_dir.empty()) copy_tokenizer_files(o.tokenizer_dir, o.out);
  nlohmann::ordered_json generation = {{"eos_token_id", config.eos_token_ids}, {"do_sample", false},
                                       {"transformers_version", "4.51.0"}};

  LoopHooks hooks;
  hooks.forward_backward = [&](int64_t step) {
    std::mt19937_64 rng = step_rng(o.seed, step);
    at::Tensor ids = sample_lm_batch(stream, o.batch, o.seq_len, rng).to(device);
    compat::CudaAutocast autocast(o.autocast && device.is_cuda(), at::kBFloat16);
    const double loss = lm_forward_backward(config, weights, rope, ids);
    return StepOutput{loss, o.batch * o.seq_len, ""};
  };
  hooks.export_model = [&] {
    export_model(o.out, out_config, params, save_dtype);
    io::write_file_atomic((fs::path(o.out) / "generation_config.json").string(), generation.dump(2) + "\n");
  };
  return run_training("train-lm", o, run, resume, params, optimizer, hooks);
}

}  // namespace specpress::train
