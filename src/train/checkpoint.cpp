// checkpoint.cpp — see checkpoint.h.
#include "train/checkpoint.h"

#include <c10/core/GradMode.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <optional>
#include <tuple>

#include <fmt/format.h>

#include "core/error.h"
#include "core/json_depth.h"
#include "io/checkpoint.h"
#include "io/mapped_file.h"
#include "io/output_paths.h"
#include "io/remove_tree.h"

namespace specpress::train {
namespace fs = std::filesystem;

namespace {
constexpr const char* kStateFile = "state.json";

// The checkpoint directories a training keeps in --out (the newest, the one it replaces, the one being written).
constexpr const char* kCheckpointDirs[] = {"checkpoint", "checkpoint.old", "checkpoint.tmp"};

// What the trainers write into --out: files by name (models, tokenizer copies, generation caches, reports) and the
// checkpoint directories with their three files, each possibly as the temporary file of an interrupted atomic write.
// The first entry of `out` that is none of these (a symbolic link included), or nothing: --force deletes only a
// directory that holds nothing else.
std::optional<std::string> foreign_entry(const fs::path& out) {
  static const char* const kFiles[] = {"config.json",          "model.safetensors",   "generation_config.json",
                                       "tokenizer.json",       "tokenizer_config.json", "vocab.json",
                                       "merges.txt",           "chat_template.jinja", "special_tokens_map.json",
                                       "onpolicy.jsonl",       "trajectories.jsonl",  "eval_trajectories.jsonl",
                                       "eval.json",            "compressor.json",     "compressor.safetensors",
                                       "generations.json"};
  static const char* const kCheckpointFiles[] = {"params.safetensors", "optimizer.safetensors", "state.json"};
  auto named = [](const std::string& name, const auto& list, bool tmp) {
    for (const char* n : list)
      if (name == n || (tmp && name.rfind(std::string(n) + ".tmp.", 0) == 0)) return true;
    return false;
  };
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(out, ec)) {
    const std::string name = e.path().filename().string();
    if (e.is_symlink()) return name;
    if (e.is_regular_file() && named(name, kFiles, true)) continue;
    if (!e.is_directory() || !named(name, kCheckpointDirs, false)) return name;
    for (const fs::directory_entry& f : fs::directory_iterator(e.path(), ec))
      if (f.is_symlink() || !f.is_regular_file() || !named(f.path().filename().string(), kCheckpointFiles, true))
        return name + "/" + f.path().filename().string();
    if (ec) fail("--force: cannot list {} ({})", e.path().string(), ec.message());
  }
  if (ec) fail("--force: cannot list {} ({})", out.string(), ec.message());
  return std::nullopt;
}

// A model's file in OUT (an exported model, or a model folder named as --out) where OUT has no checkpoint
// directory: the trainers export a model only with a checkpoint beside it, so OUT is then not a training's output
// (or its checkpoints were removed). nullopt where OUT has a checkpoint directory or no such file.
std::optional<std::string> model_without_checkpoint(const fs::path& out) {
  std::error_code ec;
  for (const char* dir : kCheckpointDirs)
    if (fs::exists(out / dir, ec)) return std::nullopt;
  for (const char* file : {"model.safetensors", "config.json", "compressor.safetensors", "compressor.json"})
    if (fs::exists(out / file, ec)) return std::string(file);
  return std::nullopt;
}
}  // namespace

