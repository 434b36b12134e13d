// mapped_file.cpp — mmap wrapper and small whole-file helpers (see mapped_file.h).
#include "io/mapped_file.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"

namespace specpress::io {

std::shared_ptr<MappedFile> MappedFile::open(const std::string& path) {
  // O_NONBLOCK: a named pipe in a weights file's place would block the open until a writer came (a hang); opened at
  // once, it is refused below as not a regular file. (It changes nothing for the regular file that is mapped.)
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) fail("{}: cannot open ({})", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    fail("{}: cannot stat ({})", path, std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    const char* kind = S_ISDIR(st.st_mode)    ? "a directory"
                       : S_ISFIFO(st.st_mode) ? "a named pipe"
                       : S_ISSOCK(st.st_mode) ? "a socket"
                                              : "a device";
    fail("{}: not a regular file ({}; expected a safetensors file)", path, kind);
  }
  std::shared_ptr<MappedFile> file(new MappedFile());
  file->path_ = path;
  file->size_ = static_cast<size_t>(st.st_size);
  if (file->size_ > 0) {
    void* p = ::mmap(nullptr, file->size_, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      fail("{}: mmap of {} bytes failed ({})", path, file->size_, std::strerror(err));
    }
    file->data_ = static_cast<uint8_t*>(p);
  }
  ::close(fd);
  return file;
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(data_, size_);
}

std::string read_text_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) fail("{}: is a directory (expected a file)", path);
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open ({})", path, std::strerror(errno));
  // in pieces; what is not a regular file (a pipe, a device such as /dev/zero) up to a bound, so that an endless
  // one is refused instead of filling memory
  const bool regular = ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
  const size_t kMaxBytes = regular ? SIZE_MAX : size_t{256} << 20;
  std::string text;
  char piece[1 << 16];
  while (in.read(piece, sizeof piece) || in.gcount() > 0) {
    text.append(piece, static_cast<size_t>(in.gcount()));
    if (text.size() > kMaxBytes)
      fail("{}: more than {} MiB from a stream (expected a text file)", path, kMaxBytes >> 20);
  }
  if (in.bad()) fail("{}: read error", path);
  return text;
}

namespace {
// Writes all of `bytes` to `fd` (retrying short writes and EINTR); 0, or the errno of the failing write.
int write_all(int fd, std::string_view bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    done += static_cast<size_t>(n);
  }
  return 0;
}
}  // namespace

namespace {
// The temporary file a write_file_atomic is writing, for a terminating signal to remove before it ends the process:
// SIGINT, SIGTERM and SIGHUP whose action is the default when the write starts; a signal the program handles itself
// calls remove_temporary_file_in_flight where it ends the process (bench and the trainers finish the write after a
// first Ctrl-C, and a second one ends them through it). One write at a time is registered (another, concurrent one is
// not covered), and only a name shorter than the buffer.
// g_state: kFree, kNaming (its name being copied into g_writing), kNamed (the name whole), kRemoving (a handler has it:
// the process is ending, and the name is never changed again).
enum : int { kFree, kNaming, kNamed, kRemoving };
std::atomic<int> g_state{kFree};
char g_writing[4096];
static_assert(std::atomic<int>::is_always_lock_free, "read in signal handlers");
void remove_then_die(int sig) {
  remove_temporary_file_in_flight();
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}
class TemporaryFileGuard {
 public:
  explicit TemporaryFileGuard(const std::string& tmp) {
    int free = kFree;
    if (tmp.size() >= sizeof g_writing || !g_state.compare_exchange_strong(free, kNaming)) return;
    std::memcpy(g_writing, tmp.c_str(), tmp.size() + 1);
    g_state = kNamed;
    owner_ = true;
    for (size_t i = 0; i < std::size(kSignals); ++i) {
      struct sigaction old {};
      if (::sigaction(kSignals[i], nullptr, &old) != 0 || old.sa_handler != SIG_DFL) continue;
      struct sigaction act {};
      act.sa_handler = remove_then_die;
      sigemptyset(&act.sa_mask);
      installed_[i] = ::sigaction(kSignals[i], &act, nullptr) == 0;
    }
  }
  ~TemporaryFileGuard() {
    if (!owner_) return;
    for (size_t i = 0; i < std::size(kSignals); ++i) {
      struct sigaction now {};  // restored only where ours is still there (not where another was put since)
      if (installed_[i] && ::sigaction(kSignals[i], nullptr, &now) == 0 && now.sa_handler == remove_then_die)
        ::signal(kSignals[i], SIG_DFL);
    }
    int named = kNamed;  // (left as it is where a handler is removing the file: the process is ending)
    g_state.compare_exchange_strong(named, kFree);
  }
  TemporaryFileGuard(const TemporaryFileGuard&) = delete;
  TemporaryFileGuard& operator=(const TemporaryFileGuard&) = delete;

 private:
  static constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP};
  bool owner_ = false;
  bool installed_[std::size(kSignals)] = {};
};
}  // namespace

void remove_temporary_file_in_flight() {
  int named = kNamed;
  if (g_state.compare_exchange_strong(named, kRemoving)) ::unlink(g_writing);
}

