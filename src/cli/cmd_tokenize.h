// cmd_tokenize.h — `specpress tokenize` and `specpress detokenize`: text, files or chat messages to
// token ids (a JSON array on stdout) and ids back to text, with the model directory's tokenizer.
#pragma once
#include <functional>

#include <CLI/CLI.hpp>

namespace specpress::cli {

// Registers both subcommands; `run` is set to the function main calls when one was chosen.
void add_tokenize_commands(CLI::App& app, std::function<int()>& run);

}  // namespace specpress::cli
