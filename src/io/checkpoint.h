// checkpoint.h — an HF model directory's tensors: `model.safetensors` or shards listed in
// `model.safetensors.index.json`, memory-mapped. Model loaders `take` each tensor they need (with its
// expected shape, converted to the compute dtype and device) and finally call `check_all_taken`, so a
// missing, misshapen or unused tensor is always an error naming it.
#pragma once
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "io/mapped_file.h"
#include "io/safetensors.h"

namespace specpress::io {

class TensorStore {
 public:
  // Opens `dir` (an HF model directory). Throws naming the file for any format problem.
  static TensorStore open_dir(const std::string& dir);
  // Opens one .safetensors file.
  static TensorStore open_file(const std::string& path);

  bool has(const std::string& name) const { return entries_.count(name) != 0; }
  std::vector<int64_t> shape(const std::string& name) const;
  // Returns tensor `name` with `expected_shape`, as `dtype` on `device`, and marks it taken.
  at::Tensor take(const std::string& name, const std::vector<int64_t>& expected_shape, at::ScalarType dtype,
                  at::Device device);
  // Throws naming every tensor in the files that no `take` consumed.
  void check_all_taken() const;
  const std::string& source() const { return source_; }
  std::vector<std::string> names() const;

 private:
  struct Entry {
    std::shared_ptr<MappedFile> file;
    TensorInfo info;
    uint64_t data_start;
  };
  std::string source_;
  std::map<std::string, Entry> entries_;
  std::set<std::string> taken_;
  void add_file(const std::string& path, const std::set<std::string>* expected_names);
};

// Maps a safetensors dtype to the ATen scalar type; throws for dtypes the engine does not compute in.
at::ScalarType to_scalar_type(DType dtype, const std::string& source);
DType from_scalar_type(at::ScalarType type);

// Writes named CPU tensors to a safetensors file atomically (contiguous copies are made as needed).
void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

}  // namespace specpress::io
