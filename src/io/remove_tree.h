// remove_tree.h — removes a file or a directory tree (symbolic links as links, never their targets), with POSIX
// calls rather than std::filesystem::remove_all: pip's LibTorch exports the std::filesystem of the libstdc++ it links
// statically (pytorch/pytorch#133437), and a binary that binds to that copy crashed in remove_all (a resumed
// training's checkpoint rotation; docs/VALIDATION.md). The link lines name libstdc++ first (the top CMakeLists.txt);
// this keeps our deletions off std::filesystem wherever a build binds them otherwise.
#pragma once
#include <cstdint>
#include <string>

namespace specpress::io {

// Removes `path` and, for a directory, everything under it. Returns the number of entries removed (0 where nothing
// is at `path`); throws an error naming the entry that could not be removed and why.
std::uintmax_t remove_tree(const std::string& path);

}  // namespace specpress::io
