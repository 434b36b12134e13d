// cmd_bench.h — `specpress bench` (speedup, tau, acceptance histogram per dataset) and
// `specpress diagnose` (draft-vs-target analysis with a JSON and a self-contained HTML report).
#pragma once
#include <functional>

#include <CLI/CLI.hpp>

namespace specpress::cli {

void add_bench_commands(CLI::App& app, std::function<int()>& run);

}  // namespace specpress::cli
