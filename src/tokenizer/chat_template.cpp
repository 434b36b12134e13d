// chat_template.cpp — a direct transcription of Qwen3's chat_template.jinja control flow for text
// messages and tool use. Jinja/Python string operations are spelled out (split()[0]/[-1], strip('\n')) so that
// edge cases such as several <think> blocks or missing newlines render exactly as in HF.
#include "tokenizer/chat_template.h"

#include <cstdint>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/fnv1a.h"
#include "core/json_depth.h"
#include "tokenizer/python_json.h"

namespace specpress::tok {
namespace {

constexpr uint64_t kQwen3TemplateFnv1a = 0x2bfdb7aa9754484eull;  // chat_template.jinja, 4116 bytes

// Python str.lstrip('\n') / rstrip('\n') / strip('\n').
std::string_view lstrip_newlines(std::string_view s) {
  const size_t start = s.find_first_not_of('\n');
  return start == std::string_view::npos ? std::string_view() : s.substr(start);
}
std::string_view rstrip_newlines(std::string_view s) {
  const size_t end = s.find_last_not_of('\n');
  return end == std::string_view::npos ? std::string_view() : s.substr(0, end + 1);
}
std::string_view strip_newlines(std::string_view s) { return rstrip_newlines(lstrip_newlines(s)); }

// Python s.split(sep)[0] and s.split(sep)[-1].
std::string_view before_first(std::string_view s, std::string_view sep) {
  const size_t at = s.find(sep);
  return at == std::string_view::npos ? s : s.substr(0, at);
}
std::string_view after_last(std::string_view s, std::string_view sep) {
  const size_t at = s.rfind(sep);
  return at == std::string_view::npos ? s : s.substr(at + sep.size());
}

bool is_tool_response(std::string_view content) {
  return content.starts_with("<tool_response>") && content.ends_with("</tool_response>");
}

void check_messages(const std::vector<ChatMessage>& messages) {
  if (messages.empty()) fail("chat template: the conversation has no messages");
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role != "system" && m.role != "user" && m.role != "assistant" && m.role != "tool") {
      fail("chat template: messages[{}] has role \"{}\"; expected \"system\", \"user\", "
           "\"assistant\" or \"tool\"", i, m.role);
    }
    if (m.reasoning_content && m.role != "assistant") {
      fail("chat template: messages[{}] ({}) has reasoning_content; only assistant messages may",
           i, m.role);
    }
    if (!m.tool_calls.empty() && m.role != "assistant") {
      fail("chat template: messages[{}] ({}) has tool_calls; only assistant messages may", i,
           m.role);
    }
  }
}

void render_assistant(const ChatMessage& m, bool after_last_query, bool is_last, std::string& out) {
  std::string_view content = m.content;
  std::string_view reasoning;
  if (m.reasoning_content) {
    reasoning = *m.reasoning_content;
  } else if (content.find("</think>") != std::string_view::npos) {
    reasoning = lstrip_newlines(after_last(rstrip_newlines(before_first(content, "</think>")), "<think>"));
    content = lstrip_newlines(after_last(content, "</think>"));
  }
  out += "<|im_start|>assistant\n";
  if (after_last_query && (is_last || !reasoning.empty())) {
    out += "<think>\n";
    out += strip_newlines(reasoning);
    out += "\n</think>\n\n";
    out += lstrip_newlines(content);
  } else {
    out += content;
  }
  // the template tests its `content` (after the think split, before the lstrip) for the newline
  for (size_t k = 0; k < m.tool_calls.size(); ++k) {
    if (k > 0 || !content.empty()) out += '\n';
    out += "<tool_call>\n{\"name\": \"";
    out += m.tool_calls[k].name;
    out += "\", \"arguments\": ";
    out += m.tool_calls[k].arguments;
    out += "}\n</tool_call>";
  }
  out += "<|im_end|>\n";
}

constexpr const char* kToolsHeader =
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided "
    "with function signatures within <tools></tools> XML tags:\n<tools>";
constexpr const char* kToolsFooter =
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
    "within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
    "\"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n";

}  // namespace

