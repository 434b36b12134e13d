// json_depth.h — the nesting limit on the JSON files specpress reads (configs, tokenizer.json, indexes, datasets,
// checkpoints). nlohmann's parser keeps deep nesting on the heap, but printing such a value (an error message that
// names it) recurses once a level: a config.json nested 100,000 deep crashed the process. No file specpress reads
// nests past a dozen levels; the server's request bodies have their own, lower limit (server/api_request.cpp).
#pragma once
#include <string>

#include "core/error.h"

namespace specpress {

inline constexpr int kMaxJsonDepth = 256;

// A parser callback for Json::parse (nlohmann::json or ordered_json) that fails naming `source` once a value nests
// deeper than kMaxJsonDepth; `then`, when given, is asked about every event as the parser would (a caller's own
// callback: duplicate names, say).
template <class Json>
typename Json::parser_callback_t depth_limited(std::string source, typename Json::parser_callback_t then = nullptr) {
  return [source = std::move(source), then = std::move(then)](int depth, typename Json::parse_event_t event,
                                                              Json& parsed) {
    if (depth > kMaxJsonDepth) fail("{}: values nested more than {} levels deep", source, kMaxJsonDepth);
    return then ? then(depth, event, parsed) : true;
  };
}

}  // namespace specpress
