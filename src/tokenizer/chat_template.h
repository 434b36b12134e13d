// chat_template.h — the Qwen3 chat template, hand-written instead of a Jinja engine.
// render_qwen3_chat() produces byte-for-byte what HF apply_chat_template renders with Qwen3's
// chat_template.jinja for text conversations (system/user/assistant turns, earlier assistant
// thinking stripped, reasoning_content, add_generation_prompt, enable_thinking). Shapes the
// template supports but we do not (tools, tool calls, role "tool", non-text content) are rejected
// with a specpress::Error instead of being rendered approximately.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace specpress::tok {

struct ChatMessage {
  std::string role;     // "system", "user" or "assistant"
  std::string content;
  // Assistant only: the thinking text, as the template's message.reasoning_content. When absent,
  // the template takes it from a "<think>…</think>" block inside content. (The default initializer
  // keeps {role, content} aggregate initialization free of -Wmissing-field-initializers.)
  std::optional<std::string> reasoning_content = std::nullopt;
};

// enable_thinking=true renders as if the flag were not passed (the template's default);
// enable_thinking=false appends the empty think block after the generation prompt, which is what
// DFlash drafting wants.
std::string render_qwen3_chat(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                              bool enable_thinking);

// Parses a JSON array of {"role": ..., "content": ...} objects (optionally "reasoning_content" on
// assistant messages). Errors name `source_name`, the message index and the field.
std::vector<ChatMessage> parse_messages_json(const std::string& json_text,
                                             const std::string& source_name);
// The same for an already parsed JSON value (a server's request body field).
std::vector<ChatMessage> parse_messages(const nlohmann::json& root, const std::string& source_name);

// True when `template_text` is exactly the Qwen3 chat_template.jinja this renderer reproduces
// (compared by a 64-bit FNV-1a fingerprint of its bytes).
bool is_qwen3_chat_template(std::string_view template_text);

}  // namespace specpress::tok
