// id_list.h — token-id list flags ("1,2,3", "1 2 3" or "[1, 2, 3]"), a flag's input file (or standard input) and the
// empty-value check, shared by every subcommand; torch-free so the tokenizer CLI builds without LibTorch.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace specpress::cli {

// Errors name the flag and the bad item (as a `what`: "token id", "layer index"); an empty or blank text gives an
// empty list; a leading UTF-8 byte-order mark is skipped.
std::vector<int64_t> parse_id_list(const std::string& text, const std::string& flag,
                                   const std::string& what = "token id");

// A file's bytes, or, with `stdin_dash`, standard input's for "-" (llama-tokenize's --stdin); errors name `flag`.
std::string read_input(const std::string& path, const std::string& flag, bool stdin_dash = false);

// Refuses an empty value (an unset shell variable, say), saying `why` it matters.
CLI::Validator non_empty_check(const std::string& why);

}  // namespace specpress::cli
