// json_fields.h — typed readers for the fields of the server's request bodies, shared by the OpenAI / llama.cpp
// parser (api_request.cpp) and the Anthropic Messages parser (messages_request.cpp), so that a field both APIs take
// (temperature, top_p, top_k, min_p, seed, the stop strings) is checked once and refused with the same message.
// Each throws specpress::Error naming the field (`field`) and what was expected.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "decode/sampler.h"

namespace specpress::server {

// llama-server's LLAMA_DEFAULT_SEED (0xFFFFFFFF): as a request's seed, a fresh one; /props shows it where the server
// draws a fresh seed for each request.
inline constexpr uint64_t kRandomSeedValue = 4294967295u;

int64_t integer_field(const nlohmann::json& v, const std::string& field);  // 3.0 counts as 3
double number_field(const nlohmann::json& v, const std::string& field);
bool bool_field(const nlohmann::json& v, const std::string& field);
std::string string_field(const nlohmann::json& v, const std::string& field);
// A field the engine does not implement: accepted only at the value that means "off".
void require_off(const nlohmann::json& v, const std::string& field, bool off,
                 const std::string& what);

// temperature, top_p, top_k, min_p or seed (-1 or kRandomSeedValue: random): false when `key` is none of them. A seed
// sets `random_seed` (true for those two, else false).
bool read_sampling_field(const std::string& key, const nlohmann::json& v,
                         decode::SamplingParams& sampling, bool& random_seed);

// Stop strings: a non-empty string or an array of them (`single` false: an array only), at most 16.
std::vector<std::string> stop_strings_field(const nlohmann::json& v, const std::string& field,
                                            bool single = true);

}  // namespace specpress::server
