// numeric_flags.h — one strict reading of every numeric flag of the specpress binary. CLI11 2.1 reads an empty value
// (an unset shell variable: `-n "$N"`) as 0, saturates an integer past the 64-bit range (`-n 99999999999999999999`
// became 9223372036854775807), and reads integers in C's bases (`-n 010` was 8, `-n 0x10` 16). llama.cpp reads its
// numbers in base 10 (std::stoi); specpress does too, and refuses anything else, naming the flag.
#pragma once
#include <string>

#include <CLI/CLI.hpp>

namespace specpress::cli {

// The check for one value of a flag of CLI11 type `type` ("INT", "UINT" or "FLOAT"): an empty string when `text` is
// a number of that type (a decimal integer within 64 bits, or a decimal number a double holds without overflow or
// underflow), else the message. Integers
// are rewritten to their plain decimal form (leading zeros and '+' dropped), so that CLI11 cannot read them in
// another base.
std::string check_numeric_text(const std::string& type, std::string& text);

// Adds that check to every option of `app` and its subcommands (all levels) whose CLI11 type is INT, UINT or FLOAT
// (with or without validators already). Call once, after every option is declared.
void check_numeric_flags(CLI::App& app);

}  // namespace specpress::cli
