// cmd_perplexity.h — `specpress perplexity`: the target's perplexity over a text, as llama.cpp's llama-perplexity
// measures it (tools/perplexity.h), to check that a checkpoint loads and computes right (e.g. against HF or
// llama.cpp on wikitext) and to compare dtypes and devices.
#pragma once
#include <functional>

#include <CLI/CLI.hpp>

namespace specpress::cli {

void add_perplexity_command(CLI::App& app, std::function<int()>& run);

}  // namespace specpress::cli
