// messages_request.cpp — see messages_request.h. A null field counts as absent, as in api_request.cpp.
#include "server/messages_request.h"

#include <algorithm>

#include "core/error.h"
#include "server/json_fields.h"

namespace specpress::server {
namespace {
using json = nlohmann::ordered_json;

// A content value: a string, or an array of blocks whose text blocks are joined. `what` names it in errors.
// `assistant`: thinking and redacted_thinking blocks are dropped (their text never re-enters Qwen3's prompt).
std::string content_text(const json& v, const std::string& what, bool assistant) {
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_array()) fail("{}: expected a string or an array of content blocks, got {}", what, brief(v));
  std::string text;
  for (size_t k = 0; k < v.size(); ++k) {
    const json& block = v[k];
    const std::string at = fmt::format("{}[{}]", what, k);
    if (!block.is_object() || !block.contains("type") || !block["type"].is_string())
      fail("{}: expected a content block ({{\"type\": \"text\", \"text\": ...}}), got {}", at, brief(block));
    const std::string type = block["type"].get<std::string>();
    if (assistant && (type == "thinking" || type == "redacted_thinking")) continue;
    if (type != "text")
      fail("{}: content blocks of type '{}' are not supported (text only{})", at, type,
           assistant ? "; thinking blocks are dropped" : "");
    for (const auto& [key, field] : block.items()) {
      if (key == "text") text += string_field(field, at + ".text");
      else if (key != "type" && key != "cache_control" && key != "citations")  // prompt-cache hints: no effect
        fail("{}: unknown field '{}' in a text block", at, key);
    }
    if (!block.contains("text")) fail("{}: a text block without 'text'", at);
  }
  return text;
}

void read_messages(const json& v, CompletionRequest& r) {
  if (!v.is_array() || v.empty())
    fail("field 'messages': expected a non-empty array of {{\"role\", \"content\"}} objects, got {}", brief(v));
  for (size_t i = 0; i < v.size(); ++i) {
    const json& m = v[i];
    const std::string at = fmt::format("field 'messages': messages[{}]", i);
    if (!m.is_object()) fail("{}: expected an object, got {}", at, brief(m));
    if (!m.contains("role") || !m["role"].is_string() || (m["role"] != "user" && m["role"] != "assistant"))
      fail("{}.role: expected \"user\" or \"assistant\" (the system prompt is the top-level 'system'), got {}", at,
           m.contains("role") ? brief(m["role"]) : std::string("nothing"));
    if (!m.contains("content")) fail("{}.content is missing", at);
    for (const auto& [key, field] : m.items())
      if (key != "role" && key != "content") fail("{}: unknown field '{}'", at, key);
    const bool assistant = m["role"] == "assistant";
    r.messages.push_back({m["role"].get<std::string>(), content_text(m["content"], at + ".content", assistant)});
  }
  // a last assistant turn is a prefill: the reply continues its text (leading newlines dropped, as the template does)
  if (r.messages.back().role == "assistant") {
    const std::string& prefill = r.messages.back().content;
    r.assistant_prefill = prefill.substr(std::min(prefill.find_first_not_of('\n'), prefill.size()));
    r.messages.pop_back();
    if (r.messages.empty()) fail("field 'messages': a lone assistant message; the conversation needs a user turn");
  }
}

void read_thinking(const json& v, CompletionRequest& r, int64_t& budget) {
  if (!v.is_object() || !v.contains("type") || !v["type"].is_string())
    fail("field 'thinking': expected {{\"type\": \"enabled\", \"budget_tokens\": N}} or {{\"type\": \"disabled\"}}, "
         "got {}", brief(v));
  const std::string type = v["type"].get<std::string>();
  if (type != "enabled" && type != "disabled")
    fail("field 'thinking.type': expected \"enabled\" or \"disabled\", got {}", brief(v["type"]));
  r.enable_thinking = type == "enabled";
  for (const auto& [key, field] : v.items()) {
    if (key == "type") continue;
    if (key != "budget_tokens" || type != "enabled")
      fail("field 'thinking': unknown field '{}' for type \"{}\"", key, type);
    budget = integer_field(field, "thinking.budget_tokens");
    if (budget < 1024) fail("field 'thinking.budget_tokens': must be at least 1024, got {}", budget);
  }
  if (r.enable_thinking && budget < 0) fail("field 'thinking.budget_tokens' is missing (needed with \"enabled\")");
}

}  // namespace

CompletionRequest parse_messages_request(const json& body, MessagesRoute route, const RequestDefaults& defaults) {
  CompletionRequest r;
  r.api = Api::kMessages;
  r.max_tokens = defaults.max_tokens;
  r.sampling = defaults.sampling;
  r.random_seed = defaults.random_seed;
  r.enable_thinking = defaults.enable_thinking;
  // thinking blocks, unless the server leaves the thinking in the text (--reasoning-format none)
  r.reasoning_format =
      defaults.reasoning_format == ReasoningFormat::kNone ? ReasoningFormat::kNone : ReasoningFormat::kDeepseek;
  const bool count = route == MessagesRoute::kCountTokens;
  const char* endpoint = count ? "/v1/messages/count_tokens" : "/v1/messages";
  std::string system;
  bool have_system = false;
  int64_t budget = -1;
  for (const auto& [key, v] : body.items()) {
    if (v.is_null()) continue;
    if (key == "messages") {
      read_messages(v, r);
    } else if (key == "system") {
      system = content_text(v, "field 'system'", /*assistant=*/false);
      have_system = true;
    } else if (key == "model") {
      r.model = string_field(v, key);
    } else if (key == "thinking") {
      read_thinking(v, r, budget);
    } else if (key == "tools" || key == "tool_choice") {
      require_off(v, key, (v.is_array() && v.empty()) || (v.is_object() && v.value("type", "") == "none"),
                  "tool use");
    } else if (count) {
      fail("unknown field '{}' for {} (it takes model, system, messages, thinking, and tools and tool_choice when "
           "off)", key, endpoint);
    } else if (key == "max_tokens") {
      r.max_tokens = integer_field(v, key);
      if (r.max_tokens < 1) fail("field 'max_tokens': must be at least 1, got {}", r.max_tokens);
      r.max_tokens_given = true;
    } else if (key == "stop_sequences") {
      r.stop = stop_strings_field(v, key, /*single=*/false);
    } else if (key == "stream") {
      r.stream = bool_field(v, key);
    } else if (read_sampling_field(key, v, r.sampling, r.random_seed)) {
      // temperature, top_p, top_k, and llama.cpp's min_p and seed
    } else if (key == "metadata" || key == "service_tier") {
      // no effect on a single-slot engine: accepted and ignored
    } else {
      fail("unknown field '{}' for {}", key, endpoint);
    }
  }
  if (!body.contains("messages") || body["messages"].is_null()) fail("field 'messages' is missing");
  // as llama.cpp and Anthropic: a prefilled reply cannot think (the template closes the think block before it)
  if (budget >= 0 && r.assistant_prefill)
    fail("field 'messages': a last assistant message (a prefill) cannot be continued with thinking enabled");
  if (budget >= 0 && r.max_tokens_given && budget >= r.max_tokens)
    fail("field 'thinking.budget_tokens': {} must be less than max_tokens ({})", budget, r.max_tokens);
  if (have_system) r.messages.insert(r.messages.begin(), tok::ChatMessage{"system", system});
  return r;
}

}  // namespace specpress::server