OutputDir prepare_output_dir(const std::string& out, bool resume, bool force, const std::vector<InputPath>& inputs) {
  if (out.empty()) fail("--out: empty path");
  if (resume && force) fail("--resume and --force: give at most one (--force deletes what --resume would continue)");
  std::error_code ec;
  if (fs::exists(out, ec) && !fs::is_directory(out)) fail("--out: {} exists and is not a directory", out);
  for (const InputPath& in : inputs)
    if (!in.path.empty() && io::reaches_into(in.path, out))
      fail("--out: {} is or holds {} {} (or a file it links to), an input of this run; choose another output directory",
           out, in.flag, in.path);
  // Made where missing, then locked before anything in it is read or deleted (so that what is found is what this run
  // holds: a run that made it in between finds it locked)
  std::error_code mk;
  fs::create_directories(out, mk);
  if (mk) fail("--out: cannot create {} ({})", out, mk.message());
  OutputDir result;
  result.lock = io::PathLock::take(out, "--out",
                                   fmt::format("--out: {} is in use by another specpress run (it holds the directory's "
                                               "lock); wait for it to end or choose another --out",
                                               out));
  const bool non_empty = !fs::is_empty(out, ec);
  if (non_empty && !resume && !force)
    fail("--out: {} already exists; pass --resume to continue its training or --force to overwrite it", out);
  // --resume without a checkpoint starts at step 0 where OUT holds only what a run stopped before its first
  // checkpoint leaves (tokenizer copies, cached generations, which the new run reuses where they still match)
  if (non_empty && resume && !find_checkpoint(out).has_value()) {
    if (const std::optional<std::string> model = model_without_checkpoint(out))
      fail("--resume: {} has no checkpoint to continue (no checkpoint/state.json) but holds {}: a model, not a "
           "training's output; choose another --out",
           out, *model);
    if (const std::optional<std::string> foreign = foreign_entry(out))
      fail("--resume: {} has no checkpoint to continue (no checkpoint/state.json) and holds {}, which no specpress "
           "trainer writes; choose another --out",
           out, *foreign);
  }
  if (non_empty && force) {
    if (io::path_within(fs::current_path(ec).string(), out))
      fail("--force: {} is the current directory or one above it; refusing to delete it", out);
    if (const std::optional<std::string> foreign = foreign_entry(out))
      fail("--force: {} holds {}, which no specpress trainer writes; refusing to delete the directory (remove that "
           "yourself or choose another --out)",
           out, *foreign);
    if (const std::optional<std::string> model = model_without_checkpoint(out))
      fail("--force: {} holds {} but no checkpoint directory: a model, not a training's output; refusing to delete "
           "it (remove it yourself or choose another --out)",
           out, *model);
    // emptied in place, so that the directory (and its lock) stays this run's
    std::vector<fs::path> entries;
    for (fs::directory_iterator it(out, ec), end; !ec && it != end; it.increment(ec)) entries.push_back(it->path());
    if (ec) fail("--force: cannot list {} ({})", out, ec.message());
    for (const fs::path& entry : entries) io::remove_tree(entry.string());
  }
  // an existing directory may still refuse new files (its permissions, a read-only mount): found now, not at the
  // first checkpoint after the training's steps (the probe named as an export's temporary file, which --force and
  // --resume accept where a kill left it)
  io::probe_new_file((fs::path(out) / ("config.json.tmp.probe." + std::to_string(::getpid()))).string(), "--out", "");
  result.resume = resume && find_checkpoint(out).has_value();
  return result;
}

void add_inputs(std::vector<InputPath>& to, const std::string& flag, const std::vector<std::string>& paths) {
  for (const std::string& p : paths) to.push_back({flag, p});
}

void save_checkpoint(const std::string& out, const CheckpointState& state, const NamedTensors& params,
                     const NamedTensors& optimizer_state) {
  const fs::path dir = fs::path(out) / "checkpoint", tmp = fs::path(out) / "checkpoint.tmp",
                 old = fs::path(out) / "checkpoint.old";
  io::remove_tree(tmp.string());
  fs::create_directories(tmp);
  io::save_safetensors((tmp / "params.safetensors").string(), to_cpu(params, at::kFloat));
  io::save_safetensors((tmp / "optimizer.safetensors").string(), to_cpu(optimizer_state, at::kFloat));
  nlohmann::ordered_json j;
  j["step"] = state.step;
  j["rng"] = {{"seed", state.run.value("seed", uint64_t{0})},
              {"scheme", "every random choice of step s comes from mt19937_64(splitmix64(splitmix64(seed) ^ s))"}};
  j["run"] = state.run;
  j["history"] = state.history;
  io::write_file_atomic((tmp / kStateFile).string(), j.dump(2) + "\n");
  // Swap: checkpoint -> checkpoint.old, checkpoint.tmp -> checkpoint, drop .old. A kill between the two
  // renames leaves only .old, which find_checkpoint falls back to.
  io::remove_tree(old.string());
  if (fs::exists(dir)) fs::rename(dir, old);
  fs::rename(tmp, dir);
  io::remove_tree(old.string());
}

