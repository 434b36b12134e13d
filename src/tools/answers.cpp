// answers.cpp — see answers.h.
#include "tools/answers.h"

#include <cctype>
#include <cstdlib>
#include <vector>

namespace specpress::tools {

std::optional<std::string> last_boxed(const std::string& text) {
  size_t best = std::string::npos, best_len = 0;
  for (const char* tag : {"\\boxed{", "\\fbox{"}) {
    size_t pos = text.rfind(tag);
    if (pos != std::string::npos && (best == std::string::npos || pos > best)) {
      best = pos;
      best_len = std::char_traits<char>::length(tag);
    }
  }
  if (best == std::string::npos) return std::nullopt;
  int depth = 1;
  size_t start = best + best_len;
  for (size_t i = start; i < text.size(); ++i) {
    if (text[i] == '{') ++depth;
    if (text[i] == '}' && --depth == 0) return text.substr(start, i - start);
  }
  return std::nullopt;  // unbalanced: the output was cut off inside the box
}

std::string normalize_answer(const std::string& answer) {
  std::string s;
  for (char c : answer)
    if (!std::isspace(static_cast<unsigned char>(c)) && c != '$') s.push_back(c);
  for (const std::string& drop : {std::string("\\left"), std::string("\\right"), std::string("\\!"),
                                  std::string("\\,"), std::string("\\text{}"), std::string("^\\circ"),
                                  std::string("\\%"), std::string("dfrac")}) {
    const std::string repl = drop == "dfrac" ? "frac" : "";
    for (size_t p = s.find(drop); p != std::string::npos; p = s.find(drop, p + repl.size())) s.replace(p, drop.size(), repl);
  }
  while (!s.empty() && s.back() == '.') s.pop_back();
  // Plain numbers: drop thousands separators and compare by value.
  std::string digits;
  for (char c : s)
    if (c != ',') digits.push_back(c);
  char* end = nullptr;
  double v = std::strtod(digits.c_str(), &end);
  if (!digits.empty() && end == digits.c_str() + digits.size()) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.10g", v);
    return buf;
  }
  return s;
}

bool answers_match(const std::string& a, const std::string& b) { return normalize_answer(a) == normalize_answer(b); }

}  // namespace specpress::tools
