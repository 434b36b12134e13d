// answers.h — final-answer extraction for --check-answers: the content of the last \boxed{...} (or
// \fbox{...}) with nested braces, normalised for comparison (spaces, $, \left/\right, trailing period;
// numbers compared numerically, thousands separators dropped).
#pragma once
#include <optional>
#include <string>

namespace specpress::tools {

std::optional<std::string> last_boxed(const std::string& text);
std::string normalize_answer(const std::string& answer);
bool answers_match(const std::string& a, const std::string& b);

}  // namespace specpress::tools
