// dir_lock.h — an advisory lock (flock) on a directory, held while the object lives, so that two specpress runs
// writing one output directory (a trainer's --out) refuse each other instead of interleaving their checkpoints, and a
// --force cannot delete the directory of a training that is still running. The kernel drops the lock when the process
// ends however it ends, so nothing stale is left behind; no file is written.
#pragma once
#include <string>

namespace specpress::io {

class DirLock {
 public:
  DirLock() = default;
  // Locks the existing directory `dir`. Fails naming `flag` and `dir` where another process holds its lock. Where the
  // file system refuses the lock (an NFS mount may, for a directory), says so on stderr and holds nothing.
  static DirLock take(const std::string& dir, const std::string& flag);
  ~DirLock();
  DirLock(DirLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  DirLock& operator=(DirLock&& other) noexcept;
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;

  bool held() const { return fd_ >= 0; }
  void release();

 private:
  int fd_ = -1;
};

}  // namespace specpress::io
