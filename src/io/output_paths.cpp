// output_paths.cpp — see output_paths.h.
#include "io/output_paths.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace specpress::io {
namespace fs = std::filesystem;

namespace {
fs::path normal(const std::string& p) {
  std::error_code ec;
  fs::path a = fs::absolute(p, ec);
  fs::path c = fs::weakly_canonical(a, ec);
  return ec ? a.lexically_normal() : c;
}
}  // namespace

bool path_within(const std::string& inner, const std::string& outer) {
  const fs::path a = normal(inner), b = normal(outer);
  auto ai = a.begin();
  for (auto bi = b.begin(); bi != b.end(); ++bi) {
    if (bi->empty()) continue;  // a trailing separator
    if (ai == a.end() || *ai != *bi) return false;
    ++ai;
  }
  return true;
}

void check_output_files(const std::vector<NamedPath>& outputs, const std::vector<NamedPath>& inputs) {
  for (size_t i = 0; i < outputs.size(); ++i) {
    const NamedPath& out = outputs[i];
    if (out.path.empty()) continue;
    for (const NamedPath& in : inputs)
      if (!in.path.empty() && path_within(out.path, in.path))
        fail("{}: {} is or lies inside {} {}, an input of this run; choose another file", out.flag, out.path, in.flag,
             in.path);
    std::error_code ec;
    const fs::path target = normal(out.path);
    for (size_t j = 0; j < i; ++j)
      if (!outputs[j].path.empty() && normal(outputs[j].path) == target)
        fail("{} and {}: both name {}; give each output its own file", outputs[j].flag, out.flag, out.path);
    const fs::file_status st = fs::status(target, ec);
    if (fs::is_directory(st)) fail("{}: {} is a directory (expected a file to write)", out.flag, out.path);
    if (fs::exists(st) && !fs::is_regular_file(st))
      fail("{}: {} exists and is not a regular file (expected a file to write)", out.flag, out.path);
    const fs::path dir = target.parent_path();
    if (!fs::is_directory(dir, ec)) fail("{}: the directory of {} does not exist ({})", out.flag, out.path, dir.string());
    if (::access(dir.c_str(), W_OK) != 0)
      fail("{}: cannot write into {} ({}), the directory of {}", out.flag, dir.string(), std::strerror(errno), out.path);
  }
}

}  // namespace specpress::io
