// messages_request.cpp — see messages_request.h. A null field counts as absent, as in api_request.cpp.
#include "server/messages_request.h"

#include <algorithm>
#include <optional>

#include "core/error.h"
#include "server/json_fields.h"
#include "tokenizer/python_json.h"

namespace specpress::server {
namespace {
// The messages and tools are read in the client's key order (parse_ordered_fields), the rest from the sorted body.
using json = nlohmann::ordered_json;

// A content block's text (`at` names it in errors): a text block's; "" for the thinking and redacted_thinking blocks of
// an `assistant` turn, which are dropped (their text never re-enters Qwen3's prompt).
std::string block_text(const json& block, const std::string& at, bool assistant) {
  if (!block.is_object() || !block.contains("type") || !block["type"].is_string())
    fail("{}: expected a content block ({{\"type\": \"text\", \"text\": ...}}), got {}", at, brief(block));
  const std::string type = block["type"].get<std::string>();
  if (assistant && (type == "thinking" || type == "redacted_thinking")) return "";
  if (type != "text")
    fail("{}: content blocks of type '{}' are not supported here ({})", at, type,
         assistant ? "text and tool_use; thinking blocks are dropped" : "text; a user turn also takes tool_result");
  std::string text;
  for (const auto& [key, field] : block.items()) {
    if (key == "text") text = string_field(field, at + ".text");
    else if (key != "type" && key != "cache_control" && key != "citations")  // prompt-cache hints: no effect
      fail("{}: unknown field '{}' in a text block", at, key);
  }
  if (!block.contains("text")) fail("{}: a text block without 'text'", at);
  return text;
}

// A content value: a string, or an array of blocks whose text blocks are joined. `what` names it in errors.
std::string content_text(const json& v, const std::string& what, bool assistant) {
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_array()) fail("{}: expected a string or an array of content blocks, got {}", what, brief(v));
  std::string text;
  for (size_t k = 0; k < v.size(); ++k) text += block_text(v[k], fmt::format("{}[{}]", what, k), assistant);
  return text;
}

// A tool_result block's content: a string or text blocks (what the tool returned).
std::string tool_result_text(const json& block, const std::string& at) {
  std::string text;
  bool have_id = false;
  for (const auto& [key, field] : block.items()) {
    if (key == "tool_use_id") string_field(field, at + ".tool_use_id"), have_id = true;
    else if (key == "content") text = content_text(field, at + ".content", /*assistant=*/false);
    else if (key == "is_error") bool_field(field, at + ".is_error");  // the text says what went wrong
    else if (key != "type" && key != "cache_control") fail("{}: unknown field '{}' in a tool_result block", at, key);
  }
  if (!have_id) fail("{}: a tool_result block without 'tool_use_id'", at);
  return text;
}

// A tool_use block: the assistant's call, its input as the template writes it (python_json).
tok::ToolCallText tool_use_call(const json& block, const std::string& at) {
  tok::ToolCallText call;
  bool have_id = false, have_input = false;
  for (const auto& [key, field] : block.items()) {
    if (key == "id") string_field(field, at + ".id"), have_id = true;
    else if (key == "name") call.name = string_field(field, at + ".name");
    else if (key == "input") {
      if (!field.is_object()) fail("{}.input: expected an object, got {}", at, brief(field));
      call.arguments = tok::python_json(field), have_input = true;
    } else if (key != "type" && key != "cache_control") {
      fail("{}: unknown field '{}' in a tool_use block", at, key);
    }
  }
  if (!have_id || call.name.empty() || !have_input)
    fail("{}: a tool_use block needs 'id', a non-empty 'name' and 'input'", at);
  return call;
}

// Anthropic's turns as the chat template's: a user turn's tool_result blocks become role "tool" messages (in place,
// so the results Anthropic puts first come before the user's text), an assistant turn's tool_use blocks its
// tool_calls (after its text, as Qwen3 writes them).
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
    const json& content = m["content"];
    if (!content.is_array()) {
      r.messages.push_back({m["role"].get<std::string>(), content_text(content, at + ".content", assistant)});
      continue;
    }
    tok::ChatMessage turn{m["role"].get<std::string>(), ""};
    bool turn_open = false, had_results = false;  // text or calls in `turn`; tool messages from this one
    for (size_t k = 0; k < content.size(); ++k) {
      const json& block = content[k];
      const std::string block_at = fmt::format("{}.content[{}]", at, k);
      const std::string type = block.is_object() && block.contains("type") && block["type"].is_string()
                                   ? block["type"].get<std::string>() : "";
      if (type == "tool_use" && assistant) {
        turn.tool_calls.push_back(tool_use_call(block, block_at));
        turn_open = true;
      } else if (type == "tool_result" && !assistant) {
        if (turn_open) r.messages.push_back(std::move(turn)), turn = {"user", ""}, turn_open = false;
        r.messages.push_back({"tool", tool_result_text(block, block_at)});
        had_results = true;
      } else if (type == "tool_use" || type == "tool_result") {
        fail("{}: a {} block belongs to {} turn", block_at, type, type == "tool_use" ? "an assistant" : "a user");
      } else {
        turn.content += block_text(block, block_at, assistant);
        turn_open = true;
      }
    }
    if (turn_open || !had_results) r.messages.push_back(std::move(turn));
  }
  // a last assistant turn is a prefill: the reply continues its text (leading newlines dropped, as the template does)
  if (r.messages.back().role == "assistant") {
    if (!r.messages.back().tool_calls.empty())
      fail("field 'messages': the last assistant message has tool_use blocks; send their tool_result blocks in a "
           "user turn after it");
    const std::string& prefill = r.messages.back().content;
    r.assistant_prefill = prefill.substr(std::min(prefill.find_first_not_of('\n'), prefill.size()));
    r.messages.pop_back();
    if (r.messages.empty()) fail("field 'messages': a lone assistant message; the conversation needs a user turn");
  }
}

