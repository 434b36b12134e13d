// cmd_bench.cpp — the bench and diagnose subcommands: shared flags (models, dataset, selection,
// device), then tools::run_bench / tools::run_diagnose and their reports. bench takes several datasets in one run
// (the models load once), as the DFlash reference's benchmark script runs them one after another.
#include "cli/cmd_bench.h"

#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include "cli/common.h"
#include "compress/beacon.h"
#include "core/error.h"
#include "core/json_depth.h"
#include "io/mapped_file.h"
#include "io/output_paths.h"
#include "model/dflash_draft.h"
#include "model/qwen3.h"
#include "tools/bench.h"
#include "tokenizer/utf8.h"
#include "tools/bench_checkpoint.h"
#include "tools/build_info.h"
#include "tools/diagnose.h"
#include "tools/runner.h"
#include "tools/stop_signals.h"

namespace specpress::cli {
namespace {

struct ToolOptions {
  std::string model_dir, draft_dir, dataset, data, device = "auto", dtype = "auto";
  tools::Selection selection;
  int64_t max_new_tokens = 0;  // 0 = the tool's default
  std::string block_sizes;  // bench --block-size, comma-separated: one run each (empty: the draft's trained size)
  decode::SamplingParams sampling;
  bool think = false, check_answers = false, no_progress = false, reference_path = false;
  std::string json_out, markdown_out, html_out;
  std::string checkpoint;  // --checkpoint (bench and diagnose)
  bool resume = false;     // --resume
  std::string compress = "none";
  compress::Policy policy;
  const CLI::Option* subset = nullptr;  // --subset, to tell a given value from the default
  std::string temperatures;             // diagnose --temps, comma-separated
  const CLI::Option* temps = nullptr;   // --temps, to tell an empty value from none
};

struct Loaded {
  std::unique_ptr<model::Qwen3Model> target;
  std::vector<std::unique_ptr<model::DFlashDraft>> drafts;  // --model-draft's, in its order
  std::unique_ptr<tok::Tokenizer> tokenizer;
  std::vector<int64_t> stop_ids;
};

// One dataset to run: its name and its selected samples.
struct DatasetRun {
  std::string name;
  std::vector<tools::BenchSample> samples;
};

// --dataset and --data: each dataset with its selected samples. `several`: --dataset may list several (or all), and
// --data must then be the folder holding their files as ../shared/data names them; a folder also serves one dataset.
std::vector<DatasetRun> select_datasets(const ToolOptions& o, bool several) {
  std::vector<std::string> names = several ? tools::parse_dataset_list(o.dataset) : std::vector<std::string>{o.dataset};
  if (!several && o.dataset.find(',') != std::string::npos)
    fail("--dataset: one dataset at a time here (got '{}')", o.dataset);
  for (const std::string& name : names) tools::check_dataset_name(name);
  if (o.subset != nullptr && o.subset->count() > 0 && o.selection.indices_file.empty())
    fail("--subset: needs --indices (the dflash_subsets.json whose list it names)");
  std::error_code ec;
  const bool folder = std::filesystem::is_directory(o.data, ec);
  if (names.size() > 1 && !folder)
    fail("--data: {} is not a folder; with several datasets (--dataset {}) it must be the folder that holds their "
         "files as ../shared/data names them (e.g. {})", o.data, o.dataset, tools::shared_data_file(names[0]));
  if (names.size() > 1 && !o.selection.indices_file.empty()) {
    // a plain list of rows would select the same rows from every dataset
    const std::string& file = o.selection.indices_file;
    nlohmann::json indices = nlohmann::json::parse(depth_checked(io::read_text_file(file), file), nullptr, false);
    if (!indices.is_discarded() && !indices.is_object())
      fail("--indices: {} is one list of rows; with several datasets give dflash_subsets.json, which lists rows for "
           "each", o.selection.indices_file);
  }
  std::vector<DatasetRun> runs;
  for (const std::string& name : names) {
    std::string file = o.data;
    if (folder) {
      file = (std::filesystem::path(o.data) / tools::shared_data_file(name)).string();
      if (!std::filesystem::is_regular_file(file, ec))
        fail("--data: the folder {} has no {} (dataset {}, named as in ../shared/data)", o.data,
             tools::shared_data_file(name), name);
    }
    runs.push_back({name, tools::select_samples(tools::load_dataset(name, file), name, o.selection)});
  }
  return runs;
}

// diagnose --temps: distinct finite numbers >= 0, separated by commas.
std::vector<double> temperature_list(const std::string& text) {
  std::vector<double> temps;
  if (text.empty()) return temps;
  size_t at = 0;
  for (;;) {
    const size_t comma = text.find(',', at);
    const std::string item = text.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    size_t used = 0;
    double t = -1;
    try {
      t = std::stod(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (item.empty() || used != item.size() || !std::isfinite(t) || t < 0)
      fail("--temps: '{}' is not a temperature (a finite number >= 0) in '{}'", item, text);
    if (std::find(temps.begin(), temps.end(), t) != temps.end()) fail("--temps: {} is given twice in '{}'", t, text);
    temps.push_back(t);
    if (comma == std::string::npos) return temps;
    at = comma + 1;
  }
}

std::string canonical_path(const std::string& path) {
  std::error_code ec;
  return std::filesystem::weakly_canonical(path, ec).string();
}

// --model-draft: bench compares several drafts separated by commas (one plain decoding of each prompt serves them
// all); diagnose studies one. A directory given twice is refused (also under another spelling of its path).
std::vector<std::string> draft_list(const std::string& value, bool several) {
  std::error_code ec;
  if (std::filesystem::is_directory(value, ec)) return {value};  // one, its name perhaps with a comma
  if (!several && value.find(',') != std::string::npos)
    fail("--model-draft: '{}' is not a directory; diagnose studies one draft at a time (bench compares several)",
         value);
  if (!several) return {value};
  std::vector<std::string> dirs, seen;
  size_t at = 0;
  for (;;) {
    const size_t comma = value.find(',', at);
    const std::string dir = value.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    if (dir.empty())
      fail("--model-draft: an empty directory in '{}' (expected directories separated by commas)", value);
    const std::string canonical = canonical_path(dir);
    if (std::find(seen.begin(), seen.end(), canonical) != seen.end())
      fail("--model-draft: {} is given twice in '{}'", dir, value);
    dirs.push_back(dir);
    seen.push_back(canonical);
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return dirs;
}

Loaded load_models(const ToolOptions& o, const std::vector<std::string>& draft_dirs) {
  std::optional<tok::Tokenizer> tokenizer = load_tokenizer_if_present(o.model_dir);
  if (!tokenizer) fail("{}: no tokenizer.json (bench and diagnose apply the chat template to text prompts)", o.model_dir);
  Loaded l;
  l.tokenizer = std::make_unique<tok::Tokenizer>(*tokenizer);
  // The reference benchmark stops on tokenizer.eos_token_id only (<|im_end|> for Qwen3).
  std::vector<int32_t> eos = l.tokenizer->eos_ids();
  auto im_end = l.tokenizer->token_to_id("<|im_end|>");
  if (im_end) l.stop_ids = {*im_end};
  else l.stop_ids.assign(eos.begin(), eos.end());
  const auto [device, dtype] = parse_placement(o.device, o.dtype);
  for (const std::string& dir : draft_dirs) model::draft_config_for_dirs(dir, o.model_dir);  // before the weights load
  l.target = std::make_unique<model::Qwen3Model>(model::Qwen3Model::load(o.model_dir, dtype, device));
  for (const std::string& dir : draft_dirs)
    l.drafts.push_back(std::make_unique<model::DFlashDraft>(model::DFlashDraft::load(dir, *l.target, dtype, device)));
  return l;
}

void write_output(const std::string& path, const std::string& text, const std::string& what, bool say = true) {
  if (path.empty()) return;
  io::write_file_atomic(path, text);
  if (say) std::fprintf(stderr, "wrote %s to %s\n", what.c_str(), path.c_str());
}

// The run's inputs, which no output may write over (io::check_output_files).
std::vector<io::NamedPath> inputs_of(const ToolOptions& o, const std::vector<std::string>& draft_dirs) {
  std::error_code ec;
  std::vector<io::NamedPath> inputs = {
      {"--data", o.data},
      {"--indices", o.selection.indices_file},
      {"-m/--model", o.model_dir},
      {"--compress", std::filesystem::is_directory(o.compress, ec) ? o.compress : ""}};  // a beacon directory
  for (const std::string& dir : draft_dirs) inputs.push_back({"--model-draft", dir});
  return inputs;
}

// A model directory as a checkpoint names it: its canonical path, which must be UTF-8 (JSON text), then its files'
// fingerprint, so that a model replaced in place is not taken for the old one.
std::string checkpoint_model_key(const std::string& dir, const std::string& flag) {
  const std::string path = canonical_path(dir);
  if (tok::utf8::find_invalid(path) != tok::utf8::npos)
    fail("{}: {} is not valid UTF-8, and --checkpoint keeps it in a JSON file; rename it or drop --checkpoint",
         flag, dir);
  return path + " " + tools::model_files_fingerprint(dir);
}

// What makes a checkpoint's records reusable by this run: every setting that changes what a sample generates or how it
// is timed (the dataset, draft, block size, sample and turn are each record's own; its prompt is checked when reused),
// all but the compression policy, which needs the target loaded (checkpoint_settings adds it).
std::string dtype_name(const ToolOptions& o) {
  return model::compute_dtype_name(
      model::parse_compute_dtype(o.dtype, model::parse_device(o.device, "--device"), "--dtype"));
}
std::string device_name(const ToolOptions& o) {
  return tools::device_description(model::parse_device(o.device, "--device"));
}

// What a report was measured with, at its top: the build, the device, the dtype, the models, the data and how its
// samples were chosen.
nlohmann::ordered_json provenance(const ToolOptions& o) {
  nlohmann::ordered_json selection = {{"max_samples", o.selection.max_samples}, {"seed", o.selection.seed}};
  if (!o.selection.indices_file.empty()) {
    selection["indices"] = canonical_path(o.selection.indices_file);
    selection["subset"] = o.selection.indices_key;
  }
  nlohmann::ordered_json drafts = nlohmann::ordered_json::array();
  for (const std::string& dir : draft_list(o.draft_dir, /*several=*/true)) drafts.push_back(canonical_path(dir));
  return {{"build", tools::build_json()}, {"device", device_name(o)}, {"dtype", dtype_name(o)},
          {"cpu_threads", at::get_num_threads()}, {"model", canonical_path(o.model_dir)}, {"model_draft", drafts},
          {"data", canonical_path(o.data)}, {"selection", selection}};
}

nlohmann::ordered_json checkpoint_base_settings(const ToolOptions& o) {
  nlohmann::ordered_json settings = {{"model", checkpoint_model_key(o.model_dir, "-m/--model")},
                                     {"device", device_name(o)},
                                     {"dtype", dtype_name(o)},
                                     {"reference_path", o.reference_path},
                                     {"max_new_tokens", o.max_new_tokens},
                                     {"temperature", o.sampling.temperature},
                                     {"top_k", o.sampling.top_k},
                                     {"top_p", o.sampling.top_p},
                                     {"min_p", o.sampling.min_p},
                                     {"seed", o.sampling.seed},
                                     {"enable_thinking", o.think},
                                     {"check_answers", o.check_answers}};
  // on the CPU, LibTorch's thread count (-t) sets every record's timing: records timed at one count are not mixed
  // with a run at another (the GPU's steps do not depend on it)
  if (model::parse_device(o.device, "--device").is_cpu()) settings["cpu_threads"] = at::get_num_threads();
  // only when on, so that checkpoints written before penalties and biases existed still resume
  if (o.sampling.penalized()) settings["penalties"] = decode::penalties_json(o.sampling);
  if (!o.sampling.logit_bias.empty()) settings["logit_bias"] = decode::logit_bias_json(o.sampling);
  return settings;
}
nlohmann::ordered_json checkpoint_settings(const ToolOptions& o, const tools::BenchOptions& b) {
  nlohmann::ordered_json settings = checkpoint_base_settings(o);
  // what a compressed record's counts mean (compress::CompressionStats), named so that records of a specpress that
  // counted otherwise, or named a beacon by the path as typed, are refused as such (compare_settings)
  if (b.compress.enabled()) settings["compress_counts"] = tools::kCompressCounts;
  settings["compress"] = compress::policy_json(b.compress);
  // a beacon compressor as a model is named: its canonical path and its files' fingerprint, so that one retrained in
  // place is not taken for the old one, and the same folder spelled another way is the same
  if (b.compress.method == compress::Method::kBeacon)
    settings["compress"]["checkpoint"] = checkpoint_model_key(b.compress.beacon_dir, "--compress");
  return settings;
}

int run_bench(const ToolOptions& o) {
  c10::InferenceMode inference_mode;
  if (o.max_new_tokens < 1) fail("--max-new-tokens: must be at least 1, found {}", o.max_new_tokens);
  const std::vector<std::string> draft_dirs = draft_list(o.draft_dir, /*several=*/true);
  io::check_output_files({{"--json", o.json_out}, {"--markdown", o.markdown_out}, {"--checkpoint", o.checkpoint}},
                         inputs_of(o, draft_dirs));
  if (o.resume && o.checkpoint.empty()) fail("--resume: needs --checkpoint (the file of the bench to continue)");
  if (!o.checkpoint.empty()) {  // before the models load
    for (const std::string& dir : draft_dirs) checkpoint_model_key(dir, "--model-draft");
    tools::BenchCheckpoint::check_early(o.checkpoint, o.resume, checkpoint_base_settings(o));
  }
  decode::validate(o.sampling);
  // Cheap checks first, so bad flags and data fail before a model loads.
  const std::vector<DatasetRun> runs = select_datasets(o, /*several=*/true);
  const auto answered = [](const std::string& name) { return name == "gsm8k" || name == "math500"; };
  if (o.check_answers && std::none_of(runs.begin(), runs.end(), [&](const DatasetRun& r) { return answered(r.name); }))
    fail("--check-answers: only gsm8k and math500 have final answers to compare (dataset {})", o.dataset);
  const std::vector<int64_t> sizes = parse_id_list(o.block_sizes, "--block-size", "block size");
  for (int64_t size : sizes)
    if (size < 2 && size != 0)
      fail("--block-size: must be at least 2 for speculative decoding (0: the draft's trained size), found {}", size);
  Loaded l = load_models(o, draft_dirs);
  tools::BenchOptions b;
  b.max_new_tokens = o.max_new_tokens;
  b.sampling = o.sampling;
  b.think = o.think;
  b.progress = !o.no_progress;
  b.reference_path = o.reference_path;
  b.compress = compress::resolve_compress(o.compress, "--compress", o.policy, *l.target);
  compress::validate(b.compress);
  if (const std::string note = compress::no_saving_note(b.compress, /*one_token_a_forward=*/false); !note.empty())
    std::fprintf(stderr, "%s\n", note.c_str());
  // every size checked against each draft before any run; 0 is the trained size, which may not be given twice
  std::vector<std::vector<int64_t>> block_sizes(l.drafts.size());
  for (size_t d = 0; d < l.drafts.size(); ++d)
    for (int64_t size : sizes.empty() ? std::vector<int64_t>{0} : sizes) {
      const int64_t resolved = decode::resolve_block_size(*l.drafts[d], size);
      if (std::find(block_sizes[d].begin(), block_sizes[d].end(), resolved) != block_sizes[d].end())
        fail("--block-size: {} is given twice (0 is the draft's trained size{})", resolved,
             l.drafts.size() > 1 ? ", here " + draft_dirs[d] + "'s" : "");
      block_sizes[d].push_back(resolved);
    }
  struct Run {
    const DatasetRun* dataset;
    size_t draft;
    int64_t block_size;
  };
  std::vector<Run> plan;
  for (const DatasetRun& run : runs)
    for (size_t d = 0; d < l.drafts.size(); ++d)
      for (int64_t size : block_sizes[d]) plan.push_back({&run, d, size});
  std::optional<tools::BenchCheckpoint> checkpoint;
  std::vector<std::string> draft_keys;  // each draft as the checkpoint names it
  if (!o.checkpoint.empty()) {
    checkpoint.emplace(o.checkpoint, checkpoint_settings(o, b), o.resume);
    for (const std::string& dir : draft_dirs) draft_keys.push_back(checkpoint_model_key(dir, "--model-draft"));
  }
  const int64_t checkpoint_found = checkpoint ? checkpoint->size() : 0;
  if (checkpoint)  // every run's records against the prompts rendered now, before the first sample
    for (const auto& [run, draft, block_size] : plan)
      tools::check_resumed_prompts(*l.tokenizer, run->samples, checkpoint->records(run->name, draft_keys[draft],
                                                                                   block_size), o.think, run->name);
  // One run (a dataset with a draft at a block size) writes its report as before; several write theirs in turn and
  // then the summary table. The files are rewritten (atomically) after each run, so that a long one keeps what it
  // finished (and --checkpoint each sample).
  std::vector<tools::BenchReport> reports;
  std::string md;
  // by prompt and path: one plain decoding serves every draft and block size
  std::map<std::string, decode::GenerationResult> plain_results;
  b.plain_results = &plain_results;
  const nlohmann::ordered_json measured_with = provenance(o);
  // under the tables, as under a paper's: what measured them
  const std::string footer = fmt::format("\nMeasured by {} on {}, {}.\n", tools::build_line(),
                                         measured_with["device"].get<std::string>(),
                                         measured_with["dtype"].get<std::string>());
  // Ctrl-C stops after the sample in flight: the reports so far are written (marked unfinished), then exit 130
  const tools::StopSignals signals("after the sample in flight, with the reports so far written");
  b.keep_going = [&signals] { return signals.received() == 0; };
  // runs whose every sample was decoded (a signal's run holds only some)
  const auto whole_runs = [&reports] { return reports.size() - (!reports.empty() && reports.back().interrupted); };
  for (const auto& [run, draft, block_size] : plan) {
    if (signals.received() != 0) break;
    b.dataset = run->name;
    b.draft = draft_dirs[draft];
    b.block_size = block_size;
    b.check_answers = o.check_answers && answered(run->name);
    if (checkpoint) {
      const std::string& draft_key = draft_keys[draft];
      b.resume_records = checkpoint->records(run->name, draft_key, block_size);
      b.on_record = [&checkpoint, name = run->name, draft_key, block_size](const tools::BenchRecord& rec) {
        checkpoint->add(name, draft_key, block_size, rec);
      };
    }
    if (plan.size() > 1 && b.progress)
      std::fprintf(stderr, "bench: %s, %sblock size %lld (%zu of %zu)\n", run->name.c_str(),
                   l.drafts.size() > 1 ? ("draft " + draft_dirs[draft] + ", ").c_str() : "",
                   static_cast<long long>(block_size), reports.size() + 1, plan.size());
    tools::BenchReport report =
        tools::run_bench(*l.target, *l.drafts[draft], *l.tokenizer, run->samples, b, l.stop_ids);
    if (report.interrupted && report.records.empty()) break;
    reports.push_back(std::move(report));
    const size_t finished = whole_runs();
    const std::string dataset_md = tools::bench_markdown(reports.back());
    std::printf("%s%s", reports.size() > 1 ? "\n" : "", dataset_md.c_str());
    std::fflush(stdout);
    md += (reports.size() > 1 ? "\n" : "") + dataset_md;
    nlohmann::ordered_json j = measured_with;
    if (plan.size() == 1) {
      const nlohmann::ordered_json report = tools::bench_json(reports.back());
      for (const auto& [key, value] : report.items()) j[key] = value;
    } else {
      j["summary"] = tools::bench_summary_json(reports);
      j["summary"]["runs_planned"] = plan.size();  // more than the datasets' reports: an unfinished run's file
      j["summary"]["runs_finished"] = finished;
      j["datasets"] = nlohmann::ordered_json::array();
      for (const tools::BenchReport& r : reports) j["datasets"].push_back(tools::bench_json(r));
    }
    const bool last = finished == plan.size(), stopped = reports.back().interrupted;
    // a file rewritten after each run says so until the last: a stopped or killed bench's reports are not whole
    const std::string unfinished =
        last ? "" : fmt::format("\n{} of the {} planned runs finished {}(this file is rewritten after each run; "
                                "--checkpoint and --resume continue a stopped bench)\n", finished, plan.size(),
                                stopped ? "before a signal stopped the bench " : "so far ");
    const std::string summary = (plan.size() > 1 ? "\n" + tools::bench_summary_markdown(reports) : "") + unfinished;
    write_output(o.markdown_out, md + summary + footer, "the Markdown table", /*say=*/last || stopped);
    write_output(o.json_out, j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n",
                 "per-sample records", /*say=*/last || stopped);
  }
  if (const int signal = signals.received(); signal != 0 && whole_runs() < plan.size()) {
    int64_t records = 0;
    for (const tools::BenchReport& r : reports) records += static_cast<int64_t>(r.records.size());
    throw Interrupted(signal, fmt::format("bench: stopped by {} after {} records ({} of the {} planned runs whole); "
                                          "the reports say so{}",
                                          tools::StopSignals::name(signal), records, whole_runs(), plan.size(),
                                          o.checkpoint.empty()
                                              ? " (--checkpoint keeps each sample for a --resume)"
                                              : "; the same command with --resume continues from " + o.checkpoint));
  }
  if (plan.size() > 1) std::printf("\n%s", tools::bench_summary_markdown(reports).c_str());
  std::printf("%s", footer.c_str());
  if (checkpoint && o.resume) {
    int64_t reused = 0;
    for (const tools::BenchReport& r : reports) reused += r.resumed;
    std::fprintf(stderr, "bench: reused %lld of the %lld records --resume found in %s%s\n",
                 static_cast<long long>(reused), static_cast<long long>(checkpoint_found), o.checkpoint.c_str(),
                 reused < checkpoint_found
                     ? " (the rest are of samples, drafts or block sizes this run did not ask for)"
                     : "");
  }
  return 0;
}

// What makes diagnose --checkpoint's records reusable: every setting that changes a sample's sums (the sample and its
// prompt are each record's own, the prompt checked when reused).
nlohmann::ordered_json diagnose_checkpoint_settings(const ToolOptions& o, const tools::DiagnoseOptions& d) {
  return {{"model", checkpoint_model_key(o.model_dir, "-m/--model")},
          {"model_draft", checkpoint_model_key(o.draft_dir, "--model-draft")},
          {"device", device_name(o)},
          {"dtype", dtype_name(o)},
          {"dataset", d.dataset},
          {"max_new_tokens", d.max_new_tokens},
          {"enable_thinking", d.think},
          {"temps", d.temperatures},
          {"calibration_bins", d.calibration_bins},
          {"mix_weights", d.mix_weights}};
}

int run_diagnose(const ToolOptions& o) {
  c10::InferenceMode inference_mode;
  if (o.max_new_tokens < 2)  // start s scores the drafted tokens after s: a trajectory of one token has none
    fail("--max-new-tokens: must be at least 2 (a block start needs a generated token before and after it), found {}",
         o.max_new_tokens);
  const std::vector<std::string> draft_dirs = draft_list(o.draft_dir, /*several=*/false);
  io::check_output_files({{"--json", o.json_out}, {"--html", o.html_out}, {"--checkpoint", o.checkpoint}},
                         inputs_of(o, draft_dirs));
  if (o.resume && o.checkpoint.empty()) fail("--resume: needs --checkpoint (the file of the diagnose to continue)");
  const std::vector<DatasetRun> runs = select_datasets(o, /*several=*/false);
  if (o.temps != nullptr && o.temps->count() > 0 && o.temperatures.empty())
    fail("--temps: empty (expected temperatures separated by commas, e.g. 0,0.6,1)");
  tools::DiagnoseOptions d;
  d.dataset = o.dataset;
  d.max_new_tokens = o.max_new_tokens;
  d.think = o.think;
  d.progress = !o.no_progress;
  d.temperatures = temperature_list(o.temperatures);  // checked before the models load
  if (!o.checkpoint.empty())  // before the models load
    tools::JsonlCheckpoint::check_early(o.checkpoint, tools::diagnose_checkpoint_format(), o.resume,
                                        diagnose_checkpoint_settings(o, d));
  Loaded l = load_models(o, draft_dirs);
  std::optional<tools::JsonlCheckpoint> checkpoint;
  if (!o.checkpoint.empty()) {
    checkpoint.emplace(o.checkpoint, tools::diagnose_checkpoint_format(), diagnose_checkpoint_settings(o, d),
                       o.resume);
    d.resume_records = tools::diagnose_records(*checkpoint);
    d.on_record = [&checkpoint](const tools::DiagnoseRecord& r) { checkpoint->append(tools::diagnose_record_json(r)); };
  }
  const std::string continues = o.checkpoint.empty()
                                    ? " (--checkpoint keeps each sample for a --resume)"
                                    : "; the same command with --resume continues from " + o.checkpoint;
  // Ctrl-C stops after the sample in flight: the reports cover the samples done (marked so), then exit 128 + signal
  const tools::StopSignals signals("after the sample in flight, with the reports so far written");
  d.keep_going = [&signals] { return signals.received() == 0; };
  tools::DiagnoseReport report =
      tools::run_diagnose(*l.target, *l.drafts[0], *l.tokenizer, runs[0].samples, d, l.stop_ids);
  if (checkpoint && o.resume) {  // the records not reused: of samples not asked for, or not reached before a stop
    std::set<std::string> asked;
    for (const tools::BenchSample& s : runs[0].samples) asked.insert(s.id);
    const int64_t found = static_cast<int64_t>(d.resume_records.size());
    const int64_t of_this_run = std::count_if(d.resume_records.begin(), d.resume_records.end(),
                                              [&](const tools::DiagnoseRecord& r) { return asked.count(r.id) > 0; });
    std::vector<std::string> rest;
    if (found > of_this_run) rest.push_back(fmt::format("{} of samples this run did not ask for", found - of_this_run));
    if (of_this_run > report.resumed)
      rest.push_back(fmt::format("{} of samples after the stop", of_this_run - report.resumed));
    std::fprintf(stderr, "diagnose: reused %lld of the %lld records --resume found in %s%s\n",
                 static_cast<long long>(report.resumed), static_cast<long long>(found), o.checkpoint.c_str(),
                 rest.empty() ? "" : fmt::format(" ({})", fmt::join(rest, "; ")).c_str());
  }
  const int signal = signals.received();
  if (report.block_starts == 0 && report.interrupted)
    throw Interrupted(signal, fmt::format("diagnose: stopped by {} after {} of {} samples, before any block start: no "
                                          "report written{}", tools::StopSignals::name(signal), report.samples,
                                          report.samples_planned, continues));
  if (report.block_starts == 0)
    fail("diagnose: no block start along the target's trajectories ({} tokens over {} samples at --max-new-tokens {}): "
         "nothing to report; give more --max-new-tokens", report.trajectory_tokens, report.samples, o.max_new_tokens);
  nlohmann::ordered_json j = provenance(o);
  j["max_new_tokens"] = o.max_new_tokens;
  j["enable_thinking"] = o.think;
  const nlohmann::ordered_json body = tools::diagnose_json(report);
  for (const auto& [key, value] : body.items()) j[key] = value;
  std::printf("%s\n", j.dump(2).c_str());
  write_output(o.json_out, j.dump(2) + "\n", "the JSON report");
  write_output(o.html_out, tools::diagnose_html(report), "the HTML report");
  if (report.interrupted)
    throw Interrupted(signal, fmt::format("diagnose: stopped by {} after {} of {} samples; the reports cover those "
                                          "and say so{}", tools::StopSignals::name(signal), report.samples,
                                          report.samples_planned, continues));
  return 0;
}

CLI::App* add_common(CLI::App& app, const std::string& name, const std::string& help, ToolOptions& o) {
  CLI::App* cmd = app.add_subcommand(name, help);
  cmd->add_option("-m,--model", o.model_dir, "target model directory (HF Qwen3, with tokenizer.json)")->required();
  cmd->add_option("--model-draft", o.draft_dir,
                  name == "bench" ? "DFlash draft directory (also -md); several separated by commas are compared "
                                    "in one run (each prompt decoded plainly once for all)"
                                  : "DFlash draft directory (also -md)")
      ->required();
  cmd->add_option("--dataset", o.dataset,
                  name == "bench" ? "gsm8k, math500, humaneval, mbpp, mt-bench or alpaca; several separated by commas, or "
                                    "all (one model load; a summary table at the end)"
                                  : "gsm8k, math500, humaneval, mbpp, mt-bench or alpaca")
      ->required();
  const std::string data_help =
      "the dataset file (original JSONL/JSON or ../shared/data/*.jsonl), or a folder holding the files as "
      "../shared/data names them";
  cmd->add_option("--data", o.data, name == "bench" ? data_help + " (needed for several datasets)" : data_help)
      ->required();
  cmd->add_option("--max-samples", o.selection.max_samples, "at most this many samples (0 = all)")->capture_default_str();
  cmd->add_option("--seed", o.selection.seed, "shuffle seed for --max-samples without --indices")
      ->capture_default_str();
  cmd->add_option("--indices", o.selection.indices_file,
                  "run exactly these rows: a JSON file holding an array of row indices, or dflash_subsets.json");
  o.subset = cmd->add_option("--subset", o.selection.indices_key, "which list of the --indices dflash_subsets.json")
                 ->capture_default_str();
  cmd->add_flag("--think", o.think, "enable_thinking in the chat template (the DFlash drafts were trained without)");
  add_placement_flags(*cmd, o.device, o.dtype);
  cmd->add_option("--json", o.json_out, "write the JSON report to this file");
  cmd->add_flag("--no-progress", o.no_progress, "no progress bar on stderr");
  return cmd;
}

void add_checkpoint_flags(CLI::App& cmd, ToolOptions& o, const std::string& tool) {
  cmd.add_option("--checkpoint", o.checkpoint,
                 "append every finished sample to this file (JSON Lines, fsynced after each), so that --resume can "
                 "continue an interrupted " + tool);
  cmd.add_flag("--resume", o.resume,
               "continue the " + tool + " in --checkpoint: reuse its samples (same settings, checked) and run the rest");
}

}  // namespace

void add_bench_commands(CLI::App& app, std::function<int()>& run) {
  auto b = std::make_shared<ToolOptions>();
  b->max_new_tokens = 2048;
  CLI::App* bench = add_common(app, "bench", "plain vs DFlash decoding on a dataset: speedup, tau, acceptance", *b);
  bench->add_option("--max-new-tokens", b->max_new_tokens, "tokens per sample")->capture_default_str();
  add_sampling_flags(*bench, b->sampling);
  bench->add_option("--sampling-seed", b->sampling.seed,
                    "seed of the sampled decodings at --temp > 0 (each sample's plain and DFlash runs start from it; "
                    "--seed picks the samples)")
      ->capture_default_str();
  bench->add_option("--block-size", b->block_sizes,
                    "DFlash block size (default: the draft's trained size); several separated by commas run each "
                    "dataset at each size");
  bench->add_flag("--check-answers", b->check_answers, "gsm8k/math500: compare final boxed answers");
  bench->add_option("--markdown", b->markdown_out, "write the Markdown table to this file");
  add_compression_flags(*bench, b->compress, b->policy);
  bench->add_flag("--reference-path", b->reference_path, "use the reference ATen path even where the CUDA fast path applies");
  add_checkpoint_flags(*bench, *b, "bench");
  bench->callback([&run, b]() { run = [b]() { return run_bench(*b); }; });

  auto d = std::make_shared<ToolOptions>();
  d->max_new_tokens = 256;
  CLI::App* diag = add_common(app, "diagnose",
                              "draft-vs-target analysis along the target's greedy trajectory of each sample's first "
                              "turn; the JSON report is printed on stdout (and written to --json)",
                              *d);
  diag->add_option("--max-new-tokens", d->max_new_tokens,
                   "length of each greedy trajectory (at least 2: a block start needs a token before and after it)")
      ->capture_default_str();
  diag->add_option("--html", d->html_out, "write a self-contained HTML report with SVG charts (replaced if it exists)");
  add_checkpoint_flags(*diag, *d, "diagnose");
  d->temps = diag->add_option("--temps", d->temperatures,
                   "also the expected acceptance of a step sampled at these temperatures (comma-separated, e.g. "
                   "0,0.6,1): a target verify of each drafted block");
  diag->callback([&run, d]() { run = [d]() { return run_diagnose(*d); }; });
}

}  // namespace specpress::cli
