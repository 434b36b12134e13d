// tool_calls.cpp — see tool_calls.h. Outside a block the held text is at most a partial "<tool_call>" (or, after a
// block, whitespace and such a partial); inside one it is the block's body until "</tool_call>".
#include "server/tool_calls.h"

#include <nlohmann/json.hpp>

#include "server/stop_strings.h"
#include "tokenizer/python_json.h"

namespace specpress::server {
namespace {

constexpr std::string_view kOpen = "<tool_call>", kClose = "</tool_call>", kSpace = " \t\r\n";

// The call a block's body describes, or false when it describes none.
bool parse_call(std::string_view body, ToolCall& call) {
  const nlohmann::ordered_json j = nlohmann::ordered_json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string() ||
      j["name"].get_ref<const std::string&>().empty())
    return false;
  const auto arguments = j.find("arguments");
  if (arguments != j.end() && !arguments->is_object() && !arguments->is_null()) return false;
  call.name = j["name"].get<std::string>();
  call.arguments = arguments == j.end() || arguments->is_null() ? "{}" : tok::python_json(*arguments);
  return true;
}

}  // namespace

std::string ToolCallSplit::new_id() {
  static constexpr char kChars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kChars[rng_() % (sizeof(kChars) - 1)];
  return id;
}

ToolCallParts ToolCallSplit::push(std::string_view text) {
  ToolCallParts out;
  held_.append(text);
  advance(out, /*end=*/false);
  return out;
}

ToolCallParts ToolCallSplit::flush() {
  ToolCallParts out;
  advance(out, /*end=*/true);
  return out;
}

void ToolCallSplit::advance(ToolCallParts& out, bool end) {
  for (;;) {
    if (in_block_) {
      // "</tool_call>" may only end in the text since the last look
      const size_t from = searched_ < kClose.size() ? 0 : searched_ - (kClose.size() - 1);
      const size_t close = held_.find(kClose, from);
      if (close == std::string::npos) {
        searched_ = held_.size();
        if (end) {  // cut off: as written
          out.content += space_before_ + std::string(kOpen) + held_;
          held_.clear(), space_before_.clear(), in_block_ = false;
        }
        return;
      }
      ToolCall call;
      const std::string_view body = std::string_view(held_).substr(0, close);
      if (parse_call(body, call)) {
        call.id = new_id();
        out.calls.push_back(std::move(call));
        after_block_ = true;
      } else {  // no call: the block, and the whitespace held before it, as written
        out.content += space_before_ + std::string(kOpen) + std::string(body) + std::string(kClose);
        after_block_ = false;
      }
      space_before_.clear();
      held_.erase(0, close + kClose.size());
      in_block_ = false;
      continue;
    }
    // after a call, whitespace goes unless text other than another call follows it
    const size_t first = after_block_ ? held_.find_first_not_of(kSpace) : 0;
    if (first == std::string::npos) {
      if (end) held_.clear();
      return;
    }
    const size_t open = held_.find(kOpen, first);
    if (open != std::string::npos) {
      if (open > first) out.content += held_.substr(0, open);  // text before it (after a call: and its whitespace)
      else space_before_ = held_.substr(0, open);  // only whitespace since a call: kept if this block is none
      held_.erase(0, open + kOpen.size());
      in_block_ = true, searched_ = 0;
      continue;
    }
    // no block starts yet: all but a partial "<tool_call>" at the end is content
    const size_t keep = end ? 0 : partial_match_at_end(std::string_view(held_).substr(first), kOpen);
    if (held_.size() - keep == first) return;  // only whitespace after a call, then maybe the tag
    out.content += held_.substr(0, held_.size() - keep);
    held_.erase(0, held_.size() - keep);
    after_block_ = false;
    return;
  }
}

}  // namespace specpress::server
