// chat_template.cpp — a direct transcription of Qwen3's chat_template.jinja control flow for text
// messages. Jinja/Python string operations are spelled out (split()[0]/[-1], strip('\n')) so that
// edge cases such as several <think> blocks or missing newlines render exactly as in HF.
#include "tokenizer/chat_template.h"

#include <cstdint>

#include <nlohmann/json.hpp>

#include "core/error.h"

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
    if (m.role == "tool") {
      fail("chat template: messages[{}] has role \"tool\"; tool calls and tool results are not "
           "supported", i);
    }
    if (m.role != "system" && m.role != "user" && m.role != "assistant") {
      fail("chat template: messages[{}] has role \"{}\"; expected \"system\", \"user\" or "
           "\"assistant\"", i, m.role);
    }
    if (m.reasoning_content && m.role != "assistant") {
      fail("chat template: messages[{}] ({}) has reasoning_content; only assistant messages may",
           i, m.role);
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
  out += "<|im_end|>\n";
}

}  // namespace

std::string render_qwen3_chat(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                              bool enable_thinking) {
  check_messages(messages);
  std::string out;
  if (messages[0].role == "system") {
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
  using json = nlohmann::json;
  json root;
  try {
    root = json::parse(json_text);
  } catch (const json::parse_error& e) {
    fail("{}: not valid JSON: {}", source_name, e.what());
  }
  return parse_messages(root, source_name);
}

std::vector<ChatMessage> parse_messages(const nlohmann::json& root, const std::string& source_name) {
  using json = nlohmann::json;
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
    for (const auto& [key, value] : m.items()) {
      if (key == "role" || key == "content") {
        if (!value.is_string()) {
          fail("{}: field '{}' must be a string (got {}); structured or multimodal content is not "
               "supported", where, key, value.type_name());
        }
        (key == "role" ? message.role : message.content) = value.get<std::string>();
      } else if (key == "reasoning_content") {
        if (value.is_null()) continue;
        if (!value.is_string()) fail("{}: field 'reasoning_content' must be a string or null", where);
        message.reasoning_content = value.get<std::string>();
      } else if (key == "tool_calls" || key == "tools") {
        fail("{}: field '{}': tool calling is not supported", where, key);
      } else {
        fail("{}: unknown field '{}' (expected \"role\", \"content\" and optionally "
             "\"reasoning_content\")", where, key);
      }
    }
    if (!m.contains("role")) fail("{}: field 'role' is missing", where);
    if (!m.contains("content")) fail("{}: field 'content' is missing", where);
    messages.push_back(std::move(message));
  }
  try {
    check_messages(messages);
  } catch (const Error& e) {
    fail("{}: {}", source_name, e.what());
  }
  return messages;
}

bool is_qwen3_chat_template(std::string_view template_text) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : template_text) h = (h ^ c) * 0x100000001b3ull;
  return h == kQwen3TemplateFnv1a && template_text.size() == 4116;
}

}  // namespace specpress::tok
