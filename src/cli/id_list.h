// id_list.h — token-id list flags ("1,2,3", "1 2 3" or "[1, 2, 3]") and the empty-value check, shared by every
// subcommand; torch-free so the tokenizer CLI builds without LibTorch.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace specpress::cli {

// Errors name the flag and the bad item (as a `what`: "token id", "layer index"); an empty or blank text gives an
// empty list.
std::vector<int64_t> parse_id_list(const std::string& text, const std::string& flag,
                                   const std::string& what = "token id");

// Refuses an empty value (an unset shell variable, say), saying `why` it matters.
CLI::Validator non_empty_check(const std::string& why);

}  // namespace specpress::cli
