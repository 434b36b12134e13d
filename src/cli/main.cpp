// main.cpp — the specpress binary: one CLI11 app with a subcommand per tool. llama.cpp's short
// spellings that CLI11 cannot declare (-md, -sys) are rewritten to their long forms first; every numeric flag is read
// strictly (numeric_flags.h). A failed write to standard output fails the run.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <c10/util/Exception.h>

#include "cli/cmd_bench.h"
#include "cli/cmd_dump.h"
#include "cli/cmd_perplexity.h"
#include "cli/cmd_tokenize.h"
#include "cli/cmd_generate.h"
#include "cli/cmd_serve.h"
#include "cli/cmd_train.h"
#include "cli/numeric_flags.h"
#include "core/error.h"
#include "tools/build_info.h"

namespace {
// Output that did not reach standard output (a full disk, a closed descriptor) is an error, not a success.
bool stdout_failed() {
  errno = 0;
  if (std::fflush(stdout) == 0 && !std::ferror(stdout)) return false;
  std::fprintf(stderr, "error: writing to standard output failed (%s)\n",
               errno != 0 ? std::strerror(errno) : "a write error");
  return true;
}
}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  for (auto& a : args) {
    if (a == "-md") a = "--model-draft";
    if (a == "-sys") a = "--system";
  }
  std::vector<char*> argv2;
  for (auto& a : args) argv2.push_back(a.data());

  CLI::App app{"specpress — DFlash speculative decoding and accepted-span compression for Qwen3"};
  app.require_subcommand(1);
  app.set_version_flag("--version", [] { return specpress::tools::build_line(); },
                       "print the version, source commit and LibTorch (and CUDA) versions, and exit");
  std::function<int()> run;
  specpress::cli::add_generate_command(app, run);
  specpress::cli::add_dump_command(app, run);
  specpress::cli::add_perplexity_command(app, run);
  specpress::cli::add_tokenize_commands(app, run);
  specpress::cli::add_bench_commands(app, run);
  specpress::cli::add_train_commands(app, run);
  specpress::cli::add_serve_command(app, run);
  specpress::cli::check_numeric_flags(app);  // base 10, no empty values, no saturation (numeric_flags.h)
  try {
    app.parse(static_cast<int>(argv2.size()), argv2.data());
  } catch (const CLI::ParseError& e) {
    // --help and --version print to standard output and exit 0; a command line CLI11 refuses exits 1, as a value the
    // command refuses does (not CLI11's own codes, 105 to 115)
    const int rc = app.exit(e);
    return rc == 0 && !stdout_failed() ? 0 : 1;
  }
  try {
    const int rc = run ? run() : 1;
    return stdout_failed() ? 1 : rc;
  } catch (const specpress::Interrupted& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 128 + e.signal;
  } catch (const specpress::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const c10::Error& e) {  // LibTorch's own: its message without the C++ stack trace
    std::fprintf(stderr, "error: %s\n", e.what_without_backtrace());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
