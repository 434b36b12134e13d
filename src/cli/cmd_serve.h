// cmd_serve.h — `specpress serve`: the OpenAI-compatible HTTP server (server/http_server.h).
#pragma once
#include <functional>

#include <CLI/CLI.hpp>

namespace specpress::cli {

void add_serve_command(CLI::App& app, std::function<int()>& run);

}  // namespace specpress::cli
