// escapes.h — the escape sequences of text typed on the command line (-p, and generate's --system and --stop),
// processed by default as llama.cpp's tools process -p, so that `-p 'Q:\nA:'` means two lines without bash's $'...'
// quoting: \n \r \t \' \" \\ and \xHH (two hex digits, one byte). Any other backslash, a \x without two hex digits and
// a trailing backslash stay as typed. Unlike llama.cpp, files (-f) are never processed (their bytes are the prompt),
// and --system is (llama.cpp leaves its -sys as typed).
#pragma once

#include <string>
#include <string_view>

namespace CLI {
class App;
}

namespace specpress::cli {

std::string process_escapes(std::string_view text);
// How an error names typed text that came from `flag`: with the escapes noted where processing them changed it.
std::string typed_text_origin(const std::string& flag, bool escapes_changed_it);

// -e/--escape (the default) and --no-escape into `escape`: whether the escapes of `which` (the flags of typed text,
// e.g. "-p, --system and --stop") are processed.
void add_escape_flag(CLI::App& cmd, bool& escape, const std::string& which);

}  // namespace specpress::cli
