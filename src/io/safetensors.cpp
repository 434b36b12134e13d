// safetensors.cpp — header parsing with full validation, and serialisation (see safetensors.h).
#include "io/safetensors.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>
#include <set>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_depth.h"

namespace specpress::io {
namespace {

struct DTypeEntry {
  DType dtype;
  const char* name;
  size_t size;
};
constexpr DTypeEntry kDTypes[] = {
    {DType::BOOL, "BOOL", 1}, {DType::U8, "U8", 1},     {DType::I8, "I8", 1},
    {DType::I16, "I16", 2},   {DType::U16, "U16", 2},   {DType::F16, "F16", 2},
    {DType::BF16, "BF16", 2}, {DType::I32, "I32", 4},   {DType::U32, "U32", 4},
    {DType::F32, "F32", 4},   {DType::F64, "F64", 8},   {DType::I64, "I64", 8},
    {DType::U64, "U64", 8},   {DType::F8_E4M3, "F8_E4M3", 1}, {DType::F8_E5M2, "F8_E5M2", 1},
};

const DTypeEntry& entry(DType dtype) {
  for (const auto& e : kDTypes)
    if (e.dtype == dtype) return e;
  fail("internal: unknown dtype enum {}", static_cast<int>(dtype));
}

std::string shape_str(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

}  // namespace

DType parse_dtype(const std::string& name, const std::string& source) {
  for (const auto& e : kDTypes)
    if (name == e.name) return e.dtype;
  std::vector<std::string> names;
  for (const auto& e : kDTypes) names.emplace_back(e.name);
  fail("{}: unknown dtype '{}' (expected one of {})", source, name, fmt::join(names, ", "));
}

const char* dtype_name(DType dtype) { return entry(dtype).name; }
size_t dtype_size(DType dtype) { return entry(dtype).size; }

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

SafetensorsHeader parse_safetensors(const uint8_t* data, size_t size, const std::string& source) {
  if (size < 8) fail("{}: truncated safetensors file: {} bytes, need at least 8 for the header length", source, size);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | data[i];
  if (header_len > size - 8)
    fail("{}: header length {} is larger than the file ({} bytes after the 8-byte length)", source, header_len,
         size - 8);
  if (header_len < 2) fail("{}: header length {} is too small for a JSON object", source, header_len);
  const char* header_text = reinterpret_cast<const char*>(data + 8);
  if (header_text[0] != '{') fail("{}: invalid JSON header: must start with '{{'", source);

  nlohmann::json header;
  // A name twice in the header is an error of its own: the parser would keep the last entry, and the first one's
  // bytes would then read as a hole or an overlap. So is a field twice in one tensor's entry ("dtype" twice: the parser
  // would keep the last, reading the bytes as another type), as the reference parser refuses both (a key twice in
  // __metadata__ it keeps, the last winning, as here). Top-level keys come at depth 1, an entry's object starts at
  // depth 1 and its fields come at depth 2.
  std::set<std::string> names, entry_fields;
  std::string entry;
  std::optional<std::string> duplicate;
  std::optional<std::pair<std::string, std::string>> duplicate_field;  // the entry, its field
  auto note_names = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using Event = nlohmann::json::parse_event_t;
    if (depth == 1 && event == Event::key) {
      entry = parsed.get<std::string>();
      if (!duplicate && !names.insert(entry).second) duplicate = entry;
    } else if (depth == 1 && event == Event::object_start) {
      entry_fields.clear();
    } else if (depth == 2 && event == Event::key && !duplicate_field && entry != "__metadata__" &&
               !entry_fields.insert(parsed.get<std::string>()).second) {
      duplicate_field = {entry, parsed.get<std::string>()};
    }
    return true;
  };
  try {
    check_json_depth(std::string_view(header_text, header_len), source + ": header");
    header = nlohmann::json::parse(header_text, header_text + header_len, note_names);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: invalid JSON header: {}", source, e.what());
  }
  if (duplicate) fail("{}: invalid JSON header: the name '{}' appears more than once", source, *duplicate);
  if (duplicate_field)
    fail("{}: invalid JSON header: the entry '{}' names its field '{}' more than once", source, duplicate_field->first,
         duplicate_field->second);
  if (!header.is_object()) fail("{}: invalid JSON header: expected an object", source);

