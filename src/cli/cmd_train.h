// cmd_train.h — `specpress train-lm` (a small Qwen3 target from scratch) and `specpress train-draft`
// (a DFlash draft for a frozen Qwen3 target); see src/train/.
#pragma once
#include <functional>

#include <CLI/CLI.hpp>

namespace specpress::cli {

// Registers both subcommands; `run` is set to the function main calls when one was chosen.
void add_train_commands(CLI::App& app, std::function<int()>& run);

}  // namespace specpress::cli
