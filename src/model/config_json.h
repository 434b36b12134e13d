// config_json.h — typed reads of config.json fields with errors that name the file, the field and
// the expected type, shared by the Qwen3 target and DFlash draft configs.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace specpress::model {

struct ConfigReader {
  const nlohmann::json& json;
  std::string source;  // path of config.json, starts every message

  static nlohmann::json parse_file(const std::string& path);
  bool has(const std::string& key) const { return json.contains(key) && !json[key].is_null(); }
  int64_t integer(const std::string& key) const;
  int64_t integer_or(const std::string& key, int64_t fallback) const;
  double number(const std::string& key) const;
  double number_or(const std::string& key, double fallback) const;
  bool boolean(const std::string& key) const;
  bool boolean_or(const std::string& key, bool fallback) const;
  std::string string(const std::string& key) const;
  std::string string_or(const std::string& key, const std::string& fallback) const;
  std::vector<int64_t> integer_list(const std::string& key) const;  // accepts an integer or an array
  // Refuses a config whose "architectures" (when given) does not name `expected`: another architecture's weights
  // may load under Qwen3's names and compute something else.
  void expect_architecture(const std::string& expected) const;
};

// The path of `dir`/config.json, after checking that `dir` exists, is a directory and holds one; each failure names
// `dir` and what it should be (`expected`: "an HF model directory", "a DFlash draft directory").
std::string config_path_in(const std::string& dir, const char* expected);

}  // namespace specpress::model
