// output_paths.cpp — see output_paths.h.
#include "io/output_paths.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>

#include "core/error.h"
#include "io/mapped_file.h"

namespace specpress::io {
namespace fs = std::filesystem;

namespace {
// Absolute and normal, symbolic links resolved where they exist; and the same without resolving them.
fs::path resolved(const std::string& p) {
  std::error_code ec;
  fs::path a = fs::absolute(p, ec);
  fs::path c = fs::weakly_canonical(a, ec);
  return ec ? a.lexically_normal() : c;
}
fs::path lexical(const std::string& p) {
  std::error_code ec;
  return fs::absolute(p, ec).lexically_normal();
}
bool component_prefix(const fs::path& inner, const fs::path& outer) {
  auto ai = inner.begin();
  for (auto bi = outer.begin(); bi != outer.end(); ++bi) {
    if (bi->empty()) continue;  // a trailing separator
    if (ai == inner.end() || *ai != *bi) return false;
    ++ai;
  }
  return true;
}
// The files an input names: itself, and where it is a directory the entries under it (a model's shards may be
// symbolic links elsewhere, as in a Hugging Face cache), at most kMaxEntries of them.
constexpr int kMaxEntries = 4096;
std::vector<fs::path> files_of(const std::string& in) {
  std::vector<fs::path> files{fs::path(in)};
  std::error_code ec;
  if (!fs::is_directory(in, ec)) return files;
  fs::recursive_directory_iterator it(in, fs::directory_options::skip_permission_denied, ec), end;
  for (; !ec && it != end && static_cast<int>(files.size()) <= kMaxEntries; it.increment(ec)) files.push_back(it->path());
  return files;
}
// Whether writing `out` would write over `input` or one of its files: the same path, or an existing file that is one
// of them (through a symbolic or hard link included). A new file inside an input directory (a report next to the
// model) writes over nothing.
bool writes_input(const std::string& out, const std::string& input) {
  if (lexical(out) == lexical(input) || resolved(out) == resolved(input)) return true;
  std::error_code ec;
  if (!fs::exists(out, ec)) return false;
  for (const fs::path& f : files_of(input))
    if (fs::equivalent(out, f, ec)) return true;
  return false;
}
}  // namespace

bool path_within(const std::string& inner, const std::string& outer) {
  return component_prefix(lexical(inner), lexical(outer)) || component_prefix(resolved(inner), resolved(outer));
}

bool reaches_into(const std::string& input, const std::string& dir) {
  if (path_within(input, dir)) return true;
  const fs::path d = resolved(dir);
  for (const fs::path& f : files_of(input))
    if (component_prefix(resolved(f.string()), d)) return true;
  return false;
}

void check_output_files(const std::vector<NamedPath>& outputs, const std::vector<NamedPath>& inputs) {
  for (size_t i = 0; i < outputs.size(); ++i) {
    const NamedPath& out = outputs[i];
    if (out.path.empty()) continue;
    for (const NamedPath& in : inputs)
      if (!in.path.empty() && writes_input(out.path, in.path))
        fail("{}: {} would write over {} {} (it is that input or one of its files, or links to one); choose another "
             "file",
             out.flag, out.path, in.flag, in.path);
    std::error_code ec;
    const fs::path target = resolved(out.path);
    for (size_t j = 0; j < i; ++j)
      if (!outputs[j].path.empty() &&
          (resolved(outputs[j].path) == target || fs::equivalent(outputs[j].path, out.path, ec)))
        fail("{} and {}: both name {}; give each output its own file", outputs[j].flag, out.flag, out.path);
    const fs::file_status st = fs::status(target, ec);
    if (fs::is_directory(st)) fail("{}: {} is a directory (expected a file to write)", out.flag, out.path);
    if (fs::exists(st) && !fs::is_regular_file(st))
      fail("{}: {} exists and is not a regular file (expected a file to write)", out.flag, out.path);
    if (const size_t n = target.filename().string().size(); n > 255)  // NAME_MAX, which the probe's cut name hides
      fail("{}: {}: its name has {} bytes, more than a file name may have (255)", out.flag, out.path, n);
    const fs::path dir = target.parent_path();
    if (!fs::is_directory(dir, ec)) fail("{}: the directory of {} does not exist ({})", out.flag, out.path, dir.string());
    if (::access(dir.c_str(), W_OK) != 0)
      fail("{}: cannot write into {} ({}), the directory of {}", out.flag, dir.string(), std::strerror(errno), out.path);
    // a file created and removed beside the output, as its atomic write will create its temporary one
    probe_new_file(temporary_path(target.string(), ".tmp.probe." + std::to_string(::getpid())), out.flag, out.path);
  }
}

void probe_new_file(const std::string& probe, const std::string& flag, const std::string& output) {
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0)
    fail("{}: cannot create a file in {} ({}){}", flag, std::filesystem::path(probe).parent_path().string(),
         std::strerror(errno), output.empty() ? "" : ", the directory of " + output);
  ::close(fd);
  ::unlink(probe.c_str());
}

}  // namespace specpress::io
