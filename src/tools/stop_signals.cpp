// stop_signals.cpp — see stop_signals.h.
#include "tools/stop_signals.h"

#include <csignal>

namespace specpress::tools {
namespace {
volatile std::sig_atomic_t g_stop_signal = 0;

extern "C" void on_job_stop_signal(int sig) {
  g_stop_signal = sig;
  std::signal(SIGINT, SIG_DFL);  // a second signal ends the process at once
  std::signal(SIGTERM, SIG_DFL);
}
}  // namespace

StopSignals::StopSignals() {
  g_stop_signal = 0;
  struct sigaction action {};
  action.sa_handler = on_job_stop_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, &old_int_);
  sigaction(SIGTERM, &action, &old_term_);
}

StopSignals::~StopSignals() {
  sigaction(SIGINT, &old_int_, nullptr);
  sigaction(SIGTERM, &old_term_, nullptr);
}

int StopSignals::received() const { return g_stop_signal; }

std::string StopSignals::name(int signal) {
  return signal == SIGINT ? "SIGINT" : signal == SIGTERM ? "SIGTERM" : "a signal";
}

}  // namespace specpress::tools
