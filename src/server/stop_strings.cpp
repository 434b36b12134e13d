// stop_strings.cpp — see stop_strings.h. held_ never contains a whole stop string (it would have ended the
// output), so a stop string completed by new text starts inside held_ + text: searching that is enough.
#include "server/stop_strings.h"

#include <algorithm>

namespace specpress::server {

size_t partial_match_at_end(std::string_view text, std::string_view word) {
  for (size_t n = std::min(word.empty() ? 0 : word.size() - 1, text.size()); n > 0; --n)
    if (text.substr(text.size() - n) == word.substr(0, n)) return n;
  return 0;
}

std::string StopStrings::push(std::string_view text) {
  if (stopped_) return {};
  held_.append(text);
  // The stop string that completes first (smallest end; at the same end, the earliest start), as token-by-token
  // decoding would meet it: the output does not depend on how many tokens a DFlash block commits at once.
  size_t first = std::string::npos, first_end = std::string::npos;
  for (const std::string& stop : stops_) {
    const size_t at = held_.find(stop);
    if (at == std::string::npos) continue;
    const size_t end = at + stop.size();
    if (end < first_end || (end == first_end && at < first)) {
      first = at, first_end = end;
      stopping_word_ = stop;
    }
  }
  if (first != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, first);
    held_.clear();
    return out;
  }
  // Hold back the longest tail of held_ that is a proper prefix of some stop string.
  size_t keep = 0;
  for (const std::string& stop : stops_) keep = std::max(keep, partial_match_at_end(held_, stop));
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopStrings::flush() {
  std::string out;
  out.swap(held_);
  return out;
}

}  // namespace specpress::server
