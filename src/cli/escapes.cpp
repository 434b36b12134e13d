// escapes.cpp — see escapes.h.
#include "cli/escapes.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

namespace specpress::cli {
namespace {
int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}
}  // namespace

std::string process_escapes(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\\' || i + 1 == text.size()) {
      out += text[i];
      continue;
    }
    const char next = text[i + 1];
    char plain = 0;
    switch (next) {
      case 'n': plain = '\n'; break;
      case 'r': plain = '\r'; break;
      case 't': plain = '\t'; break;
      case '\'': case '"': case '\\': plain = next; break;
      default: break;
    }
    if (plain != 0) {
      out += plain;
      ++i;
    } else if (next == 'x' && i + 3 < text.size() && hex_digit(text[i + 2]) >= 0 && hex_digit(text[i + 3]) >= 0) {
      out += static_cast<char>(hex_digit(text[i + 2]) * 16 + hex_digit(text[i + 3]));
      i += 3;
    } else {
      out += '\\';  // not an escape: kept as typed, the next character read on its own
    }
  }
  return out;
}

std::string typed_text_origin(const std::string& flag, bool escapes_changed_it) {
  return escapes_changed_it ? flag + " (its escapes processed; --no-escape keeps them)" : flag;
}

void add_escape_flag(CLI::App& cmd, bool& escape, const std::string& which) {
  cmd.add_flag("-e,--escape,!--no-escape", escape,
               fmt::format("process the escapes \\n \\r \\t \\' \\\" \\\\ \\xHH in {} (the default, as llama.cpp's; "
                           "--no-escape keeps them as typed)", which));
}

}  // namespace specpress::cli