std::string render_qwen3_chat(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                              bool enable_thinking, const std::vector<std::string>& tools) {
  check_messages(messages);
  std::string out;
  if (!tools.empty()) {
    out += "<|im_start|>system\n";
    if (messages[0].role == "system") out += messages[0].content + "\n\n";
    out += kToolsHeader;
    for (const std::string& tool : tools) out += "\n" + tool;
    out += kToolsFooter;
  } else if (messages[0].role == "system") {
    out += "<|im_start|>system\n";
    out += messages[0].content;
    out += "<|im_end|>\n";
  }
  // The last user turn that is a real query (not a wrapped tool response).
  size_t last_query = messages.size() - 1;
  for (size_t k = messages.size(); k-- > 0;) {
    if (messages[k].role == "user" && !is_tool_response(messages[k].content)) {
      last_query = k;
      break;
    }
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "user" || (m.role == "system" && i != 0)) {
      out += "<|im_start|>";
      out += m.role;
      out += '\n';
      out += m.content;
      out += "<|im_end|>\n";
    } else if (m.role == "assistant") {
      render_assistant(m, i > last_query, i + 1 == messages.size(), out);
    } else if (m.role == "tool") {  // a run of tool results is one user turn
      if (i == 0 || messages[i - 1].role != "tool") out += "<|im_start|>user";
      out += "\n<tool_response>\n";
      out += m.content;
      out += "\n</tool_response>";
      if (i + 1 == messages.size() || messages[i + 1].role != "tool") out += "<|im_end|>\n";
    }
  }
  if (add_generation_prompt) {
    out += "<|im_start|>assistant\n";
    if (!enable_thinking) out += "<think>\n\n</think>\n\n";
  }
  return out;
}

std::vector<ChatMessage> parse_messages_json(const std::string& json_text,
                                             const std::string& source_name) {
  using json = nlohmann::ordered_json;
  json root;
  try {
    root = json::parse(depth_checked(json_text, source_name));
  } catch (const json::parse_error& e) {
    fail("{}: not valid JSON: {}", source_name, e.what());
  }
  return parse_messages(root, source_name);
}

namespace {

// An assistant's tool_calls: OpenAI's {"id", "type": "function", "function": {"name",
// "arguments"}} items, or {"name", "arguments"} (the template takes either).
std::vector<ToolCallText> parse_tool_calls(const nlohmann::ordered_json& calls,
                                           const std::string& where) {
  if (!calls.is_array()) fail("{}: field 'tool_calls' must be an array, got {}", where, calls.type_name());
  std::vector<ToolCallText> out;
  for (size_t k = 0; k < calls.size(); ++k) {
    const std::string at = fmt::format("{}.tool_calls[{}]", where, k);
    const nlohmann::ordered_json& call = calls[k];
    if (!call.is_object()) fail("{}: expected an object, got {}", at, call.type_name());
    if (call.contains("type") && call["type"] != "function")
      fail("{}: field 'type' must be \"function\", got {}", at, call["type"].dump());
    const bool wrapped = call.contains("function");
    const nlohmann::ordered_json& f = wrapped ? call["function"] : call;
    const std::string fat = wrapped ? at + ".function" : at;
    if (!f.is_object()) fail("{}: expected an object with \"name\" and \"arguments\"", fat);
    if (!f.contains("name") || !f["name"].is_string() || f["name"].get_ref<const std::string&>().empty())
      fail("{}: field 'name' must be a non-empty string", fat);
    if (!f.contains("arguments") || f["arguments"].is_null())
      fail("{}: field 'arguments' is missing (a JSON object, or its text)", fat);
    const nlohmann::ordered_json& args = f["arguments"];
    out.push_back({f["name"].get<std::string>(),
                   args.is_string() ? args.get<std::string>() : python_json(args)});
  }
  return out;
}

}  // namespace

