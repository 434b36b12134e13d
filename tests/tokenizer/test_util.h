// test_util.h — shared helpers for the tokenizer tests: locating ../shared (SPECPRESS_SHARED_DIR),
// reading JSONL fixtures and loading the real Qwen3 tokenizer once per test binary.
#pragma once
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace specpress::tok::testing {

inline std::string qwen3_dir() {
  return std::string(SPECPRESS_SHARED_DIR) + "/data/qwen3-tokenizer";
}

inline bool have_qwen3() { return std::filesystem::exists(qwen3_dir() + "/tokenizer.json"); }

// Opens a fixture; a missing one is named, not read as empty (a partial ../shared copy may hold tokenizer.json only).
inline std::ifstream open_fixture(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  return in;
}

inline std::string read_text(const std::string& path) {
  std::ifstream in = open_fixture(path);
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

inline std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::vector<nlohmann::json> records;
  std::ifstream in = open_fixture(path);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) records.push_back(nlohmann::json::parse(line));
  }
  return records;
}

// The Qwen3 tokenizer from ../shared, loaded on first use.
inline const Tokenizer& qwen3() {
  static const Tokenizer tokenizer = Tokenizer::from_dir(qwen3_dir());
  return tokenizer;
}

// Runs `fn`, expects a specpress::Error and returns its message.
template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected specpress::Error";
  return "";
}

}  // namespace specpress::tok::testing

// Skips the current test when the shared Qwen3 tokenizer files are not there.
#define SKIP_WITHOUT_QWEN3()                                                             \
  do {                                                                                   \
    if (!::specpress::tok::testing::have_qwen3()) {                                      \
      GTEST_SKIP() << "Qwen3 tokenizer files not found in "                              \
                   << ::specpress::tok::testing::qwen3_dir()                             \
                   << " (SPECPRESS_SHARED_DIR must point at the project's ../shared)";   \
    }                                                                                    \
  } while (0)
