// cmd_generate.h — `specpress generate`: plain or DFlash speculative generation from ids or text.
#pragma once
#include <CLI/CLI.hpp>

namespace specpress::cli {

// Registers the subcommand; `run` is set to the function main calls when it was chosen.
void add_generate_command(CLI::App& app, std::function<int()>& run);

}  // namespace specpress::cli
