// json_fields.cpp — see json_fields.h.
#include "server/json_fields.h"

#include <cmath>
#include <limits>

#include "core/error.h"
#include "server/api_request.h"

namespace specpress::server {
using json = nlohmann::json;

int64_t integer_field(const json& v, const std::string& field) {
  if (v.is_number_integer()) {
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      fail("field '{}': {} is too large", field, v.get<uint64_t>());
    return v.get<int64_t>();
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e15) return static_cast<int64_t>(d);
  }
  fail("field '{}': expected an integer, got {}", field, brief(v));
}

double number_field(const json& v, const std::string& field) {
  if (!v.is_number()) fail("field '{}': expected a number, got {}", field, brief(v));
  return v.get<double>();
}

bool bool_field(const json& v, const std::string& field) {
  if (!v.is_boolean()) fail("field '{}': expected true or false, got {}", field, brief(v));
  return v.get<bool>();
}

std::string string_field(const json& v, const std::string& field) {
  if (!v.is_string()) fail("field '{}': expected a string, got {}", field, brief(v));
  return v.get<std::string>();
}

void require_off(const json& v, const std::string& field, bool off, const std::string& what) {
  if (!off) fail("field '{}': {} is not supported (got {})", field, what, brief(v));
}

bool read_sampling_field(const std::string& key, const json& v, decode::SamplingParams& sampling, bool& random_seed) {
  if (key == "temperature") {
    sampling.temperature = number_field(v, key);
    if (!(sampling.temperature >= 0) || !std::isfinite(sampling.temperature))
      fail("field 'temperature': must be a finite number >= 0 (0 = greedy), got {}", brief(v));
  } else if (key == "top_p") {
    sampling.top_p = number_field(v, key);
    if (!(sampling.top_p > 0 && sampling.top_p <= 1)) fail("field 'top_p': must be in (0, 1], got {}", brief(v));
  } else if (key == "top_k") {
    sampling.top_k = integer_field(v, key);
    if (sampling.top_k < 0) fail("field 'top_k': must be >= 0 (0 = off), got {}", sampling.top_k);
  } else if (key == "min_p") {
    sampling.min_p = number_field(v, key);
    if (!(sampling.min_p >= 0 && sampling.min_p < 1)) fail("field 'min_p': must be in [0, 1), got {}", brief(v));
  } else if (key == "seed") {
    if (v.is_number_unsigned() && v.get<uint64_t>() == kRandomSeedValue) {
      random_seed = true;  // llama-server's LLAMA_DEFAULT_SEED: a fresh seed (what /props shows for "random")
    } else if (v.is_number_unsigned()) {
      sampling.seed = v.get<uint64_t>();
      random_seed = false;
    } else {
      const int64_t seed = integer_field(v, key);
      if (seed < -1) fail("field 'seed': must be -1 or 4294967295 (random) or in 0..2^64-1, got {}", seed);
      random_seed = seed == -1;
      if (seed >= 0) sampling.seed = static_cast<uint64_t>(seed);
    }
  } else {
    return false;
  }
  return true;
}

std::vector<std::string> stop_strings_field(const json& v, const std::string& field, bool single) {
  if (!v.is_array() && !single) fail("field '{}': expected an array of non-empty strings, got {}", field, brief(v));
  std::vector<json> items = v.is_array() ? std::vector<json>(v.begin(), v.end()) : std::vector<json>{v};
  if (items.size() > 16) fail("field '{}': {} strings; at most 16 are supported", field, items.size());
  std::vector<std::string> stops;
  for (const json& s : items) {
    if (!s.is_string() || s.get<std::string>().empty())
      fail("field '{}': expected {}, got {}", field,
           single ? "a non-empty string or an array of them" : "an array of non-empty strings", brief(s));
    stops.push_back(s.get<std::string>());
  }
  return stops;
}

}  // namespace specpress::server
