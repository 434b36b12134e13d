// checkpoint.h — the training output directory: the --resume/--force policy, resumable checkpoints and
// the exported model. A checkpoint is OUT/checkpoint/ with state.json (completed steps, seed, the run's
// determinism-relevant options, the RNG scheme), params.safetensors (float32 master weights) and
// optimizer.safetensors (AdamW moments). It is written as OUT/checkpoint.tmp/ and swapped in by
// renames, so a kill at any moment leaves the previous or the new checkpoint whole. The exported model
// (config.json + model.safetensors in the published format) is rewritten atomically at each checkpoint.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/path_lock.h"
#include "io/output_paths.h"
#include "train/params.h"

namespace specpress::train {

// One of a run's inputs, by the flag that named it: --out may not be it or hold it.
using InputPath = io::NamedPath;
// Validates --out against --resume/--force and the run's inputs: --out may not be or hold an input; an existing
// non-empty directory needs --resume or --force. --resume continues its checkpoint, or starts at step 0 where it holds
// only what a run stopped before its first checkpoint leaves; --force deletes it only when it holds nothing but what
// the trainers write (an exported model only with a checkpoint beside it) and is not the current directory or one
// above it, emptying it in place. OUT is made where missing and locked before anything in it is read or deleted
// (io::PathLock: a second run on it is refused, its --force deletes nothing) and stays locked while the returned
// object lives; `resume` is true when training should resume from OUT's checkpoint (--resume and one exists).
struct OutputDir {
  bool resume = false;
  io::PathLock lock;
};
OutputDir prepare_output_dir(const std::string& out, bool resume, bool force, const std::vector<InputPath>& inputs = {});
// `paths` as inputs named by `flag`, appended to `to`.
void add_inputs(std::vector<InputPath>& to, const std::string& flag, const std::vector<std::string>& paths);

struct CheckpointState {
  int64_t step = 0;         // completed optimizer steps
  nlohmann::json run;       // the options that must match to continue (model, data, schedule, seed)
  nlohmann::json history;   // [[step, loss], ...] logged so far
  std::string dir;          // where params.safetensors and optimizer.safetensors are
};

void save_checkpoint(const std::string& out, const CheckpointState& state, const NamedTensors& params,
                     const NamedTensors& optimizer_state);
// The newest whole checkpoint under OUT, if any.
std::optional<CheckpointState> find_checkpoint(const std::string& out);
// Fails naming the first option whose value differs between the checkpoint and this invocation: the trainer that
// wrote it first, where both record one; "steps" is left to the caller (a run may be extended or shortened).
void check_same_run(const nlohmann::json& saved, const nlohmann::json& now, const std::string& source);
// Copies the tensors of `file` into `params` (same names and shapes; values only).
void restore_tensors(const std::string& file, const NamedTensors& params);
// Every tensor of `file` as float32 on `device`.
NamedTensors read_tensors(const std::string& file, at::Device device);

// Writes OUT/config.json and OUT/model.safetensors (tensors in `dtype`), each atomically.
void export_model(const std::string& out, const nlohmann::ordered_json& config, const NamedTensors& tensors,
                  at::ScalarType dtype);

// "bf16" | "f32" | "f16" for --save-dtype, and the config.json spelling of a dtype.
at::ScalarType parse_save_dtype(const std::string& name);
std::string dtype_config_name(at::ScalarType dtype);

}  // namespace specpress::train
