// loop.cpp — see loop.h.
#include "train/loop.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string_view>

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <fmt/format.h>

#include "core/error.h"
#include "core/json_depth.h"
#include "core/fnv1a.h"
#include "io/mapped_file.h"
#include "model/qwen3.h"
#include "train/checkpoint.h"
#include "tools/progress.h"
#include "tools/stop_signals.h"

namespace specpress::train {
namespace fs = std::filesystem;

nlohmann::json input_fingerprints(const std::vector<std::string>& files) {
  nlohmann::json out = nlohmann::json::object();
  for (const std::string& file : files) {
    std::ifstream in(file, std::ios::binary);
    if (!in) fail("{}: cannot open it to fingerprint the run's inputs", file);
    uint64_t h = kFnv1aOffset, bytes = 0;
    std::string chunk(1 << 20, '\0');
    while (in) {
      in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
      const auto n = static_cast<size_t>(in.gcount());
      h = fnv1a(std::string_view(chunk.data(), n), h);
      bytes += n;
    }
    if (in.bad()) fail("{}: read error while fingerprinting the run's inputs", file);
    out[fs::absolute(file).lexically_normal().string()] = fmt::format("{:016x}:{}", h, bytes);
  }
  return out;
}

nlohmann::json model_fingerprints(const std::string& dir) {
  // the files the loader reads: config.json, and model.safetensors or the shards its index names (nothing else the
  // directory may hold, a dump beside the model, say)
  const fs::path config = fs::path(dir) / "config.json", index = fs::path(dir) / "model.safetensors.index.json";
  std::vector<std::string> configs = {config.string()}, weights;
  if (fs::exists(index)) {
    configs.push_back(index.string());
    const nlohmann::json j =
        nlohmann::json::parse(depth_checked(io::read_text_file(index.string()), index.string()), nullptr, false);
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
      fail("{}: expected an object with a 'weight_map' object (to fingerprint the model)", index.string());
    for (const auto& [tensor, file] : j["weight_map"].items())
      if (file.is_string()) weights.push_back((fs::path(dir) / file.get<std::string>()).string());
  } else {
    weights.push_back((fs::path(dir) / "model.safetensors").string());
  }
  nlohmann::json out = input_fingerprints(configs);
  std::sort(weights.begin(), weights.end());
  weights.erase(std::unique(weights.begin(), weights.end()), weights.end());
  std::error_code ec;
  constexpr uint64_t kHeaderMost = 100u << 20, kSamples = 64, kSampleBytes = 64u << 10;
  for (const std::string& file : weights) {
    std::ifstream in(file, std::ios::binary);
    if (!in) fail("{}: cannot open it to fingerprint the run's inputs", file);
    const uint64_t bytes = fs::file_size(file, ec);
    if (ec) fail("{}: cannot stat it to fingerprint the run's inputs ({})", file, ec.message());
    uint64_t h = kFnv1aOffset;
    std::string chunk;
    auto take = [&](uint64_t offset, uint64_t n) {  // fold bytes [offset, offset + n) into h
      chunk.resize(n);
      in.seekg(static_cast<std::streamoff>(offset));
      in.read(chunk.data(), static_cast<std::streamsize>(n));
      if (static_cast<uint64_t>(in.gcount()) != n) fail("{}: read error while fingerprinting the run's inputs", file);
      h = fnv1a(std::string_view(chunk.data(), n), h);
    };
    uint64_t header = 0;  // the 8-byte length and the JSON header (names, dtypes, shapes, offsets)
    if (bytes >= 8) {
      take(0, 8);
      for (int i = 7; i >= 0; --i) header = header << 8 | static_cast<unsigned char>(chunk[i]);
      header = 8 + std::min({header, bytes - 8, kHeaderMost});
      take(8, header - 8);
    }
    const uint64_t data = bytes - header;  // then kSamples spans spread evenly over the tensors' bytes
    if (data <= kSamples * kSampleBytes) {
      take(header, data);
    } else {
      for (uint64_t i = 0; i < kSamples; ++i) take(header + (data - kSampleBytes) / (kSamples - 1) * i, kSampleBytes);
    }
    out[fs::absolute(file).lexically_normal().string()] = fmt::format("{:016x}:{}", h, bytes);
  }
  return out;
}

std::string model_digest(const std::string& dir) {
  return dir.empty() ? "" : fmt::format("{:016x}", fnv1a(model_fingerprints(dir).dump()));
}

nlohmann::json absolute_paths(const std::vector<std::string>& files) {
  nlohmann::json out = nlohmann::json::array();
  for (const std::string& f : files) out.push_back(fs::absolute(f).lexically_normal().string());
  return out;
}

nlohmann::json common_run_json(const std::string& trainer, const CommonOptions& o, const at::Device& device) {
  nlohmann::json run = {{"trainer", trainer},
                        {"data", absolute_paths(o.data)},
                        {"data_rules", 2},  // how data.h reads records: 2 since chat answers and .json arrays
                        {"input_fingerprints", input_fingerprints(o.data)},
                        {"steps", o.steps},
                        {"batch", o.batch},
                        {"seq_len", o.seq_len},
                        {"lr", o.optim.lr},
                        {"min_lr_ratio", o.optim.min_lr_ratio},
                        {"warmup", o.optim.warmup_steps},
                        {"weight_decay", o.optim.weight_decay},
                        {"grad_clip", o.optim.grad_clip},
                        {"seed", o.seed},
                        {"device", device.str()}};  // resolved (training_device): auto resumes where it ran
  if (device.is_cuda()) run["autocast"] = o.autocast;  // the CPU trains in float32 either way
  return run;
}

at::Device training_device(const CommonOptions& o) {
  const at::Device here = model::parse_device(o.device, "--device");
  if (o.device != "auto" || !o.resume || o.force) return here;  // (--force with --resume is refused later)
  const std::optional<CheckpointState> state = find_checkpoint(o.out);
  if (!state || !state->run.contains("device") || !state->run["device"].is_string()) return here;
  const std::string recorded = state->run["device"].get<std::string>();
  if (recorded == here.str()) return here;
  const std::string source = state->dir + "/state.json";
  if (recorded.rfind("cuda", 0) == 0 && !at::hasCUDA())
    fail("--resume: {} records device '{}', and this build or machine has no CUDA: resume it where it ran, or start "
         "over with --force", source, recorded);
  const at::Device device = model::parse_device(recorded, source + ": device");
  if (device.is_cuda() && device.has_index() && device.index() >= static_cast<int>(at::getNumGPUs()))
    fail("--resume: {} records device '{}', and this machine has {} CUDA device(s): resume it where it ran, or start "
         "over with --force", source, recorded, at::getNumGPUs());
  if (device.type() != here.type())  // ("cuda:0" where auto says "cuda" is the same GPU: no note)
    std::fprintf(stderr, "--resume: --device auto continues on %s, the device %s records (--device must match it; "
                 "--force starts over)\n", recorded.c_str(), source.c_str());
  return device;
}

void keep_freed_memory() {
#ifdef __GLIBC__
  mallopt(M_MMAP_MAX, 0);         // every allocation comes from the heap ...
  mallopt(M_TRIM_THRESHOLD, -1);  // ... which is never returned to the system while training
#endif
}

void validate_common(const CommonOptions& o) {
  if (o.steps < 1) fail("--steps: must be at least 1, found {}", o.steps);
  if (o.batch < 1) fail("--batch: must be at least 1, found {}", o.batch);
  if (o.seq_len < 2) fail("--seq-len: must be at least 2, found {}", o.seq_len);
  if (!(o.optim.lr > 0) || !std::isfinite(o.optim.lr)) fail("--lr: must be positive and finite, found {}", o.optim.lr);
  if (!(o.optim.min_lr_ratio >= 0 && o.optim.min_lr_ratio <= 1))
    fail("--min-lr-ratio: must be in [0, 1], found {}", o.optim.min_lr_ratio);
  if (!(o.optim.weight_decay >= 0) || !std::isfinite(o.optim.weight_decay))
    fail("--weight-decay: must be a number >= 0, found {}", o.optim.weight_decay);
  if (!(o.optim.grad_clip >= 0) || !std::isfinite(o.optim.grad_clip))
    fail("--grad-clip: must be a number >= 0 (0 = off), found {}", o.optim.grad_clip);
  if (o.optim.warmup_steps < 0) fail("--warmup: must be >= 0, found {}", o.optim.warmup_steps);
  if (o.optim.warmup_steps > o.steps)  // a short trial run with the usual --warmup, say: allowed, and said
    std::fprintf(stderr, "warning: --warmup %lld exceeds --steps %lld: the learning rate reaches %.3g of --lr at the "
                 "last step and never decays\n", static_cast<long long>(o.optim.warmup_steps),
                 static_cast<long long>(o.steps), static_cast<double>(o.steps) / o.optim.warmup_steps);
  if (o.save_every < 0) fail("--save-every: must be >= 0, found {}", o.save_every);
  if (o.stop_after < 0) fail("--stop-after: must be >= 0, found {}", o.stop_after);
}

void check_distinct_layers(const std::vector<int64_t>& layers, const char* flag) {
  for (size_t i = 0; i < layers.size(); ++i)
    if (std::find(layers.begin(), layers.begin() + static_cast<std::ptrdiff_t>(i), layers[i]) !=
        layers.begin() + static_cast<std::ptrdiff_t>(i))
      fail("{}: layer {} is given twice", flag, layers[i]);
}


namespace {
void check_step_within_steps(const CheckpointState& state, const CommonOptions& o) {
  if (state.step > o.steps)
    fail("{}/state.json: step {} is past --steps {} (another run's checkpoint, or a longer schedule: give --steps of "
         "at least {})", state.dir, state.step, o.steps, state.step);
}
}  // namespace

void check_resume_matches(const CommonOptions& o, const nlohmann::json& run, bool resume) {
  if (!resume) return;
  const CheckpointState state = *find_checkpoint(o.out);
  const std::string source = state.dir + "/state.json";
  check_same_run(state.run, run, source);
  check_step_within_steps(state, o);
  const nlohmann::json& recorded = state.run.contains("steps") ? state.run["steps"] : nlohmann::json();
  // (a --steps at the checkpoint's step runs nothing: no schedule to speak of)
  if (!recorded.is_number_integer() || recorded.get<int64_t>() == o.steps || state.step == o.steps) return;
  OptimConfig then = o.schedule();
  then.total_steps = recorded.get<int64_t>();
  std::fprintf(stderr, "--resume: --steps %lld where %s records %lld: the learning-rate schedule now ends at step "
               "%lld; step %lld runs at %.2e instead of %.2e\n", static_cast<long long>(o.steps), source.c_str(),
               static_cast<long long>(then.total_steps), static_cast<long long>(o.steps),
               static_cast<long long>(state.step + 1), learning_rate(o.schedule(), state.step),
               learning_rate(then, state.step));
}

TrainSummary run_training(const std::string& label, const CommonOptions& o, const nlohmann::json& run, bool resume,
                          const NamedTensors& params, AdamW& optimizer, const LoopHooks& hooks) {
  TrainSummary summary;
  summary.eval_name = hooks.eval_name;
  nlohmann::json history = nlohmann::json::array();
  if (resume) {  // `run` was checked against it by the trainer (check_resume_matches)
    CheckpointState state = *find_checkpoint(o.out);
    check_step_within_steps(state, o);  // (said earlier by check_resume_matches where the trainer calls it)
    restore_tensors(state.dir + "/params.safetensors", params);
    optimizer.load_state(read_tensors(state.dir + "/optimizer.safetensors", params.front().second.device()), state.step,
                         state.dir + "/optimizer.safetensors");
    summary.first_step = state.step;
    history = state.history;
    std::fprintf(stderr, "%s: resuming %s at step %lld of %lld\n", label.c_str(), o.out.c_str(),
                 static_cast<long long>(state.step), static_cast<long long>(o.steps));
  } else if (o.resume) {  // the same command line reruns a job: its first run has nothing to continue yet
    std::fprintf(stderr, "%s: --resume: %s holds no checkpoint yet; starting at step 0\n", label.c_str(),
                 o.out.c_str());
  }
  const int64_t end = o.stop_after > 0 ? std::min(o.steps, summary.first_step + o.stop_after) : o.steps;
  tools::ProgressBar progress(summary.first_step > 0 ? fmt::format("{} (from step {})", label, summary.first_step) : label,
                              o.steps - summary.first_step);
  const bool tty = ::isatty(STDERR_FILENO) == 1;
  auto note = [&](const std::string& line) {  // a line of its own; the bar redraws below it
    std::fprintf(stderr, tty ? "\r\x1b[K%s\n" : "%s\n", line.c_str());
    std::fflush(stderr);
  };
  const auto start = std::chrono::steady_clock::now();
  int64_t tokens = 0;
  auto checkpoint = [&](int64_t done) {
    save_checkpoint(o.out, CheckpointState{done, run, history, ""}, params, optimizer.state());
    hooks.export_model();
  };
  int64_t step = summary.first_step;
  const tools::StopSignals signals("after the step in flight, with a checkpoint written");
  for (; step < end && signals.received() == 0; ++step) {
    StepOutput out = hooks.forward_backward(step);
    const double grad_norm = optimizer.step(step);
    summary.losses.emplace_back(step + 1, out.loss);
    history.push_back({step + 1, out.loss});
    tokens += out.tokens;
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    progress.update(step + 1 - summary.first_step,
                    fmt::format("step {} | loss {:.4f}{} | lr {:.2e} | gnorm {:.2f} | {:.0f} tok/s", step + 1, out.loss,
                                out.metrics, learning_rate(o.schedule(), step), grad_norm,
                                seconds > 0 ? static_cast<double>(tokens) / seconds : 0.0));
    const bool last = step + 1 == o.steps;
    if (hooks.evaluate && hooks.eval_every > 0 && ((step + 1) % hooks.eval_every == 0 || last)) {
      const Evaluation e = hooks.evaluate();
      summary.eval_values.push_back(e.value);
      note(fmt::format("{}: step {} eval {} {:.4f}{}", label, step + 1, hooks.eval_name, e.value, e.detail));
    }
    if (last || (o.save_every > 0 && (step + 1) % o.save_every == 0)) {
      checkpoint(step + 1);
      note(fmt::format("{}: step {} checkpoint and model written to {}", label, step + 1, o.out));
    }
  }
  const int signal = step < o.steps ? signals.received() : 0;  // (after the last step the run is whole anyway)
  const std::string why = signal != 0 ? tools::StopSignals::name(signal) : "--stop-after";
  if (step < o.steps && step > summary.first_step && (o.save_every == 0 || step % o.save_every != 0)) {
    checkpoint(step);  // leave a resumable checkpoint where this invocation stopped
    note(fmt::format("{}: stopped after step {} ({}); checkpoint written", label, step, why));
  }
  if (step < o.steps)
    progress.stop(fmt::format("step {} of {}", step, o.steps));
  else
    progress.finish(fmt::format("step {} of {}", step, o.steps));
  if (signal != 0)
    throw Interrupted(signal, step > 0 ? fmt::format("{}: stopped by {} after step {} of {}; {} holds its checkpoint: "
                                                     "the same command with --resume continues",
                                                     label, why, step, o.steps, o.out)
                                       : fmt::format("{}: stopped by {} before its first step", label, why));
  summary.last_step = step;
  return summary;
}

}  // namespace specpress::train
