// config_json.cpp — see config_json.h.
#include "model/config_json.h"

#include <cstdint>
#include <filesystem>

#include "core/error.h"
#include "core/json_depth.h"
#include "io/mapped_file.h"

namespace specpress::model {
namespace fs = std::filesystem;

std::string config_path_in(const std::string& dir, const char* expected) {
  if (!fs::exists(dir)) fail("{}: does not exist (expected {})", dir, expected);
  if (!fs::is_directory(dir)) fail("{}: not a directory (expected {})", dir, expected);
  const fs::path config = fs::path(dir) / "config.json";
  if (!fs::exists(config)) fail("{}: no config.json (expected {})", dir, expected);
  return config.string();
}

nlohmann::json ConfigReader::parse_file(const std::string& path) {
  std::string text = io::read_text_file(path);
  try {
    nlohmann::json j = nlohmann::json::parse(depth_checked(text, path));
    if (!j.is_object()) fail("{}: expected a JSON object", path);
    return j;
  } catch (const nlohmann::json::exception& e) {
    fail("{}: invalid JSON: {}", path, e.what());
  }
}

namespace {
// An integer JSON value as int64, refused naming the field where it is past int64's range (an unsigned JSON number
// would wrap to a negative one: 2^64 - 1 read as -1).
int64_t in_range(const nlohmann::json& v, const std::string& source, const std::string& key) {
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
    fail("{}: field '{}' is {}, past the largest integer read here (2^63 - 1)", source, key, v.dump());
  return v.get<int64_t>();
}
}  // namespace

int64_t ConfigReader::integer(const std::string& key) const {
  if (!has(key)) fail("{}: missing field '{}' (expected an integer)", source, key);
  const auto& v = json[key];
  if (!v.is_number_integer()) fail("{}: field '{}' must be an integer, found {}", source, key, v.dump());
  return in_range(v, source, key);
}

int64_t ConfigReader::integer_or(const std::string& key, int64_t fallback) const {
  return has(key) ? integer(key) : fallback;
}

double ConfigReader::number(const std::string& key) const {
  if (!has(key)) fail("{}: missing field '{}' (expected a number)", source, key);
  const auto& v = json[key];
  if (!v.is_number()) fail("{}: field '{}' must be a number, found {}", source, key, v.dump());
  return v.get<double>();
}

double ConfigReader::number_or(const std::string& key, double fallback) const {
  return has(key) ? number(key) : fallback;
}

bool ConfigReader::boolean(const std::string& key) const {
  if (!has(key)) fail("{}: missing field '{}' (expected true or false)", source, key);
  return boolean_or(key, false);
}

bool ConfigReader::boolean_or(const std::string& key, bool fallback) const {
  if (!has(key)) return fallback;
  const auto& v = json[key];
  if (!v.is_boolean()) fail("{}: field '{}' must be true or false, found {}", source, key, v.dump());
  return v.get<bool>();
}

std::string ConfigReader::string(const std::string& key) const {
  if (!has(key)) fail("{}: missing field '{}' (expected a string)", source, key);
  return string_or(key, "");
}

std::string ConfigReader::string_or(const std::string& key, const std::string& fallback) const {
  if (!has(key)) return fallback;
  const auto& v = json[key];
  if (!v.is_string()) fail("{}: field '{}' must be a string, found {}", source, key, v.dump());
  return v.get<std::string>();
}

std::vector<int64_t> ConfigReader::integer_list(const std::string& key) const {
  std::vector<int64_t> out;
  if (!has(key)) return out;
  const auto& v = json[key];
  if (v.is_number_integer()) return {in_range(v, source, key)};
  if (!v.is_array()) fail("{}: field '{}' must be an integer or an array of integers, found {}", source, key, v.dump());
  for (const auto& x : v) {
    if (!x.is_number_integer()) fail("{}: field '{}' must hold integers, found {}", source, key, x.dump());
    out.push_back(in_range(x, source, key));
  }
  return out;
}

void ConfigReader::expect_architecture(const std::string& expected) const {
  if (!has("architectures")) return;  // older exports leave it out
  const auto& a = json["architectures"];
  if (!a.is_array()) fail("{}: field 'architectures' must be an array of strings, found {}", source, a.dump());
  bool draft = false;  // a DFlash draft's config where a target's is expected: -m and -md swapped, say
  for (const auto& name : a) {
    if (name == expected) return;
    draft = draft || (name.is_string() && name.get<std::string>().find("DFlash") != std::string::npos);
  }
  fail("{}: architectures {} where {} is expected{}", source, a.dump(), expected,
       draft ? " (this is a DFlash draft: a Qwen3 target is given with -m (the trainers' --target), its draft with -md "
               "(--draft))"
             : " (specpress runs Qwen3 models)");
}

}  // namespace specpress::model
