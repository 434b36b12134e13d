// stop_signals.cpp — see stop_signals.h.
#include "tools/stop_signals.h"

#include <unistd.h>

#include <csignal>
#include <cstring>

#include "io/mapped_file.h"

namespace specpress::tools {
namespace {
volatile std::sig_atomic_t g_stop_signal = 0;
const char* g_stop_when = "";  // set before the handler is installed; read only by it
// Whether the process ignored the signal when the handlers were installed (a job started with `&` from a script, or
// under `nohup`-like wrappers, ignores SIGINT): such a signal stays ignored, then and after the first stop signal.
volatile std::sig_atomic_t g_int_ignored = 0, g_term_ignored = 0;
// Whether the signal's action was the default before (what it goes back to), and whether a StopSignals lives: cleared
// before the destructor restores the actions, so that a signal in between does not put ours back.
volatile std::sig_atomic_t g_int_was_default = 0, g_term_was_default = 0, g_active = 0;

void write_stderr(const char* text) {  // async-signal-safe
  size_t n = std::strlen(text);
  while (n > 0) {
    const ssize_t written = ::write(STDERR_FILENO, text, n);
    if (written <= 0) return;
    text += written;
    n -= static_cast<size_t>(written);
  }
}

// A second signal ends the process at once, as its default action, without the file it was writing half there.
extern "C" void on_second_stop_signal(int sig) {
  io::remove_temporary_file_in_flight();
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

extern "C" void on_job_stop_signal(int sig) {
  if (!g_active) {  // the job has ended and its handlers are being restored: as the action it had before
    if (sig == SIGINT ? g_int_was_default : g_term_was_default) on_second_stop_signal(sig);
    return;
  }
  g_stop_signal = sig;
  if (!g_int_ignored) std::signal(SIGINT, on_second_stop_signal);
  if (!g_term_ignored) std::signal(SIGTERM, on_second_stop_signal);
  write_stderr("\nspecpress: stopping ");
  write_stderr(g_stop_when);
  write_stderr(g_int_ignored ? " (a second SIGTERM ends it at once, losing that)\n"
                             : " (a second Ctrl-C or SIGTERM ends it at once, losing that)\n");
}
}  // namespace

StopSignals::StopSignals(const char* when) {
  g_stop_signal = 0;
  g_stop_when = when;
  struct sigaction action {};
  action.sa_handler = on_job_stop_signal;
  action.sa_flags = SA_RESTART;  // a write to stdout or a read in progress goes on, not failing with EINTR
  sigemptyset(&action.sa_mask);  // the other signal waits for the handler: then it is the second
  sigaddset(&action.sa_mask, SIGINT);
  sigaddset(&action.sa_mask, SIGTERM);
  sigaction(SIGINT, nullptr, &old_int_);
  sigaction(SIGTERM, nullptr, &old_term_);
  const auto is = [](const struct sigaction& a, void (*handler)(int)) {
    return !(a.sa_flags & SA_SIGINFO) && a.sa_handler == handler;
  };
  g_int_ignored = is(old_int_, SIG_IGN);
  g_term_ignored = is(old_term_, SIG_IGN);
  g_int_was_default = is(old_int_, SIG_DFL);
  g_term_was_default = is(old_term_, SIG_DFL);
  g_active = 1;
  if (!g_int_ignored) sigaction(SIGINT, &action, nullptr);
  if (!g_term_ignored) sigaction(SIGTERM, &action, nullptr);
}

StopSignals::~StopSignals() {
  g_active = 0;
  sigaction(SIGINT, &old_int_, nullptr);
  sigaction(SIGTERM, &old_term_, nullptr);
}

int StopSignals::received() const { return g_stop_signal; }

std::string StopSignals::name(int signal) {
  return signal == SIGINT ? "SIGINT" : signal == SIGTERM ? "SIGTERM" : "a signal";
}

}  // namespace specpress::tools