  SafetensorsHeader out;
  out.data_start = 8 + header_len;
  const uint64_t data_size = size - out.data_start;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const auto& value = it.value();
    if (name == "__metadata__") {
      if (!value.is_object()) fail("{}: __metadata__ must be an object of strings", source);
      for (auto m = value.begin(); m != value.end(); ++m) {
        if (!m.value().is_string()) fail("{}: __metadata__['{}'] must be a string", source, m.key());
        out.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    if (!value.is_object()) fail("{}: tensor '{}': entry must be an object", source, name);
    if (!value.contains("dtype") || !value["dtype"].is_string())
      fail("{}: tensor '{}': missing string field 'dtype'", source, name);
    if (!value.contains("shape") || !value["shape"].is_array())
      fail("{}: tensor '{}': missing array field 'shape'", source, name);
    if (!value.contains("data_offsets") || !value["data_offsets"].is_array() || value["data_offsets"].size() != 2)
      fail("{}: tensor '{}': 'data_offsets' must be an array [begin, end]", source, name);

    TensorInfo info;
    info.name = name;
    info.dtype = parse_dtype(value["dtype"].get<std::string>(), fmt::format("{}: tensor '{}'", source, name));
    uint64_t numel = 1;
    for (const auto& d : value["shape"]) {
      if (!d.is_number_unsigned()) fail("{}: tensor '{}': shape entries must be non-negative integers", source, name);
      uint64_t dim = d.get<uint64_t>();
      if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
          (dim != 0 && numel > std::numeric_limits<uint64_t>::max() / 8 / dim))
        fail("{}: tensor '{}': shape {} overflows", source, name, value["shape"].dump());
      numel *= dim;
      info.shape.push_back(static_cast<int64_t>(dim));
    }
    for (const auto& o : value["data_offsets"])
      if (!o.is_number_unsigned()) fail("{}: tensor '{}': data_offsets must be non-negative integers", source, name);
    info.begin = value["data_offsets"][0].get<uint64_t>();
    info.end = value["data_offsets"][1].get<uint64_t>();
    if (info.end < info.begin)
      fail("{}: tensor '{}': data_offsets [{}, {}] end before begin", source, name, info.begin, info.end);
    const uint64_t expected_bytes = numel * dtype_size(info.dtype);
    if (info.end - info.begin != expected_bytes)
      fail("{}: tensor '{}': data_offsets [{}, {}] hold {} bytes, but {} {} needs {}", source, name, info.begin,
           info.end, info.end - info.begin, dtype_name(info.dtype), shape_str(info.shape), expected_bytes);
    if (info.end > data_size)
      fail("{}: tensor '{}': data_offsets [{}, {}] out of range: the data buffer has {} bytes (truncated file?)",
           source, name, info.begin, info.end, data_size);
    out.tensors.push_back(std::move(info));
  }

  std::sort(out.tensors.begin(), out.tensors.end(),
            [](const TensorInfo& a, const TensorInfo& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });
  uint64_t covered = 0;
  for (size_t i = 0; i < out.tensors.size(); ++i) {
    const auto& t = out.tensors[i];
    if (t.begin < covered)
      fail("{}: tensor '{}': data_offsets [{}, {}] overlap tensor '{}' (which ends at {})", source, t.name, t.begin,
           t.end, out.tensors[i - 1].name, covered);
    if (t.begin > covered)
      fail("{}: tensor '{}': data_offsets begin at {}, leaving a hole after byte {}", source, t.name, t.begin, covered);
    covered = t.end;
  }
  if (covered != data_size)
    fail("{}: the tensors cover {} bytes of data but the file holds {} bytes after the header", source, covered,
         data_size);
  return out;
}

std::string safetensors_header(const std::vector<TensorBytes>& tensors,
                               const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    uint64_t numel = 1;
    for (int64_t d : t.shape) numel *= static_cast<uint64_t>(d);
    if (numel * dtype_size(t.dtype) != t.nbytes)
      fail("serialize_safetensors: tensor '{}' has {} bytes, shape {} of {} needs {}", t.name, t.nbytes,
           shape_str(t.shape), dtype_name(t.dtype), numel * dtype_size(t.dtype));
    header[t.name] = {{"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.nbytes}}};
    offset += t.nbytes;
  }
  std::string text = header.dump();
  while ((8 + text.size()) % 8 != 0) text.push_back(' ');
  std::string out;
  out.reserve(8 + text.size());
  uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  out += text;
  return out;
}

std::string serialize_safetensors(const std::vector<TensorBytes>& tensors,
                                  const std::map<std::string, std::string>& metadata) {
  std::string out = safetensors_header(tensors, metadata);
  for (const auto& t : tensors) out.append(static_cast<const char*>(t.data), t.nbytes);
  return out;
}

}  // namespace specpress::io
