// output_paths.h — checks on what a command will write, made before it runs: an output file must be writable where
// it is (an existing file or a new one in an existing directory, not a directory or a device), no two outputs may
// name one file, and no output may write over one of the run's inputs. So a long run does not lose its report at the
// end, and no run overwrites its own data or model. Errors name the flags.
#pragma once
#include <string>
#include <vector>

namespace specpress::io {

// A path and the flag that named it.
struct NamedPath {
  std::string flag, path;
};

// Whether `inner` is `outer` or lies under it, compared as written (absolute, normal) and with symbolic links
// resolved.
bool path_within(const std::string& inner, const std::string& outer);
// Whether `input` lies in `dir`, or, where it is a directory, any file under it resolves into `dir` (a model's shards
// linked from elsewhere).
bool reaches_into(const std::string& input, const std::string& dir);

// Fails naming the flag where an output file (empty paths are skipped) could not be written at the end of the run,
// where two outputs name the same file (also through links), or where writing it would write over one of `inputs`
// (files or directories): the input's own path, or an existing file that is one of its files (also through a symbolic
// or hard link; a new file inside an input directory is allowed).
void check_output_files(const std::vector<NamedPath>& outputs, const std::vector<NamedPath>& inputs);

// Creates and removes the file `probe` (a name beside the outputs that an interrupted run may leave behind), failing
// with "FLAG: cannot create a file in DIR (reason)[, the directory of OUTPUT]" where the file system refuses it: a
// directory's permissions, or a read-only mount, which access() lets root pass. `output` may be empty.
void probe_new_file(const std::string& probe, const std::string& flag, const std::string& output);

}  // namespace specpress::io
