// cmd_dump.h — `specpress dump`: run one target forward and save logits (and hidden states) as
// safetensors, for numeric comparisons against other implementations (HF transformers, PyTorch).
#pragma once
#include <functional>

#include <CLI/CLI.hpp>

namespace specpress::cli {

void add_dump_command(CLI::App& app, std::function<int()>& run);

}  // namespace specpress::cli
