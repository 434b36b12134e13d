// jsonl_checkpoint.cpp — see jsonl_checkpoint.h.
#include "tools/jsonl_checkpoint.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "core/error.h"
#include "core/json_depth.h"
#include "io/mapped_file.h"
#include "model/config_json.h"
#include "tools/build_info.h"

namespace specpress::tools {
namespace {

using Json = nlohmann::ordered_json;

// Whether `path` is a checkpoint of this format holding its settings line alone: a run that failed or was stopped
// before its first record (a bad flag found after the file was begun, say). Nothing would be lost by beginning it
// again, so such a file neither blocks a run without --resume nor holds a resumed one to its settings. So is a file
// holding part of that line and nothing else (every settings line begins {"format":"FORMAT",): a run stopped while
// it rewrote the line in place (the constructor), or an empty file. Reads the first line (at most 1 MiB) and then only
// up to the first byte that is not white space, so that a large file given by mistake costs nothing.
bool holds_no_records(const std::string& path, const CheckpointFormat& f) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::string first;
  char c = 0;
  while (first.size() < (size_t{1} << 20) && in.get(c) && c != '\n') first.push_back(c);
  if (in.eof()) {  // the whole file is one unfinished line: a torn settings line, or not a checkpoint
    const std::string begins = "{\"format\":" + nlohmann::json(f.format).dump() + ",";
    return first.size() <= begins.size() ? begins.compare(0, first.size(), first) == 0 : first.starts_with(begins);
  }
  if (c != '\n') return false;  // a first line of over 1 MiB, or a read error
  while (in.get(c))
    if (c != ' ' && c != '\t' && c != '\r' && c != '\n') return false;
  const nlohmann::json j = nlohmann::json::parse(depth_checked(first, path + ": line 1"), nullptr, false);
  return !j.is_discarded() && j.is_object() && j.contains("format") && j["format"] == f.format;
}

// The lock of the existing checkpoint `path`; fails where another run holds it.
io::PathLock take_lock(const std::string& path, const CheckpointFormat& f) {
  return io::PathLock::take(path, "--checkpoint",
                            fmt::format("--checkpoint: {} is in use by another specpress {} (it holds the file's "
                                        "lock); wait for it to end or give another file",
                                        path, f.tool));
}

void check_path(const std::string& path, const CheckpointFormat& f, bool resume) {
  std::error_code ec;
  const bool exists = std::filesystem::exists(path, ec);
  if (exists && !resume && !holds_no_records(path, f))
    fail("--checkpoint: {} already exists; pass --resume to continue the {} it holds, or remove it to start over",
         path, f.tool);
  if (!exists && resume)
    fail("--resume: {} does not exist (no {} to continue; drop --resume to start one)", path, f.tool);
}

// The settings line of the checkpoint `text` (its first line), checked to be one.
nlohmann::json read_header(const std::string& text, const std::string& path, const CheckpointFormat& f) {
  const size_t newline = text.find('\n');
  nlohmann::json j =
      nlohmann::json::parse(depth_checked(text.substr(0, newline), path + ": line 1"), nullptr, false);
  if (newline == std::string::npos || j.is_discarded() || !j.is_object() || !j.contains("format") ||
      j["format"] != f.format)
    fail("--resume: {} is not a {} checkpoint (its first line must be a JSON object with \"format\": \"{}\")", path,
         f.tool, f.format);
  const std::string where = path + ": line 1";
  const model::ConfigReader top{j, where};
  if (top.integer("version") != f.version)
    fail("{}: field 'version' is {}; this specpress reads version {}", where, top.integer("version"), f.version);
  if (!j.contains("settings") || !j["settings"].is_object()) fail("{}: field 'settings' must be an object", where);
  return j;
}

// Fails naming the first setting of `now` that the header's differs in; `all`: also a saved setting `now` lacks.
void compare_settings(const nlohmann::json& header, const Json& now_ordered, const std::string& path,
                      const CheckpointFormat& f, bool all) {
  const nlohmann::json& saved = header["settings"];
  const nlohmann::json now = nlohmann::json::parse(now_ordered.dump());
  for (const auto& [key, value] : now.items()) {
    const nlohmann::json old = saved.contains(key) ? saved[key] : nlohmann::json();
    if (old == value) continue;
    if (f.on_difference) f.on_difference(path, key, old, value);
    if (!saved.contains(key))
      fail("--resume: {} holds records made without the setting '{}' (a flag left off then, or a specpress that did not "
           "record it), but this run has {} = {}; resume with the original flags, or give another --checkpoint", path,
           key, key, value.dump());
    fail("--resume: {} holds records made with {} = {}, but this run has {} = {}; resume with the original flags, or "
         "give another --checkpoint",
         path, key, old.dump(), key, value.dump());
  }
  if (all)
    for (const auto& [key, value] : saved.items())
      if (!now.contains(key))
        fail("--resume: {} holds records made with setting '{}' = {}, which this run does not have (a flag left at its "
             "default now, or a setting of a newer specpress); resume with the original flags, or give another "
             "--checkpoint", path, key, value.dump());
}

}  // namespace

