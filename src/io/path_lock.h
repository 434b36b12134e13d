// path_lock.h — an advisory lock (flock) on a file or directory, held while the object lives, so that two specpress
// runs writing one output refuse each other: a trainer's --out directory (its --force cannot delete a training that
// is still running), a bench or diagnose --checkpoint file. The kernel drops the lock when the process ends however it
// ends, so nothing stale is left behind; nothing is written.
#pragma once
#include <string>

namespace specpress::io {

class PathLock {
 public:
  PathLock() = default;
  // Locks the existing file or directory `path`. Fails with the message `in_use` where another process holds its
  // lock, and naming `flag` and `path` where it cannot be opened. Where the file system refuses the lock (an NFS mount
  // may), says so on stderr and holds nothing.
  static PathLock take(const std::string& path, const std::string& flag, const std::string& in_use);
  // Owns `fd`, a descriptor that already holds its file's lock (io::create_file_locked's).
  static PathLock adopt(int fd);
  ~PathLock();
  PathLock(PathLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  PathLock& operator=(PathLock&& other) noexcept;
  PathLock(const PathLock&) = delete;
  PathLock& operator=(const PathLock&) = delete;

  bool held() const { return fd_ >= 0; }
  void release();

 private:
  int fd_ = -1;
};

}  // namespace specpress::io
