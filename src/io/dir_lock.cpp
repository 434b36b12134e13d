// dir_lock.cpp — see dir_lock.h.
#include "io/dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/error.h"

namespace specpress::io {

DirLock DirLock::take(const std::string& dir, const std::string& flag) {
  DirLock lock;
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) fail("{}: cannot open {} to lock it: {}", flag, dir, std::strerror(errno));
  int rc;
  while ((rc = ::flock(fd, LOCK_EX | LOCK_NB)) != 0 && errno == EINTR) {
  }
  if (rc == 0) {
    lock.fd_ = fd;
    return lock;
  }
  const int error = errno;
  ::close(fd);
  if (error == EWOULDBLOCK)  // (EAGAIN on Linux)
    fail("{}: {} is in use by another specpress run (it holds the directory's lock); wait for it to end or choose "
         "another {}",
         flag, dir, flag);
  std::fprintf(stderr, "warning: %s: cannot lock %s (%s); make sure no other run writes it\n", flag.c_str(),
               dir.c_str(), std::strerror(error));
  return lock;
}

DirLock& DirLock::operator=(DirLock&& other) noexcept {
  if (this != &other) {
    release();
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

DirLock::~DirLock() { release(); }

void DirLock::release() {
  if (fd_ >= 0) ::close(fd_);  // closing the descriptor drops the lock
  fd_ = -1;
}

}  // namespace specpress::io
