// remove_tree.cpp — see remove_tree.h. nftw walks the tree depth first (each directory after its entries) without
// following symbolic links; each entry goes with remove(3) (unlink or rmdir).
#include "io/remove_tree.h"

#include <ftw.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/error.h"

namespace specpress::io {
namespace {

// nftw's callback takes no user pointer: the walk's state, one walk a thread at a time.
struct Walk {
  std::uintmax_t removed = 0;
  std::string failed;  // the entry that could not be removed
  int error = 0;
};
thread_local Walk* walk = nullptr;

int remove_entry(const char* entry, const struct stat*, int, struct FTW*) {
  if (std::remove(entry) != 0) {
    walk->error = errno;
    walk->failed = entry;
    return 1;  // stops the walk
  }
  ++walk->removed;
  return 0;
}

}  // namespace

std::uintmax_t remove_tree(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return 0;
    fail("cannot remove {}: {}", path, std::strerror(errno));
  }
  Walk state;
  Walk* outer = walk;
  walk = &state;
  const int rc = ::nftw(path.c_str(), remove_entry, 16, FTW_DEPTH | FTW_PHYS);
  const int walk_errno = errno;
  walk = outer;
  if (!state.failed.empty()) fail("cannot remove {}: {}", state.failed, std::strerror(state.error));
  if (rc != 0) fail("cannot remove {}: {}", path, std::strerror(walk_errno));
  return state.removed;
}

}  // namespace specpress::io
