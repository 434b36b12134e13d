// id_list.cpp — see id_list.h.
#include "cli/id_list.h"

#include <array>
#include <cstdio>
#include <sstream>

#include <fmt/format.h>

#include "core/error.h"
#include "io/mapped_file.h"

namespace specpress::cli {

std::string read_input(const std::string& path, const std::string& flag, bool stdin_dash) {
  if (stdin_dash && path == "-") {
    std::string text;
    std::array<char, 1 << 16> chunk;
    for (size_t n; (n = std::fread(chunk.data(), 1, chunk.size(), stdin)) > 0;) text.append(chunk.data(), n);
    if (std::ferror(stdin)) fail("{}: -: read error on standard input", flag);
    return text;
  }
  try {
    return io::read_text_file(path);
  } catch (const Error& e) {
    fail("{}: {}", flag, e.what());
  }
}

std::vector<int64_t> parse_id_list(const std::string& text, const std::string& flag, const std::string& what) {
  std::string body = text.rfind("\xEF\xBB\xBF", 0) == 0 ? text.substr(3) : text;  // a UTF-8 BOM (Notepad's files)
  const size_t first = body.find_first_not_of(" \t\r\n");
  const size_t last = body.find_last_not_of(" \t\r\n");
  body = first == std::string::npos ? "" : body.substr(first, last - first + 1);
  if (!body.empty() && body.front() == '[') {
    if (body.back() != ']') fail("{}: '[' without a closing ']'", flag);
    body = body.substr(1, body.size() - 2);
  }
  // Commas separate items; an empty item between two commas is an error, not skipped.
  std::vector<std::string> items;
  std::string current;
  bool any_comma = false;
  for (char c : body) {
    if (c == ',') {
      any_comma = true;
      items.push_back(current);
      current.clear();
    } else {
      current.push_back(c);
    }
  }
  items.push_back(current);
  std::vector<int64_t> ids;
  for (const std::string& raw : items) {
    std::istringstream words(raw);
    std::string item;
    bool empty = true;
    while (words >> item) {
      empty = false;
      size_t used = 0;
      long long value = 0;
      try {
        value = std::stoll(item, &used, 10);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != item.size())
        fail("{}: item {} ('{}') is not a {} (expected integers like \"1,2,3\")", flag, ids.size() + 1, item, what);
      ids.push_back(value);
    }
    if (empty && any_comma)  // after item ids.size(): a ",," or a trailing comma (the text itself may be huge)
      fail("{}: item {} is empty{} (expected integers like \"1,2,3\")", flag, ids.size() + 1,
           ids.empty() ? std::string(" (before the first id)") : fmt::format(" (after {})", ids.back()));
  }
  return ids;
}

CLI::Validator non_empty_check(const std::string& why) {
  return CLI::Validator(
      [why](std::string& text) -> std::string { return text.empty() ? "empty value (" + why + ")" : ""; }, "");
}

}  // namespace specpress::cli
