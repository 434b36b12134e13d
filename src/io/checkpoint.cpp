// checkpoint.cpp — HF directory tensor store over memory-mapped safetensors (see checkpoint.h).
#include "io/checkpoint.h"

#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_depth.h"

namespace specpress::io {
namespace fs = std::filesystem;

at::ScalarType to_scalar_type(DType dtype, const std::string& source) {
  switch (dtype) {
    case DType::F32: return at::kFloat;
    case DType::F16: return at::kHalf;
    case DType::BF16: return at::kBFloat16;
    case DType::F64: return at::kDouble;
    case DType::I64: return at::kLong;
    case DType::I32: return at::kInt;
    case DType::I16: return at::kShort;
    case DType::I8: return at::kChar;
    case DType::U8: return at::kByte;
    case DType::BOOL: return at::kBool;
    default: fail("{}: dtype {} is not supported for loading (expected F32, BF16 or F16 weights)", source, dtype_name(dtype));
  }
}

DType from_scalar_type(at::ScalarType type) {
  switch (type) {
    case at::kFloat: return DType::F32;
    case at::kHalf: return DType::F16;
    case at::kBFloat16: return DType::BF16;
    case at::kDouble: return DType::F64;
    case at::kLong: return DType::I64;
    case at::kInt: return DType::I32;
    case at::kShort: return DType::I16;
    case at::kChar: return DType::I8;
    case at::kByte: return DType::U8;
    case at::kBool: return DType::BOOL;
    default: fail("save_safetensors: unsupported tensor dtype {}", c10::toString(type));
  }
}

TensorStore TensorStore::open_file(const std::string& path) {
  TensorStore store;
  store.source_ = path;
  store.add_file(path, nullptr);
  return store;
}

TensorStore TensorStore::open_dir(const std::string& dir) {
  if (!fs::is_directory(dir)) fail("{}: not a directory (expected an HF model directory)", dir);
  TensorStore store;
  store.source_ = dir;
  const fs::path single = fs::path(dir) / "model.safetensors";
  const fs::path index = fs::path(dir) / "model.safetensors.index.json";
  if (fs::exists(index)) {
    const std::string source = index.string();
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(depth_checked(read_text_file(source), source));
    } catch (const nlohmann::json::exception& e) {
      fail("{}: invalid JSON: {}", source, e.what());
    }
    if (!j.contains("weight_map") || !j["weight_map"].is_object())
      fail("{}: missing object field 'weight_map'", source);
    std::map<std::string, std::set<std::string>> by_shard;
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      if (!it.value().is_string()) fail("{}: weight_map['{}'] must be a file name", source, it.key());
      const std::string shard = it.value().get<std::string>();
      // a shard is a file of the model directory: no path, no parent (an index could otherwise open any file)
      if (shard.empty() || shard == "." || shard == ".." || shard.find('/') != std::string::npos ||
          shard.find('\\') != std::string::npos)
        fail("{}: weight_map['{}'] is '{}', expected a file name in the model directory", source, it.key(), shard);
      by_shard[shard].insert(it.key());
    }
    for (const auto& [shard, names] : by_shard) {
      const fs::path shard_path = fs::path(dir) / shard;
      if (!fs::exists(shard_path))
        fail("{}: names shard '{}' (for tensor '{}'), which does not exist in {}{}", source, shard, *names.begin(), dir,
             fs::is_symlink(shard_path) ? " (a link to a file that does not exist: an unfinished download?)" : "");
      store.add_file(shard_path.string(), &names);
    }
  } else if (fs::exists(single)) {
    store.add_file(single.string(), nullptr);
  } else if (fs::is_symlink(single)) {  // exists() follows the link: an HF cache's link to a blob not downloaded
    fail("{}: is a link to {}, which does not exist (an unfinished download?)", single.string(),
         fs::read_symlink(single).string());
  } else {
    fail("{}: no model.safetensors or model.safetensors.index.json", dir);
  }
  return store;
}

