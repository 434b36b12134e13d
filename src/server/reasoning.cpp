// reasoning.cpp — see reasoning.h. A small state machine over the held text: the reply's start (whitespace, then
// "<think>" or not), the reasoning's start (whitespace dropped), the reasoning (up to "</think>"; trailing whitespace
// and a possible partial tag held), the answer's start (whitespace dropped), the answer.
#include "server/reasoning.h"

#include "core/error.h"
#include "server/stop_strings.h"

namespace specpress::server {
namespace {

constexpr std::string_view kOpen = "<think>", kClose = "</think>", kSpace = " \t\r\n";

bool is_space(char c) { return kSpace.find(c) != std::string_view::npos; }

std::string_view rstrip(std::string_view s) {
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

}  // namespace

ReasoningFormat parse_reasoning_format(const std::string& value, const std::string& what) {
  if (value == "none") return ReasoningFormat::kNone;
  if (value == "deepseek" || value == "auto") return ReasoningFormat::kDeepseek;
  if (value == "deepseek-legacy") return ReasoningFormat::kDeepseekLegacy;
  // at most 40 bytes of the value: a request's field may be of any length
  fail("{}: expected none, deepseek, deepseek-legacy or auto, got '{}'", what,
       value.size() <= 40 ? value : value.substr(0, 37) + "...");
}

const char* reasoning_format_name(ReasoningFormat format) {
  switch (format) {
    case ReasoningFormat::kNone: return "none";
    case ReasoningFormat::kDeepseek: return "deepseek";
    case ReasoningFormat::kDeepseekLegacy: return "deepseek-legacy";
  }
  return "?";
}

ReplyParts ReasoningSplit::push(std::string_view text) {
  ReplyParts out;
  if (format_ != ReasoningFormat::kDeepseek) out.content = text;  // none and legacy: content is the reply as it is
  if (format_ == ReasoningFormat::kNone) return out;
  held_.append(text);
  advance(out, /*end=*/false);
  return out;
}

ReplyParts ReasoningSplit::flush() {
  ReplyParts out;
  if (format_ != ReasoningFormat::kNone) advance(out, /*end=*/true);
  return out;
}

void ReasoningSplit::advance(ReplyParts& out, bool end) {
  const bool legacy = format_ == ReasoningFormat::kDeepseekLegacy;  // its content went out with each push
  for (;;) {
    switch (state_) {
      case State::kStart: {
        const size_t first = held_.find_first_not_of(kSpace);
        if (first == std::string::npos && !end) return;  // only whitespace so far
        const std::string_view rest =
            first == std::string::npos ? std::string_view() : std::string_view(held_).substr(first);
        if (rest.starts_with(kOpen)) {
          held_.erase(0, first + kOpen.size());
          state_ = State::kThinkingStart;
        } else if (!end && kOpen.starts_with(rest)) {
          return;  // "<thi": maybe the tag
        } else {
          state_ = State::kAnswer;  // no think block: the reply, leading whitespace and all, is the answer
        }
        continue;
      }
      case State::kThinkingStart:
      case State::kAnswerStart: {
        const size_t first = held_.find_first_not_of(kSpace);
        held_.erase(0, first == std::string::npos ? held_.size() : first);
        if (held_.empty() && !end) return;
        state_ = state_ == State::kThinkingStart ? State::kThinking : State::kAnswer;
        continue;
      }
      case State::kThinking: {
        const size_t close = held_.find(kClose);
        if (close != std::string::npos) {
          out.reasoning += rstrip(std::string_view(held_).substr(0, close));
          held_.erase(0, close + kClose.size());
          state_ = State::kAnswerStart;
          continue;
        }
        if (end) {  // cut off while thinking: all of it is reasoning
          out.reasoning += rstrip(held_);
          held_.clear();
          return;
        }
        // Hold back what may begin "</think>" and the whitespace before it (dropped if the tag follows).
        size_t cut = held_.size() - partial_match_at_end(held_, kClose);
        while (cut > 0 && is_space(held_[cut - 1])) --cut;
        out.reasoning.append(held_, 0, cut);
        held_.erase(0, cut);
        return;
      }
      case State::kAnswer:
        if (!legacy) out.content += held_;
        held_.clear();
        return;
    }
  }
}

}  // namespace specpress::server
