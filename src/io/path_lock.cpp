// path_lock.cpp — see path_lock.h.
#include "io/path_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/error.h"

namespace specpress::io {

PathLock PathLock::take(const std::string& path, const std::string& flag, const std::string& in_use) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("{}: cannot open {} to lock it: {}", flag, path, std::strerror(errno));
  int rc;
  while ((rc = ::flock(fd, LOCK_EX | LOCK_NB)) != 0 && errno == EINTR) {
  }
  if (rc == 0) return adopt(fd);
  const int error = errno;
  ::close(fd);
  if (error == EWOULDBLOCK) fail("{}", in_use);  // (EAGAIN on Linux)
  std::fprintf(stderr, "warning: %s: cannot lock %s (%s); make sure no other run writes it\n", flag.c_str(),
               path.c_str(), std::strerror(error));
  return {};
}

PathLock PathLock::adopt(int fd) {
  PathLock lock;
  lock.fd_ = fd;
  return lock;
}

PathLock& PathLock::operator=(PathLock&& other) noexcept {
  if (this != &other) {
    release();
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

PathLock::~PathLock() { release(); }

void PathLock::release() {
  if (fd_ >= 0) ::close(fd_);  // closing the descriptor drops the lock
  fd_ = -1;
}

}  // namespace specpress::io