void TensorStore::add_file(const std::string& path, const std::set<std::string>* expected_names) {
  auto file = MappedFile::open(path);
  SafetensorsHeader header = parse_safetensors(file->data(), file->size(), path);
  for (auto& info : header.tensors) {
    if (expected_names != nullptr && expected_names->count(info.name) == 0)
      fail("{}: holds tensor '{}', which the index does not assign to this shard", path, info.name);
    if (entries_.count(info.name) != 0)
      fail("{}: tensor '{}' also appears in {}", path, info.name, entries_[info.name].file->path());
    std::string name = info.name;
    entries_[name] = Entry{file, std::move(info), header.data_start};
  }
  if (expected_names != nullptr)
    for (const auto& name : *expected_names)
      if (entries_.count(name) == 0)
        fail("{}: the index assigns tensor '{}' to this shard, but the file does not hold it", path, name);
}

std::vector<int64_t> TensorStore::shape(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) fail("{}: missing tensor '{}'", source_, name);
  return it->second.info.shape;
}

std::vector<std::string> TensorStore::names() const {
  std::vector<std::string> out;
  for (const auto& [name, _] : entries_) out.push_back(name);
  return out;
}

at::Tensor TensorStore::take(const std::string& name, const std::vector<int64_t>& expected_shape,
                             at::ScalarType dtype, at::Device device) {
  auto it = entries_.find(name);
  if (it == entries_.end()) fail("{}: missing tensor '{}' (expected shape [{}])", source_, name, fmt::join(expected_shape, ", "));
  const Entry& e = it->second;
  const std::string& file = e.file->path();  // the shard that holds it, named in its errors
  if (e.info.shape != expected_shape)
    fail("{}: tensor '{}' has shape [{}], expected [{}]", file, name, fmt::join(e.info.shape, ", "),
         fmt::join(expected_shape, ", "));
  const at::ScalarType file_type = to_scalar_type(e.info.dtype, fmt::format("{}: tensor '{}'", file, name));
  if (at::isFloatingType(dtype) && !(file_type == at::kFloat || file_type == at::kBFloat16 || file_type == at::kHalf))
    fail("{}: tensor '{}' has dtype {}, expected F32, BF16 or F16 weights", file, name, dtype_name(e.info.dtype));
  uint8_t* ptr = e.file->mutable_data() + e.data_start + e.info.begin;
  std::shared_ptr<MappedFile> keep = e.file;
  at::Tensor view = at::from_blob(
      ptr, e.info.shape, [keep](void*) {}, at::TensorOptions().dtype(file_type));
  // The view aliases the private mapping; copy into engine-owned memory of the compute dtype/device, so
  // the mapping can be dropped after loading and no tensor depends on page alignment of the file.
  at::Tensor out = at::empty(e.info.shape, at::TensorOptions().dtype(dtype).device(device));
  out.copy_(view);
  taken_.insert(name);
  return out;
}

void TensorStore::check_all_taken() const {
  std::vector<std::string> unused;
  for (const auto& [name, _] : entries_)
    if (taken_.count(name) == 0) unused.push_back(name);
  if (!unused.empty())
    fail("{}: {} unexpected tensor(s) not used by the architecture: {}", source_, unused.size(), fmt::join(unused, ", "));
}

void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::vector<at::Tensor> keep;
  std::vector<TensorBytes> items;
  for (const auto& [name, t] : tensors) {
    at::Tensor c = t.detach().to(at::kCPU).contiguous();
    keep.push_back(c);
    items.push_back(TensorBytes{name, from_scalar_type(c.scalar_type()), c.sizes().vec(), c.data_ptr(),
                                static_cast<size_t>(c.numel()) * c.element_size()});
  }
  // the header, then each tensor's bytes from its own buffer: no second copy of the whole file in memory
  const std::string header = safetensors_header(items, metadata);
  std::vector<std::string_view> pieces = {header};
  for (const TensorBytes& t : items) pieces.emplace_back(static_cast<const char*>(t.data), t.nbytes);
  write_file_atomic(path, pieces);
}

}  // namespace specpress::io
