// reasoning.h — a chat reply's thinking split from its answer, as llama-server's --reasoning-format does. Qwen3 in
// thinking mode writes "<think>\n…\n</think>\n\n" before its answer. "deepseek" (and "auto", Qwen3's format) returns
// the text inside as message.reasoning_content (delta.reasoning_content when streamed) and the answer, without the
// block, as content; "deepseek-legacy" leaves content whole, tags included, and adds reasoning_content to a whole
// response (a stream carries only the content: the server sends no reasoning deltas, as llama-server); "none" leaves
// everything in content. Only a think block at the very start of the reply counts (after whitespace); a reply cut off
// inside it is all reasoning. The whitespace around the reasoning and before the answer is dropped. The split is the
// same however the text is pushed: leading whitespace, a piece that may begin "<think>" or "</think>", and the
// reasoning's trailing whitespace are held until their part is known.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "server/tool_calls.h"

namespace specpress::server {

enum class ReasoningFormat { kNone, kDeepseek, kDeepseekLegacy };

// "none", "deepseek", "deepseek-legacy" or "auto" (= deepseek); otherwise an Error naming `what` (flag or field).
ReasoningFormat parse_reasoning_format(const std::string& value, const std::string& what);
const char* reasoning_format_name(ReasoningFormat format);

struct ReplyParts {
  std::string reasoning, content;  // deepseek: no reasoning comes after any content
  std::vector<ToolCall> tool_calls = {};  // chat with tools: the calls taken out of the content (tool_calls.h)
};

class ReasoningSplit {
 public:
  explicit ReasoningSplit(ReasoningFormat format) : format_(format) {}
  // Adds reply text; returns what is now final.
  ReplyParts push(std::string_view text);
  // End of the reply: what was held back.
  ReplyParts flush();

 private:
  enum class State { kStart, kThinkingStart, kThinking, kAnswerStart, kAnswer };
  void advance(ReplyParts& out, bool end);

  ReasoningFormat format_;
  State state_ = State::kStart;
  std::string held_;  // text whose part is not known yet
};

}  // namespace specpress::server
