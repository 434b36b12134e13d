// env_switch.h — a process-wide on/off switch read once from an environment variable ("0" or "1"; unset or
// empty = the default; anything else fails naming the variable), which tests and benchmarks may override for
// the process. Used by the fast path's SPECPRESS_PIPELINE, SPECPRESS_FOLD_NORMS, SPECPRESS_DRAFT_KV_BATCH and
// SPECPRESS_ARGMAX_SPLIT.
#pragma once
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "core/error.h"

namespace specpress {

class EnvSwitch {
 public:
  EnvSwitch(const char* name, bool default_on) : name_(name), default_on_(default_on) {}
  bool on() {
    const int o = override_.load();
    if (o >= 0) return o == 1;
    std::call_once(read_, [this] { from_env_ = parse(); });
    return from_env_;
  }
  void set(bool on) { override_.store(on ? 1 : 0); }
  // Whether a value was chosen, by set() or in the environment, rather than left to the default.
  bool chosen() const {
    if (override_.load() >= 0) return true;
    const char* v = std::getenv(name_);
    return v != nullptr && *v != '\0';
  }
  // set()'s state (-1: never set, else 0 or 1), to be put back later with restore() (tests, temporary choices).
  int saved() const { return override_.load(); }
  void restore(int state) { override_.store(state < 0 ? -1 : state != 0 ? 1 : 0); }

 private:
  bool parse() const {
    const char* v = std::getenv(name_);
    if (v == nullptr || *v == '\0') return default_on_;
    if (std::strcmp(v, "1") == 0) return true;
    if (std::strcmp(v, "0") == 0) return false;
    fail("{}: expected 0 or 1, found '{}'", name_, v);
  }
  const char* name_;
  bool default_on_;
  std::atomic<int> override_{-1};  // -1: not set
  std::once_flag read_;
  bool from_env_ = false;
};

}  // namespace specpress