std::vector<ChatMessage> parse_messages(const nlohmann::ordered_json& root,
                                        const std::string& source_name) {
  using json = nlohmann::ordered_json;
  if (!root.is_array()) {
    fail("{}: expected a JSON array of {{\"role\": ..., \"content\": ...}} messages, got {}",
         source_name, root.type_name());
  }
  std::vector<ChatMessage> messages;
  for (size_t i = 0; i < root.size(); ++i) {
    const json& m = root[i];
    const std::string where = fmt::format("{}: messages[{}]", source_name, i);
    if (!m.is_object()) fail("{}: expected an object with \"role\" and \"content\"", where);
    ChatMessage message;
    bool null_content = false;
    for (const auto& [key, value] : m.items()) {
      if (key == "content" && value.is_null()) {
        null_content = true;
      } else if (key == "role" || key == "content") {
        if (!value.is_string()) {
          fail("{}: field '{}' must be a string (got {}); structured or multimodal content is not "
               "supported", where, key, value.type_name());
        }
        (key == "role" ? message.role : message.content) = value.get<std::string>();
      } else if (key == "reasoning_content") {
        if (value.is_null()) continue;
        if (!value.is_string()) fail("{}: field 'reasoning_content' must be a string or null", where);
        message.reasoning_content = value.get<std::string>();
      } else if (key == "tool_calls") {
        if (!value.is_null()) message.tool_calls = parse_tool_calls(value, where);
      } else if (key == "tool_call_id") {
        if (!value.is_string() && !value.is_null()) fail("{}: field 'tool_call_id' must be a string", where);
      } else {
        fail("{}: unknown field '{}' (expected \"role\", \"content\" and optionally "
             "\"reasoning_content\", \"tool_calls\" or \"tool_call_id\")", where, key);
      }
    }
    if (!m.contains("role")) fail("{}: field 'role' is missing", where);
    // an assistant turn of tool calls alone may leave its content out (null or absent), as OpenAI's clients do
    const bool calls_only = message.role == "assistant" && !message.tool_calls.empty();
    if (!calls_only && (!m.contains("content") || null_content))
      fail("{}: field 'content' is {}", where, null_content ? "null (expected a string)" : "missing");
    if (m.contains("tool_call_id") && !m["tool_call_id"].is_null() && message.role != "tool")
      fail("{}: field 'tool_call_id' belongs to role \"tool\" messages", where);
    messages.push_back(std::move(message));
  }
  try {
    check_messages(messages);
  } catch (const Error& e) {
    fail("{}: {}", source_name, e.what());
  }
  return messages;
}

std::vector<std::string> parse_tools(const nlohmann::ordered_json& root, const std::string& source_name) {
  if (!root.is_array())
    fail("{}: expected an array of {{\"type\": \"function\", \"function\": {{...}}}} tools, got {}", source_name,
         root.type_name());
  std::vector<std::string> tools;
  for (size_t i = 0; i < root.size(); ++i) {
    const nlohmann::ordered_json& t = root[i];
    if (!t.is_object() || !t.contains("type") || t["type"] != "function")
      fail("{}: tools[{}]: only {{\"type\": \"function\", \"function\": {{...}}}} tools are supported", source_name, i);
    const auto f = t.find("function");
    if (f == t.end() || !f->is_object()) fail("{}: tools[{}].function: expected an object", source_name, i);
    const auto name = f->find("name");
    if (name == f->end() || !name->is_string() || name->get_ref<const std::string&>().empty())
      fail("{}: tools[{}].function.name: expected a non-empty string", source_name, i);
    const auto parameters = f->find("parameters");
    if (parameters != f->end() && !parameters->is_object() && !parameters->is_null())
      fail("{}: tools[{}].function.parameters: expected a JSON Schema object, got {}", source_name, i,
           parameters->type_name());
    tools.push_back(python_json(t));
  }
  return tools;
}

std::vector<std::string> parse_tools_json(const std::string& json_text, const std::string& source_name) {
  nlohmann::ordered_json root;
  try {
    root = nlohmann::ordered_json::parse(depth_checked(json_text, source_name));
  } catch (const nlohmann::ordered_json::parse_error& e) {
    fail("{}: not valid JSON: {}", source_name, e.what());
  }
  return parse_tools(root, source_name);
}

bool is_qwen3_chat_template(std::string_view template_text) {
  return fnv1a(template_text) == kQwen3TemplateFnv1a && template_text.size() == 4116;
}

}  // namespace specpress::tok