std::string temporary_path(const std::string& target, const std::string& suffix) {
  namespace fs = std::filesystem;
  constexpr size_t kNameMax = 255;  // NAME_MAX of Linux file systems
  const fs::path p = target;
  std::string name = p.filename().string();
  if (name.size() + suffix.size() > kNameMax) {
    size_t cut = kNameMax > suffix.size() ? kNameMax - suffix.size() : 0;
    // not inside a UTF-8 character (messages print the name): the first byte dropped starts one
    while (cut > 0 && (static_cast<unsigned char>(name[cut]) & 0xC0) == 0x80) --cut;
    name.resize(cut);
  }
  return (p.parent_path() / (name + suffix)).string();
}

void write_file_atomic(const std::string& path, const std::string& bytes) {
  write_file_atomic(path, std::vector<std::string_view>{bytes});
}

namespace {
// `path` with its symbolic links followed one step at a time, so that the file a link names is written and the link
// kept, a dangling link's file included. Errors name `path`.
std::filesystem::path link_target(const std::string& path) {
  namespace fs = std::filesystem;
  fs::path target = path;
  struct stat st {};
  for (int hops = 0; ::lstat(target.c_str(), &st) == 0 && S_ISLNK(st.st_mode); ++hops) {
    std::error_code ec;
    const fs::path next = fs::read_symlink(target, ec);
    if (ec || hops == 40) fail("{}: cannot write: resolving the symbolic link failed ({})", path,
                               ec ? ec.message() : "too many levels of links");
    target = (next.is_absolute() ? next : target.parent_path() / next).lexically_normal();
  }
  return target;
}
}  // namespace

void write_file_atomic(const std::string& path, const std::vector<std::string_view>& pieces) {
  // Every failure names `path` (the file the caller asked for) first, then the temporary file and the system's reason.
  // An existing path must be a regular file (the rename would replace a device, a FIFO or a directory's entry).
  const std::filesystem::path target = link_target(path);
  struct stat st {};
  const bool exists = ::stat(target.c_str(), &st) == 0;
  if (exists && !S_ISREG(st.st_mode))
    fail("{}: cannot write: it exists and is not a regular file ({}); give the path of a file", path,
         S_ISDIR(st.st_mode) ? "a directory" : "a device, FIFO or socket");
  const std::string tmp = temporary_path(target.string(), ".tmp." + std::to_string(::getpid()));
  const TemporaryFileGuard guard(tmp);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("{}: cannot write: creating the temporary file {} failed ({})", path, tmp, std::strerror(errno));
  if (exists) (void)::fchmod(fd, st.st_mode & 0777);  // a file replaced keeps its permissions (not set-id bits)
  for (const std::string_view bytes : pieces)
    if (const int err = write_all(fd, bytes); err != 0) {
      ::close(fd);
      ::unlink(tmp.c_str());
      fail("{}: cannot write: writing {} failed ({})", path, tmp, std::strerror(err));
    }
  const bool synced = ::fsync(fd) == 0;
  int err = synced ? 0 : errno;
  if (::close(fd) != 0 && synced) err = errno;
  if (err != 0) {
    ::unlink(tmp.c_str());
    fail("{}: cannot write: fsync/close of {} failed ({})", path, tmp, std::strerror(err));
  }
  if (::rename(tmp.c_str(), target.c_str()) != 0) {
    err = errno;
    ::unlink(tmp.c_str());
    fail("{}: cannot write: renaming {} onto it failed ({})", path, tmp, std::strerror(err));
  }
}

int create_file_locked(const std::string& path, std::string_view bytes) {
  const std::filesystem::path target = link_target(path);
  const std::string tmp = temporary_path(target.string(), ".new." + std::to_string(::getpid()));
  const TemporaryFileGuard guard(tmp);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("{}: cannot write: creating the temporary file {} failed ({})", path, tmp, std::strerror(errno));
  int err = write_all(fd, bytes);
  if (err == 0 && ::fsync(fd) != 0) err = errno;
  if (err != 0) {
    ::close(fd);
    ::unlink(tmp.c_str());
    fail("{}: cannot write: writing {} failed ({})", path, tmp, std::strerror(err));
  }
  (void)::flock(fd, LOCK_EX | LOCK_NB);  // its own new file: nobody else can hold it (where the file system locks)
  // into place without replacing anything: the link fails where the file has appeared meanwhile
  if (::link(tmp.c_str(), target.c_str()) == 0) {
    ::unlink(tmp.c_str());
    return fd;
  }
  err = errno;
  if (err == EEXIST) {
    ::close(fd);
    ::unlink(tmp.c_str());
    return -1;
  }
  if (::rename(tmp.c_str(), target.c_str()) == 0) return fd;  // a file system without hard links
  err = errno;
  ::close(fd);
  ::unlink(tmp.c_str());
  fail("{}: cannot write: renaming {} onto it failed ({})", path, tmp, std::strerror(err));
}

void append_line_synced(const std::string& path, const std::string& line) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  if (fd < 0) fail("{}: cannot append: {}", path, std::strerror(errno));
  if (const int err = write_all(fd, line + "\n"); err != 0) {
    ::close(fd);
    fail("{}: cannot append: {}", path, std::strerror(err));
  }
  const bool synced = ::fsync(fd) == 0;
  int err = synced ? 0 : errno;
  if (::close(fd) != 0 && synced) err = errno;
  if (err != 0) fail("{}: cannot append: fsync/close failed ({})", path, std::strerror(err));
}

void truncate_file(const std::string& path, uint64_t size) {
  if (::truncate(path.c_str(), static_cast<off_t>(size)) != 0)
    fail("{}: cannot cut it to {} bytes: {}", path, size, std::strerror(errno));
}

}  // namespace specpress::io
