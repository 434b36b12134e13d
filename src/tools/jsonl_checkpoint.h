// jsonl_checkpoint.h — the file beneath bench's and diagnose's --checkpoint FILE [--resume]: JSON Lines, a first
// line naming the format, its version, the build and the settings that made the records, then one record a line,
// each appended and fsynced as it is finished (a file of thousands of records is never rewritten; a crash while
// appending leaves a torn last line, which --resume drops and cuts off). Records are reused only under equal
// settings: the file names the first setting that differs. The tool holds the file's lock (flock) while it runs, so
// a second run on the same file is refused. What a record holds is the tool's (bench_checkpoint.h, diagnose.h).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/path_lock.h"

namespace specpress::tools {

struct CheckpointFormat {
  std::string format;  // the first line's "format" ("specpress bench checkpoint")
  int64_t version = 1;
  std::string tool;    // in messages: "bench", "diagnose"
  std::string other_build_note;  // said where another build began the file: what its records keep from that build
  // Asked before the generic error where a setting differs, so that a tool can name what such a difference means (a
  // format of the records no flag can change back); returning leaves the generic error.
  std::function<void(const std::string& path, const std::string& key, const nlohmann::json& saved,
                     const nlohmann::json& now)>
      on_difference;
};

class JsonlCheckpoint {
 public:
  struct Line {
    std::string where;  // "FILE: line N", to start a record's errors
    nlohmann::json value;  // a JSON object
  };

  // Opens `path` for a run with `settings` (a flat JSON object). `resume` false: the file must not exist yet (an
  // existing one is refused, naming --resume); its settings line is written at once, so that an unwritable path fails
  // before any work. `resume` true: it must exist, be a checkpoint of `format` and hold records made with equal
  // settings; errors name the file and the first setting that differs. Either way a checkpoint of `format` that holds
  // its settings line alone (a run that failed or stopped before its first record), or only the start of that line (a
  // run stopped while rewriting it; an empty file), is begun again, with a note.
  JsonlCheckpoint(std::string path, CheckpointFormat format, nlohmann::ordered_json settings, bool resume);
  JsonlCheckpoint(const JsonlCheckpoint&) = delete;
  JsonlCheckpoint& operator=(const JsonlCheckpoint&) = delete;
  // Those checks before the models load: the file exists exactly when resuming, and a resumed one is a checkpoint of
  // `format` whose settings equal `settings` where both name a setting (the rest are checked by the constructor).
  static void check_early(const std::string& path, const CheckpointFormat& format, bool resume,
                          const nlohmann::ordered_json& settings);

  // The record lines a resumed file held, in file order (blank lines skipped; each an object, or an error).
  const std::vector<Line>& lines() const { return lines_; }
  // Appends a record line and syncs it to the disk.
  void append(const nlohmann::ordered_json& record);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  CheckpointFormat format_;
  io::PathLock lock_;  // the file's, released with the object (also where the constructor fails after taking it)
  std::vector<Line> lines_;
};

}  // namespace specpress::tools
