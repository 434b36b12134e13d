// stop_signals.h — Ctrl-C for long jobs (training, bench): while a StopSignals lives, the first SIGINT or SIGTERM is
// only recorded, so that the job stops at its next safe point (after a step, after a sample) with what it made saved;
// a second signal ends the process at once by that signal (removing the temporary file of an io::write_file_atomic in
// flight, so that none is left beside its output). The handlers found before come back after.
// A signal the process ignored when the object was made (SIGINT in a job started with `&` by a script) stays ignored.
#pragma once

#include <signal.h>

#include <string>

namespace specpress::tools {

class StopSignals {
 public:
  // `when`: where the job stops, said on stderr when the first signal comes (so that nobody presses Ctrl-C again to
  // be heard), e.g. "after the step in flight, with a checkpoint written". It must outlive the object (a literal).
  // One at a time: the jobs that hold one (a trainer's generations, then its steps; a bench) do not nest.
  explicit StopSignals(const char* when);
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // The signal received since construction (SIGINT or SIGTERM), or 0.
  int received() const;
  // "SIGINT", "SIGTERM" or "a signal" for `signal`.
  static std::string name(int signal);

 private:
  struct sigaction old_int_ {}, old_term_ {};
};

}  // namespace specpress::tools
