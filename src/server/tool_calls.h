// tool_calls.h — the tool calls in a chat reply, taken out of its text as vLLM's hermes parser and llama-server do
// for Qwen3: each "<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>" block the model writes becomes an
// OpenAI tool call (its arguments as JSON text, written as the chat template writes them back, python_json), and the
// text outside the blocks stays the content (the whitespace between calls and after the last is dropped). A block
// whose body is not a JSON object with a string "name" (and "arguments", an object, when present), or one the reply
// ends inside, stays in the content as written, whitespace before it included, so no output is lost. The split is
// the same however the text is pushed: a piece that may begin "<tool_call>" and the whitespace after a call are held
// until their part is known.
#pragma once
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace specpress::server {

struct ToolCall {
  std::string id;         // "call_" and 24 random letters and digits, as OpenAI's
  std::string name;
  std::string arguments;  // JSON text of an object ("{}" when the model wrote none)
};

struct ToolCallParts {
  std::string content;
  std::vector<ToolCall> calls;
};

class ToolCallSplit {
 public:
  ToolCallSplit() : rng_(std::random_device{}()) {}
  // Adds answer text; returns what is now final.
  ToolCallParts push(std::string_view text);
  // End of the reply: what was held back (a block left open is content).
  ToolCallParts flush();

 private:
  void advance(ToolCallParts& out, bool end);
  std::string new_id();

  std::string held_;          // text whose part is not known yet
  bool in_block_ = false;     // held_ is a block's body, after "<tool_call>"
  size_t searched_ = 0;       // in a block: how much of held_ has been searched for "</tool_call>"
  bool after_block_ = false;  // a call has been taken: whitespace after it is dropped before another one
  std::string space_before_;  // in a block right after a call: the whitespace between them (content if no call)
  std::mt19937_64 rng_;
};

}  // namespace specpress::server