void JsonlCheckpoint::check_early(const std::string& path, const CheckpointFormat& format, bool resume,
                                  const Json& settings) {
  check_path(path, format, resume);
  std::error_code ec;
  if (std::filesystem::exists(path, ec)) (void)take_lock(path, format);  // in use: said before the models load
  if (resume && !holds_no_records(path, format))
    compare_settings(read_header(io::read_text_file(path), path, format), settings, path, format, /*all=*/false);
}

JsonlCheckpoint::JsonlCheckpoint(std::string path, CheckpointFormat format, Json settings, bool resume)
    : path_(std::move(path)), format_(std::move(format)) {
  check_path(path_, format_, resume);
  const std::string header_line =
      Json{{"format", format_.format}, {"version", format_.version}, {"made_by", build_line()}, {"settings", settings}}
          .dump() +
      "\n";
  std::error_code ec;
  if (!std::filesystem::exists(path_, ec)) {  // the settings line now, so that an unwritable path fails before any work
    int fd = -1;
    try {
      fd = io::create_file_locked(path_, header_line);  // never over a file another run made meanwhile
    } catch (const Error& e) {
      fail("--checkpoint: {}", e.what());
    }
    if (fd >= 0) {
      lock_ = io::PathLock::adopt(fd);
      return;
    }
    // another run made it since: taken as an existing file, whose lock says whether that run still holds it
  }
  lock_ = take_lock(path_, format_);  // before reading, so that no other run appends meanwhile
  if (holds_no_records(path_, format_)) {  // (checked again under the lock) rewritten in place, the lock kept
    const int fd = ::open(path_.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
    const bool written = fd >= 0 && ::write(fd, header_line.data(), header_line.size()) ==
                                        static_cast<ssize_t>(header_line.size()) && ::fsync(fd) == 0;
    const int error = errno;
    if (fd >= 0) ::close(fd);
    if (!written) fail("--checkpoint: {}: cannot rewrite it: {}", path_, std::strerror(error));
    std::fprintf(stderr, "--checkpoint: %s holds no record yet (a run that stopped before its first sample): begun "
                 "again with this run's settings\n", path_.c_str());
    return;
  }
  if (!resume) check_path(path_, format_, resume);  // records appended since the first check: refused as such
  const std::string text = io::read_text_file(path_);
  const nlohmann::json header = read_header(text, path_, format_);
  compare_settings(header, settings, path_, format_, /*all=*/true);
  // another build may compute or time differently; said, not refused
  const auto made = header.find("made_by");
  const std::string made_by = made != header.end() && made->is_string() ? made->get<std::string>() : "an unnamed build";
  if (made_by != build_line())
    std::fprintf(stderr, "--resume: %s was begun by %s; this is %s (%s)\n", path_.c_str(), made_by.c_str(),
                 build_line().c_str(), format_.other_build_note.c_str());
  size_t at = text.find('\n') + 1, line_number = 1;
  size_t good = at;  // bytes up to the end of the last whole line
  while (at < text.size()) {
    const size_t newline = text.find('\n', at);
    ++line_number;
    if (newline == std::string::npos) {  // a line the run was writing when it stopped
      std::fprintf(stderr, "--resume: %s: dropping its torn last line (%zu bytes, written when the run stopped)\n",
                   path_.c_str(), text.size() - at);
      io::truncate_file(path_, good);
      break;
    }
    const std::string line = text.substr(at, newline - at);
    at = good = newline + 1;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;  // a blank line (an editor's)
    const std::string where = fmt::format("{}: line {}", path_, line_number);
    nlohmann::json j = nlohmann::json::parse(depth_checked(line, where), nullptr, false);
    if (j.is_discarded()) fail("{}: invalid JSON (a line holds one record)", where);
    if (!j.is_object()) fail("{}: expected a JSON object, found {}", where, j.dump());
    lines_.push_back({where, std::move(j)});
  }
}

void JsonlCheckpoint::append(const Json& record) {
  io::append_line_synced(path_, record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

}  // namespace specpress::tools
