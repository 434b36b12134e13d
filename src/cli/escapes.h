// escapes.h — the escape sequences of text typed on the command line (-p, --system, --stop), processed as llama.cpp's
// tools do by default, so that `-p 'Q:\nA:'` means two lines without bash's $'...' quoting: \n \r \t \' \" \\ and \xHH
// (two hex digits, one byte). Any other backslash, a \x without two hex digits and a trailing backslash stay as typed.
// Files (-f) are never processed: their bytes are the prompt.
#pragma once

#include <string>
#include <string_view>

#include <CLI/CLI.hpp>

namespace specpress::cli {

std::string process_escapes(std::string_view text);

// -e/--escape (the default) and --no-escape into `escape`: whether the escapes of `which` (the flags of typed text,
// e.g. "-p, --system and --stop") are processed.
void add_escape_flag(CLI::App& cmd, bool& escape, const std::string& which);

}  // namespace specpress::cli
