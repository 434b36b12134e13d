// bench_checkpoint.h — `bench --checkpoint FILE [--resume]`: a long bench keeps every finished sample (each turn of
// mt-bench) of every run in one JSON Lines file (jsonl_checkpoint.h): a first line with the settings that produced
// them, then a line a record, each appended and fsynced as it is finished.
// With --resume, a run reuses the records of the samples it asks for again (same dataset, draft, block size, sample
// and turn, checked against the prompt it renders now) and generates only the rest, so an interrupted bench of hours
// continues where it stopped. A record holds what the report needs, losslessly: outputs, acceptance lengths, timings,
// answers, compression statistics. Records are reused only under the same settings (target, device by name, dtype,
// path, sampling, lengths, compression); the file says which setting differs otherwise. Models are named by their
// directory's canonical path and a fingerprint of its files. A bench holds the file's lock while it runs.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tools/bench.h"
#include "tools/jsonl_checkpoint.h"

namespace specpress::tools {

// The settings' "compress_counts" of a compressed bench: what its records' compression numbers mean (events, slots
// freed and overhead as the last forward used them, compress::CompressionStats; top-attention's scores from the
// committed tokens' rows alone; the compressed output's answer checked). Checkpoints with another value (or none)
// counted otherwise and are refused by name.
inline constexpr const char* kCompressCounts =
    "2026-12-07: at the last forward, committed rows, compressed answers, cache sizes";

// FNV-1a of the prompt's ids, as hex: a record is reused only for the prompt it was made from.
std::string prompt_fingerprint(const std::vector<int64_t>& prompt);
// FNV-1a of a model directory's file names, sizes and modification times (not their bytes: cheap for 16 GB): a model
// retrained or replaced in place gets another, so records made with the old one are not reused.
std::string model_files_fingerprint(const std::string& dir);

// A record as the checkpoint holds it, and back; `where` starts every error ("FILE: record 3").
nlohmann::ordered_json checkpoint_record_json(const BenchRecord& record);
BenchRecord checkpoint_record_from_json(const nlohmann::json& j, const std::string& where);

class BenchCheckpoint {
 public:
  // Opens `path` for a run with `settings` (a flat JSON object). `resume` false: the file must not exist yet (an
  // existing one is refused, naming --resume). `resume` true: it must exist, be a bench checkpoint and hold records
  // made with equal settings; errors name the file and the first setting that differs.
  // The file is locked (flock) while this object lives: a second bench on the same file is refused.
  BenchCheckpoint(std::string path, nlohmann::ordered_json settings, bool resume);
  // Those checks before the models load: the file exists exactly when resuming, and a resumed one is a checkpoint
  // whose settings equal `settings` where both name a setting (the rest are checked by the constructor).
  static void check_early(const std::string& path, bool resume, const nlohmann::ordered_json& settings);

  // The records held for (dataset, draft, block size), in the order they were made.
  std::vector<BenchRecord> records(const std::string& dataset, const std::string& draft, int64_t block_size) const;
  // Adds a finished record (a later one with the same dataset, draft, block size, sample and turn replaces an earlier
  // one) and appends it to the file.
  void add(const std::string& dataset, const std::string& draft, int64_t block_size, const BenchRecord& record);
  int64_t size() const { return static_cast<int64_t>(entries_.size()); }
  const std::string& path() const { return file_.path(); }

 private:
  struct Entry {
    std::string dataset, draft;
    int64_t block_size = 0;
    BenchRecord record;
  };
  void keep(Entry entry);  // in entries_, replacing one with the same key
  JsonlCheckpoint file_;
  std::vector<Entry> entries_;
};

}  // namespace specpress::tools
