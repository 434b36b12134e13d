// error.h — the one exception type specpress throws for bad input or failed invariants.
// Messages name the file, field or flag and what was expected, so the CLI can print them as they are.
#pragma once
#include <stdexcept>
#include <string>
#include <utility>

#include <fmt/format.h>

namespace specpress {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// A long job stopped by SIGINT or SIGTERM once it saved what a rerun resumes from: the CLI prints the message and exits
// with 128 + the signal's number, as a shell reports a process the signal ended.
class Interrupted : public Error {
 public:
  Interrupted(int signal, const std::string& what) : Error(what), signal(signal) {}
  int signal;
};

// fail("config.json: field '{}' missing", name) — throws specpress::Error with a formatted message.
template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace specpress
