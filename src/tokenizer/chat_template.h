// chat_template.h — the Qwen3 chat template, hand-written instead of a Jinja engine.
// render_qwen3_chat() produces byte-for-byte what HF apply_chat_template renders with Qwen3's
// chat_template.jinja for text conversations (system/user/assistant turns, earlier assistant
// thinking stripped, reasoning_content, add_generation_prompt, enable_thinking) and for tool use
// (the tools' system block, assistant tool_calls, role "tool" results wrapped in <tool_response>).
// Non-text content is rejected with a specpress::Error instead of being rendered approximately.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace specpress::tok {

// An assistant's tool call, as the template writes it:
// <tool_call>\n{"name": "NAME", "arguments": ARGUMENTS}\n</tool_call>
struct ToolCallText {
  std::string name;
  std::string arguments;  // JSON text: a string argument as given, an object as python_json() writes it
};

struct ChatMessage {
  std::string role;     // "system", "user", "assistant" or "tool" (a tool's result)
  std::string content;
  // Assistant only: the thinking text, as the template's message.reasoning_content. When absent,
  // the template takes it from a "<think>…</think>" block inside content. (The default initializers
  // keep {role, content} aggregate initialization free of -Wmissing-field-initializers.)
  std::optional<std::string> reasoning_content = std::nullopt;
  std::vector<ToolCallText> tool_calls = {};  // assistant only
};

// enable_thinking=true renders as if the flag were not passed (the template's default);
// enable_thinking=false appends the empty think block after the generation prompt, which is what
// DFlash drafting wants. `tools`: each tool's JSON as the template's tojson writes it
// (python_json(), e.g. {"type": "function", "function": {"name": ...}}); none: no tools block.
std::string render_qwen3_chat(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                              bool enable_thinking, const std::vector<std::string>& tools = {});

// Parses a JSON array of {"role": ..., "content": ...} objects: "reasoning_content" and
// "tool_calls" (OpenAI's [{"type": "function", "function": {"name", "arguments"}}], or
// {"name", "arguments"} items) on assistant messages, whose content may then be null or absent;
// role "tool" with an optional "tool_call_id" (which the template does not show). Errors name
// `source_name`, the message index and the field.
std::vector<ChatMessage> parse_messages_json(const std::string& json_text,
                                             const std::string& source_name);
// The same for an already parsed JSON value (a server's request body field; ordered, so that
// object arguments keep their keys' order in the prompt).
std::vector<ChatMessage> parse_messages(const nlohmann::ordered_json& root,
                                        const std::string& source_name);

// OpenAI's function tools ([{"type": "function", "function": {"name", "description", "parameters"}}])
// as render_qwen3_chat takes them: each checked (a non-empty name, parameters an object) and
// written by python_json in its own key order. Errors name `source_name` and the tool's index.
std::vector<std::string> parse_tools(const nlohmann::ordered_json& root, const std::string& source_name);
std::vector<std::string> parse_tools_json(const std::string& json_text, const std::string& source_name);

// True when `template_text` is exactly the Qwen3 chat_template.jinja this renderer reproduces
// (compared by a 64-bit FNV-1a fingerprint of its bytes).
bool is_qwen3_chat_template(std::string_view template_text);

}  // namespace specpress::tok