// Anthropic's client tools as the chat template takes OpenAI's: {"type": "function", "function": {"name",
// "description", "parameters": input_schema}} (llama-server's and vLLM's conversion), written as its tojson writes it.
void read_tools(const json& v, CompletionRequest& r) {
  if (!v.is_array()) fail("field 'tools': expected an array of {{\"name\", \"input_schema\"}} tools, got {}", brief(v));
  r.tools.clear();
  for (size_t i = 0; i < v.size(); ++i) {
    const json& t = v[i];
    const std::string at = fmt::format("field 'tools': tools[{}]", i);
    if (!t.is_object()) fail("{}: expected an object, got {}", at, brief(t));
    if (t.contains("type") && !t["type"].is_null() && t["type"] != "custom")
      fail("{}: tools of type {} (Anthropic's server tools) are not supported; client tools are", at, brief(t["type"]));
    std::string name;
    std::optional<std::string> description;
    for (const auto& [key, field] : t.items()) {
      if (key == "name") name = string_field(field, at + ".name");
      else if (key == "description") description = string_field(field, at + ".description");
      else if (key == "input_schema") {
        if (!field.is_object()) fail("{}.input_schema: expected a JSON Schema object, got {}", at, brief(field));
      } else if (key != "type" && key != "cache_control") {
        fail("{}: unknown field '{}'", at, key);
      }
    }
    if (name.empty()) fail("{}.name: expected a non-empty string", at);
    if (!t.contains("input_schema")) fail("{}.input_schema is missing", at);
    // in OpenAI's order whatever the client's: name, description, parameters
    json function = {{"name", name}};
    if (description) function["description"] = *description;
    function["parameters"] = t["input_schema"];
    r.tools.push_back(tok::python_json(json{{"type", "function"}, {"function", std::move(function)}}));
  }
}

// auto (its disable_parallel_tool_use accepted: every call the model writes is returned) or none; any and tool force
// a call, which needs constrained decoding.
bool read_tool_choice(const json& v) {
  if (!v.is_object() || !v.contains("type") || !v["type"].is_string())
    fail("field 'tool_choice': expected {{\"type\": \"auto\"}} or {{\"type\": \"none\"}}, got {}", brief(v));
  const std::string type = v["type"].get<std::string>();
  if (type == "any" || type == "tool")
    fail("field 'tool_choice': {} forces a tool call, which needs constrained decoding; \"auto\" and \"none\" are "
         "supported", brief(v));
  if (type != "auto" && type != "none")
    fail("field 'tool_choice.type': expected \"auto\" or \"none\", got {}", brief(v["type"]));
  for (const auto& [key, field] : v.items()) {
    if (key == "disable_parallel_tool_use") bool_field(field, "tool_choice.disable_parallel_tool_use");
    else if (key != "type") fail("field 'tool_choice': unknown field '{}'", key);
  }
  return type == "none";
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

CompletionRequest parse_messages_request(const nlohmann::json& body, MessagesRoute route,
                                         const RequestDefaults& defaults, const json& ordered) {
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
  bool thinking_given = false, tool_choice_none = false;
  for (const auto& [key, v] : body.items()) {
    if (v.is_null()) continue;
    if (key == "messages") {
      read_messages(ordered_field(ordered, key, v), r);
    } else if (key == "system") {
      system = content_text(v, "field 'system'", /*assistant=*/false);
      have_system = true;
    } else if (key == "model") {
      r.model = string_field(v, key);
    } else if (key == "thinking") {
      read_thinking(v, r, budget);
      thinking_given = true;
    } else if (key == "tools") {
      read_tools(ordered_field(ordered, key, v), r);
    } else if (key == "tool_choice") {
      tool_choice_none = read_tool_choice(v);
    } else if (count) {
      fail("unknown field '{}' for {} (it takes model, system, messages, thinking, tools and tool_choice)", key,
           endpoint);
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
    } else if (key == "metadata") {  // Anthropic's user_id: checked, with no effect on a single-slot engine
      if (!v.is_object()) fail("field 'metadata': expected an object, got {}", brief(v));
      for (const auto& [k, o] : v.items())
        if (!o.is_null()) string_field(o, "metadata." + k);
    } else if (key == "service_tier") {
      string_field(v, key);  // no effect here
    } else {
      fail("unknown field '{}' for {}", key, endpoint);
    }
  }
  if (!body.contains("messages") || body["messages"].is_null()) fail("field 'messages' is missing");
  // as Anthropic's API and vLLM's: the reply's length is the client's to say (a default would run to the context)
  if (!count && !r.max_tokens_given) fail("field 'max_tokens' is missing (the Messages API requires it)");
  // as llama.cpp and Anthropic: a prefilled reply cannot think (the template closes the think block before it)
  if (budget >= 0 && r.assistant_prefill)
    fail("field 'messages': a last assistant message (a prefill) cannot be continued with thinking enabled");
  if (budget >= 0 && r.max_tokens_given && budget >= r.max_tokens)
    fail("field 'thinking.budget_tokens': {} must be less than max_tokens ({})", budget, r.max_tokens);
  // a request's thinking object replaces the server's default cap (disabled: no thinking to cap)
  r.thinking_budget = budget >= 0 ? budget : thinking_given ? -1 : defaults.thinking_budget;
  r.thinking_budget_given = budget >= 0;
  if (r.assistant_prefill) r.thinking_budget = -1;  // the template closes the block before a prefill
  if (have_system) r.messages.insert(r.messages.begin(), tok::ChatMessage{"system", system});
  r.tool_calls = !r.tools.empty() && !tool_choice_none;
  return r;
}

}  // namespace specpress::server
