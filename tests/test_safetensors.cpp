// test_safetensors.cpp — the torch-free safetensors parser: round trip, and every malformed-file case
// named in the foundation issue produces an error that names the problem.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/safetensors.h"

using specpress::Error;
using namespace specpress::io;

namespace {

std::string make_file(const std::string& header, size_t data_bytes) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  out += header;
  out += std::string(data_bytes, '\x01');
  return out;
}

std::string parse_error(const std::string& bytes) {
  try {
    parse_safetensors(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "x.safetensors");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Safetensors, RoundTrip) {
  std::vector<float> a = {1, 2, 3, 4, 5, 6};
  std::vector<uint16_t> b = {7, 8};
  std::string bytes = serialize_safetensors({{"a", DType::F32, {2, 3}, a.data(), 24}, {"b", DType::BF16, {2}, b.data(), 4}},
                                            {{"format", "pt"}});
  EXPECT_EQ((bytes.size() - 24 - 4) % 8, 0u);  // header padded to 8 bytes
  auto h = parse_safetensors(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "rt");
  ASSERT_EQ(h.tensors.size(), 2u);
  EXPECT_EQ(h.tensors[0].name, "a");
  EXPECT_EQ(h.tensors[0].shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(h.tensors[1].dtype, DType::BF16);
  EXPECT_EQ(h.metadata.at("format"), "pt");
  float back[6];
  std::memcpy(back, bytes.data() + h.data_start + h.tensors[0].begin, 24);
  EXPECT_EQ(back[5], 6.0f);
}

TEST(Safetensors, TruncatedBeforeHeaderLength) {
  EXPECT_NE(parse_error("abc").find("truncated safetensors file: 3 bytes"), std::string::npos);
}

TEST(Safetensors, HeaderLengthLargerThanFile) {
  std::string f = make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4);
  f[0] = '\xff';
  f[1] = '\xff';
  EXPECT_NE(parse_error(f).find("is larger than the file"), std::string::npos) << parse_error(f);
}

TEST(Safetensors, InvalidJsonHeader) {
  EXPECT_NE(parse_error(make_file(R"({"a": [1, 2)", 0)).find("invalid JSON header"), std::string::npos);
  EXPECT_NE(parse_error(make_file(R"(["a"])", 0)).find("must start with '{'"), std::string::npos);
}

TEST(Safetensors, UnknownDtype) {
  std::string msg = parse_error(make_file(R"({"w":{"dtype":"F31","shape":[1],"data_offsets":[0,4]}})", 4));
  EXPECT_NE(msg.find("tensor 'w': unknown dtype 'F31'"), std::string::npos) << msg;
}

TEST(Safetensors, TruncatedData) {
  std::string msg = parse_error(make_file(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 10));
  EXPECT_NE(msg.find("out of range"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'w'"), std::string::npos) << msg;
}

TEST(Safetensors, OverlappingOffsets) {
  std::string msg = parse_error(make_file(
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12));
  EXPECT_NE(msg.find("overlap"), std::string::npos) << msg;
}

TEST(Safetensors, DuplicateNames) {
  std::string msg = parse_error(make_file(
      R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
      8));
  EXPECT_NE(msg.find("the name 'a' appears more than once"), std::string::npos) << msg;
  msg = parse_error(make_file(R"({"":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                              R"("":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                              8));
  EXPECT_NE(msg.find("the name '' appears more than once"), std::string::npos) << msg;
  // the same name inside an entry or the metadata is not the header's
  msg = parse_error(make_file(R"({"__metadata__":{"a":"x"},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 8));
  EXPECT_EQ(msg.find("more than once"), std::string::npos) << msg;
}

TEST(Safetensors, HoleAndSizeMismatch) {
  EXPECT_NE(parse_error(make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8)).find("hole"),
            std::string::npos);
  std::string msg = parse_error(make_file(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8));
  EXPECT_NE(msg.find("needs 12"), std::string::npos) << msg;
  msg = parse_error(make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 9));
  EXPECT_NE(msg.find("cover 4 bytes"), std::string::npos) << msg;
}

TEST(Safetensors, BadFieldTypes) {
  EXPECT_NE(parse_error(make_file(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}})", 0)).find("non-negative"),
            std::string::npos);
  EXPECT_NE(parse_error(make_file(R"({"a":{"dtype":"F32","shape":[1]}})", 4)).find("data_offsets"), std::string::npos);
  EXPECT_NE(parse_error(make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", 8)).find("end before begin"),
            std::string::npos);
  EXPECT_NE(parse_error(make_file(R"({"a":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,0]}})", 0))
                .find("overflows"),
            std::string::npos);
}

}  // namespace
