// mapped_file.h — a read-only view of a whole file through mmap (copy-on-write private mapping), so
// checkpoints are paged in lazily and never held twice in host memory.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace specpress::io {

class MappedFile {
 public:
  // Maps `path`; throws specpress::Error naming the path if it cannot be opened or mapped.
  static std::shared_ptr<MappedFile> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  uint8_t* mutable_data() { return data_; }  // private mapping: writes never reach the file
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

// Reads a whole (small) file into a string; throws specpress::Error naming the path on failure.
std::string read_text_file(const std::string& path);

// Writes `bytes` to `path` atomically: a temporary file in the same folder, fsync, then rename. On failure it removes
// the temporary file and throws specpress::Error naming `path` first, then the temporary file and the reason. An
// existing `path` must be a regular file (not a device, FIFO or directory), and keeps its permissions; a symbolic link
// is followed (the file it names is replaced, the link kept). A SIGINT, SIGTERM or SIGHUP left at its default action
// removes the temporary file before it ends the process.
void write_file_atomic(const std::string& path, const std::string& bytes);
// The same for the bytes of `pieces` one after another (a large file written from buffers that are already there,
// without a copy joining them).
void write_file_atomic(const std::string& path, const std::vector<std::string_view>& pieces);
// Removes the temporary file that a write_file_atomic or create_file_locked of this process is writing, if any (one
// write at a time is registered): for a handler of a signal that ends the process (tools::StopSignals' second signal).
// Async-signal-safe; once it has removed one, no later write is registered (the process is ending).
void remove_temporary_file_in_flight();
// `target` + `suffix` (".tmp.PID", say) beside it, its name cut so that the whole stays within the file system's
// 255-byte name limit: a temporary file for any output name that can itself exist.
std::string temporary_path(const std::string& target, const std::string& suffix);

// Creates the new file `path` holding `bytes` (synced; its symbolic links followed as write_file_atomic follows them),
// locked (flock) from before it appears and without ever replacing a file: returns the descriptor that holds the lock
// (closing it releases it), or -1 where `path` exists by then (another process made it meanwhile). Errors name `path`.
int create_file_locked(const std::string& path, std::string_view bytes);

// Appends `line` and a newline to the existing file `path` and fsyncs it, so that the line is on disk when this
// returns. A crash while writing leaves at most a torn last line (no newline), which the file's reader drops and cuts
// off with `truncate_file` before appending again. Errors name `path` and the reason.
void append_line_synced(const std::string& path, const std::string& line);
void truncate_file(const std::string& path, uint64_t size);

}  // namespace specpress::io
