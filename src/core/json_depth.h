// json_depth.h — the nesting limit on the JSON files specpress reads (configs, tokenizer.json, indexes, datasets,
// checkpoints). nlohmann's parser keeps deep nesting on the heap, but printing such a value (an error message that
// names it) recurses once a level: a config.json nested 100,000 deep crashed the process. No file specpress reads
// nests past a dozen levels; the server's request bodies have their own, lower limit (server/api_request.cpp).
// The text is scanned before it is parsed, not checked by a parser callback: any callback makes nlohmann's parser
// rescan an array's elements as each of its objects closes, quadratic in a dataset of 200,000 records (19 s).
#pragma once
#include <string>
#include <string_view>

#include "core/error.h"

namespace specpress {

inline constexpr int kMaxJsonDepth = 256;

// Fails naming `source` where `text` opens more than kMaxJsonDepth arrays or objects inside each other (brackets in
// strings do not count). Text that is not JSON passes; the parser reports it.
inline void check_json_depth(std::string_view text, const std::string& source) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;  // the escaped character, a quote say
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth) fail("{}: values nested more than {} levels deep", source, kMaxJsonDepth);
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
}

// `text` after check_json_depth, for a parse call: Json::parse(depth_checked(text, source)).
inline const std::string& depth_checked(const std::string& text, const std::string& source) {
  check_json_depth(text, source);
  return text;
}

}  // namespace specpress