std::optional<CheckpointState> find_checkpoint(const std::string& out) {
  for (const char* name : {"checkpoint", "checkpoint.old"}) {
    const fs::path dir = fs::path(out) / name;
    const fs::path state_path = dir / kStateFile;
    if (!fs::exists(state_path)) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(depth_checked(io::read_text_file(state_path.string()), state_path.string()));
    } catch (const nlohmann::json::exception& e) {
      fail("{}: invalid JSON: {}", state_path.string(), e.what());
    }
    if (!j.contains("step") || !j["step"].is_number_integer() || !j.contains("run"))
      fail("{}: expected fields 'step' (integer) and 'run'", state_path.string());
    if (j["step"].get<int64_t>() < 0) fail("{}: step {} must be >= 0", state_path.string(), j["step"].dump());
    CheckpointState s;
    s.step = j["step"].get<int64_t>();
    s.run = j["run"];
    s.history = j.value("history", nlohmann::json::array());
    s.dir = dir.string();
    return s;
  }
  return std::nullopt;
}

namespace {

// The first place where two option values differ, as a dotted path below `path` ("config.hidden_size"), with the two
// values there; nullopt where they are equal. Objects are walked key by key, so a nested config names its field.
std::optional<std::tuple<std::string, nlohmann::json, nlohmann::json>> first_difference(const nlohmann::json& now,
                                                                                        const nlohmann::json& was,
                                                                                        const std::string& path) {
  if (now == was) return std::nullopt;
  if (!now.is_object() || !was.is_object()) return std::make_tuple(path, now, was);
  for (const auto* side : {&now, &was})
    for (auto it = side->begin(); it != side->end(); ++it) {
      const nlohmann::json a = now.contains(it.key()) ? now[it.key()] : nlohmann::json();
      const nlohmann::json b = was.contains(it.key()) ? was[it.key()] : nlohmann::json();
      if (auto d = first_difference(a, b, path + "." + it.key())) return d;
    }
  return std::make_tuple(path, now, was);
}

// A checkpoint's tensor, refused where it holds NaN or infinite values: training goes on from it, and a NaN would
// spread to every weight.
at::Tensor finite_tensor(at::Tensor t, const std::string& file, const std::string& name) {
  if (!t.isfinite().all().item<bool>())
    fail("{}: tensor '{}' holds NaN or infinite values (a corrupt checkpoint?)", file, name);
  return t;
}

}  // namespace

namespace {
// The run's input files (input_fingerprints: data, tokenizer) or its models' files (model_fingerprints), by
// fingerprint: the same files with the same bytes, or an error naming the first that differs. A checkpoint written
// before they were recorded has none: said, and not checked.
void check_same_inputs(const nlohmann::json& saved, const nlohmann::json& now, const std::string& source,
                       bool models) {
  const char* what = models ? "the models' files (--target, --draft)" : "its input files";
  const char* again = models ? "resume with the models the run began with" : "resume with the original inputs";
  if (saved.is_null()) {
    std::fprintf(stderr, "--resume: %s records no fingerprints of %s (an older checkpoint): their contents are not "
                 "checked\n", source.c_str(), what);
    return;
  }
  for (auto it = now.begin(); it != now.end(); ++it) {
    if (!saved.contains(it.key()))
      fail("--resume: {} is an input now but was not one when {} was written; {} or start over with --force", it.key(),
           source, again);
    if (saved[it.key()] != it.value())
      fail("--resume: {} changed since {} was written (fingerprint:bytes {} now, {} then); {} or start over with "
           "--force", it.key(), source, it.value().dump(), saved[it.key()].dump(),
           models ? again : "resume with the data the run began with");
  }
  for (auto it = saved.begin(); it != saved.end(); ++it)
    if (!now.contains(it.key()))
      fail("--resume: {} was an input when {} was written and is not one now; {} or start over with --force", it.key(),
           source, again);
}

// Options recorded since a release whose checkpoints lack them: such a checkpoint resumes, with a note saying what
// may differ (nullptr: not such an option).
const char* recorded_later(const std::string& key) {
  if (key == "eval_samples" || key == "trainer") return "not checked";
  if (key == "data_rules")  // data.h's reading rules, version 2
    return "since then, a chat record ending on an assistant turn starts its loss at that answer (train-draft, "
           "train-compressor), and .json files and extensions in capitals are read as records";
  return nullptr;
}
}  // namespace

