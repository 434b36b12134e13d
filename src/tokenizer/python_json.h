// python_json.h — JSON text as Python's json.dumps(x, ensure_ascii=False) writes it, which is what the `tojson`
// filter of transformers' apply_chat_template produces: ", " and ": " separators, keys in the order given,
// non-ASCII characters as they are, control characters as \uXXXX (\n, \t, ... by name), floats as Python's repr
// (shortest round trip; "2.0", "1e-05", "1e+16"). The Qwen3 template writes tools and tool-call arguments with it,
// so the prompt's bytes are HF's.
#pragma once
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace specpress::tok {

std::string python_json(const nlohmann::ordered_json& value);

}  // namespace specpress::tok
