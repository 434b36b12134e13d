// safetensors.h — torch-free parser and writer of the safetensors format (8-byte LE header length,
// JSON header, raw little-endian row-major data). The parser validates everything a hostile file can
// get wrong (lengths, offsets, overlaps, holes, dtypes, shapes) and names the file in each error; it is
// the piece that runs under the fuzz test with AddressSanitizer.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace specpress::io {

enum class DType { BOOL, U8, I8, I16, U16, F16, BF16, I32, U32, F32, F64, I64, U64, F8_E4M3, F8_E5M2 };

// "F32" -> DType::F32; throws specpress::Error naming `source` and the accepted names if unknown.
DType parse_dtype(const std::string& name, const std::string& source);
const char* dtype_name(DType dtype);
size_t dtype_size(DType dtype);

struct TensorInfo {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // offsets relative to the start of the data buffer; end exclusive
  uint64_t end = 0;
  int64_t numel() const;
};

struct SafetensorsHeader {
  uint64_t data_start = 0;             // 8 + header length: where the data buffer begins in the file
  std::vector<TensorInfo> tensors;     // in data-offset order
  std::map<std::string, std::string> metadata;
};

// Parses and validates the header of a safetensors file of `size` bytes at `data`. `source` (a path)
// starts every error message.
SafetensorsHeader parse_safetensors(const uint8_t* data, size_t size, const std::string& source);

// One tensor to write: raw little-endian bytes (numel * dtype_size).
struct TensorBytes {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  const void* data;
  size_t nbytes;
};

// The file's first bytes for `tensors` in this order: the header's length (8 bytes, little-endian) and its JSON,
// padded to 8 bytes as HF pads it; the tensors' bytes follow it one after another.
std::string safetensors_header(const std::vector<TensorBytes>& tensors,
                               const std::map<std::string, std::string>& metadata = {});

// Serialises tensors (header padded to 8 bytes, data 8-byte aligned as HF does) into one byte string.
std::string serialize_safetensors(const std::vector<TensorBytes>& tensors,
                                  const std::map<std::string, std::string>& metadata = {});

}  // namespace specpress::io
