// loop.h — what both trainers share: their common options, the step loop (resume from a checkpoint,
// optimizer step, progress bar with loss, tokens/s and ETA on stderr, periodic evaluation, checkpoint +
// export) and the run summary tests read.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "train/optim.h"
#include "train/params.h"

namespace specpress::train {

struct CommonOptions {
  std::vector<std::string> data;
  std::string out, device = "auto", save_dtype = "bf16";
  int64_t steps = 1000, batch = 8, seq_len = 256;
  OptimConfig optim;
  uint64_t seed = 0;
  bool resume = false, force = false;
  bool autocast = true;      // bf16 autocast on CUDA (CPU always trains in float32)
  int64_t save_every = 100;  // checkpoint + export every N steps (and at the end); 0 = only at the end
  int64_t stop_after = 0;    // stop after N steps of this invocation, as an interruption would (0 = off)

  // `optim` with the schedule's length set to `steps`.
  OptimConfig schedule() const {
    OptimConfig c = optim;
    c.total_steps = steps;
    return c;
  }
};

// The options a resumed run must share with the original (the trainer's name, schedule, data and its fingerprints,
// seed, sizes, the resolved device), as JSON. Only "steps" may differ on a resume (check_resume_matches).
nlohmann::json common_run_json(const std::string& trainer, const CommonOptions& options, const at::Device& device);
// The files' absolute, normalised paths, as a JSON array (how a run records its input files).
nlohmann::json absolute_paths(const std::vector<std::string>& files);
// {absolute path: "FNV-1a hex:bytes"} of each file, for run["input_fingerprints"]: a resume refuses changed inputs.
nlohmann::json input_fingerprints(const std::vector<std::string>& files);
// The same for the files a model directory's loader reads, for run["model_fingerprints"]: config.json (and a shard
// index) whole; model.safetensors or each shard the index names by its size, its header and 64 spans of 64 KiB spread
// over its tensors' bytes, so that a retrained or replaced model of the same shape is refused without reading
// gigabytes at every start.
nlohmann::json model_fingerprints(const std::string& dir);
// model_fingerprints folded into one FNV-1a hex string ("" for no directory), for a generation cache's record.
std::string model_digest(const std::string& dir);

// The device --device names. `auto` (CUDA where there is one, else the CPU) continues a --resume on the device its
// checkpoint records, so a training begun on the CPU resumes there on a machine with a GPU (a note says so), and one
// begun on CUDA fails naming the checkpoint where this machine has none.
at::Device training_device(const CommonOptions& options);

struct StepOutput {
  double loss = 0;
  int64_t tokens = 0;
  std::string metrics;  // extra "name value" pairs for the progress line
};

struct TrainSummary {
  int64_t first_step = 0;  // completed steps when this invocation started (> 0 after a resume)
  int64_t last_step = 0;   // completed steps when it ended
  std::vector<std::pair<int64_t, double>> losses;  // (step, loss) of every step this invocation ran
  std::vector<double> eval_values;                 // each evaluation's value (LoopHooks::evaluate)
  std::string eval_name;                           // what they are (LoopHooks::eval_name)
};

struct Evaluation {
  double value = 0;    // what the summary keeps (TrainSummary::eval_values)
  std::string detail;  // appended to the log line, e.g. " (top-1 0.812 over 27 events)"
};

struct LoopHooks {
  std::function<StepOutput(int64_t step)> forward_backward;  // loss of 0-based `step`, gradients accumulated
  std::function<void()> export_model;                        // writes the published-format model to OUT
  std::function<Evaluation()> evaluate;                      // optional: tau with the real speculative loop
  int64_t eval_every = 0;
  std::string eval_name = "tau (speculative loop, greedy)";  // what evaluate() returns, for the log
};

// Where `resume`: fails unless OUT's checkpoint was written by the same trainer with the same `run` (options, inputs
// and their fingerprints). --steps may differ down to the checkpoint's step, so a finished run can be extended: a note
// says where the learning-rate schedule, which ends at --steps, moves. Each trainer calls it as soon as it has built
// `run`, before its preparation (copies into OUT, generations), so that a changed option is refused before minutes of
// work rather than after.
void check_resume_matches(const CommonOptions& options, const nlohmann::json& run, bool resume);

// Runs steps until options.steps (or stop_after), resuming from OUT's checkpoint when `resume` (`run` already checked
// against it by check_resume_matches; saved into each checkpoint).
TrainSummary run_training(const std::string& label, const CommonOptions& options, const nlohmann::json& run,
                          bool resume, const NamedTensors& params, AdamW& optimizer, const LoopHooks& hooks);

// Keeps freed large CPU buffers in the heap for reuse (glibc otherwise maps and unmaps every
// vocabulary-sized activation each step and spends most of the time in page faults).
void keep_freed_memory();

// Validates the shared numeric options; errors name the flag.
void validate_common(const CommonOptions& options);
// A layer list flag (--target-layer-ids, --feature-layers): each layer at most once.
void check_distinct_layers(const std::vector<int64_t>& layers, const char* flag);

}  // namespace specpress::train