void check_same_run(const nlohmann::json& saved, const nlohmann::json& now, const std::string& source) {
  if (now.contains("trainer") && saved.contains("trainer") && saved["trainer"] != now["trainer"]) {  // said first
    const auto name = [](const nlohmann::json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); };
    fail("--resume: {} was written by {}, not {}: give {} another --out, or start over with --force", source,
         name(saved["trainer"]), name(now["trainer"]), name(now["trainer"]));
  }
  for (auto it = now.begin(); it != now.end(); ++it) {
    if (it.key() == "steps" || (it.key() == "trainer" && saved.contains("trainer")))
      continue;  // --steps may change (check_resume_matches says how the schedule moves); the trainer is checked above
    if (it.key() == "input_fingerprints" || it.key() == "model_fingerprints") {
      check_same_inputs(saved.contains(it.key()) ? saved[it.key()] : nlohmann::json(), it.value(), source,
                        it.key() == "model_fingerprints");
      continue;
    }
    if (const char* since = recorded_later(it.key()); since != nullptr && !saved.contains(it.key())) {
      std::fprintf(stderr, "--resume: %s does not record option '%s' (an older checkpoint): %s\n", source.c_str(),
                   it.key().c_str(), since);
      continue;
    }
    const nlohmann::json was = saved.contains(it.key()) ? saved[it.key()] : nlohmann::json();
    if (const auto d = first_difference(it.value(), was, it.key()))
      fail("--resume: option '{}' is {} now but {} in {}; resume with the original options or start over with --force",
           std::get<0>(*d), std::get<1>(*d).dump(), std::get<2>(*d).dump(), source);
  }
}

void restore_tensors(const std::string& file, const NamedTensors& params) {
  io::TensorStore store = io::TensorStore::open_file(file);
  c10::NoGradGuard no_grad;
  for (const auto& [name, p] : params) {
    if (!store.has(name)) fail("{}: tensor '{}' missing", file, name);
    p.copy_(finite_tensor(store.take(name, p.sizes().vec(), p.scalar_type(), p.device()), file, name));
  }
  store.check_all_taken();
}

NamedTensors read_tensors(const std::string& file, at::Device device) {
  io::TensorStore store = io::TensorStore::open_file(file);
  NamedTensors out;
  for (const std::string& name : store.names())
    out.emplace_back(name, finite_tensor(store.take(name, store.shape(name), at::kFloat, device), file, name));
  return out;
}

void export_model(const std::string& out, const nlohmann::ordered_json& config, const NamedTensors& tensors,
                  at::ScalarType dtype) {
  io::save_safetensors((fs::path(out) / "model.safetensors").string(), to_cpu(tensors, dtype), {{"format", "pt"}});
  io::write_file_atomic((fs::path(out) / "config.json").string(), config.dump(2) + "\n");
}

at::ScalarType parse_save_dtype(const std::string& name) {
  if (name == "bf16" || name == "bfloat16") return at::kBFloat16;
  if (name == "f32" || name == "float32") return at::kFloat;
  if (name == "f16" || name == "float16") return at::kHalf;
  fail("--save-dtype: unknown dtype '{}' (expected bf16, f32 or f16)", name);
}

std::string dtype_config_name(at::ScalarType dtype) {
  switch (dtype) {
    case at::kBFloat16: return "bfloat16";
    case at::kHalf: return "float16";
    default: return "float32";
  }
}

}  // namespace specpress::train
