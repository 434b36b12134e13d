// test_stop_signals.cpp — tools::StopSignals (Ctrl-C for long jobs) with io::write_file_atomic, torch-free, so that a
// forked child is safe: the first signal is recorded, a second ends the process without the temporary file of the
// write in flight, two at once are a first and a second, and a signal the process ignored stays ignored.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "io/mapped_file.h"
#include "io/remove_tree.h"
#include "tools/stop_signals.h"

namespace fs = std::filesystem;
using specpress::tools::StopSignals;

namespace {

void (*disposition(int sig))(int) {
  struct sigaction now {};
  sigaction(sig, nullptr, &now);
  return now.sa_handler;
}

// The scheduler state of process `pid` ('R', 'S', ...), from /proc/PID/stat; 0 where it cannot be read.
char process_state(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() ? stat[paren + 2] : 0;
}

// A signal the process ignored (SIGINT in a job that a script started with `&`) stays ignored while a StopSignals
// lives, also after another signal asked the job to stop, and after it; a signal not ignored is recorded.
TEST(StopSignals, AnIgnoredSignalStaysIgnored) {
  struct sigaction ignore {}, old_int {}, old_term {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  ASSERT_EQ(sigaction(SIGINT, &ignore, &old_int), 0);
  sigaction(SIGTERM, nullptr, &old_term);
  struct Restore {  // the process's actions as they were, however the test ends
    const struct sigaction &int_action, &term_action;
    ~Restore() {
      sigaction(SIGINT, &int_action, nullptr);
      sigaction(SIGTERM, &term_action, nullptr);
    }
  } restore{old_int, old_term};
  {
    StopSignals stop("after the test");
    EXPECT_EQ(disposition(SIGINT), SIG_IGN);
    ASSERT_EQ(raise(SIGINT), 0);
    EXPECT_EQ(stop.received(), 0);
    const auto handler = disposition(SIGTERM);  // the one that records it
    ASSERT_NE(handler, SIG_DFL);
    ASSERT_EQ(raise(SIGTERM), 0);
    EXPECT_EQ(stop.received(), SIGTERM);
    EXPECT_NE(disposition(SIGTERM), handler);  // a second SIGTERM would end the process
    EXPECT_NE(disposition(SIGTERM), SIG_IGN);
    EXPECT_EQ(disposition(SIGINT), SIG_IGN);  // SIGINT is not made fatal by the first stop signal
  }
  EXPECT_EQ(disposition(SIGINT), SIG_IGN);
  EXPECT_EQ(disposition(SIGTERM), old_term.sa_handler);
}

// Both signals come while the job writes a file atomically (held in its open() by a FIFO put where its temporary file
// goes): the first is recorded (the open goes on), the second ends the process by that signal at once, and the
// temporary file of that write is gone.
TEST(StopSignals, ASecondSignalEndsTheJobWithoutTheWritesTemporaryFile) {
  char templ[] = "/tmp/specpress-stop-signals-XXXXXX";
  ASSERT_NE(::mkdtemp(templ), nullptr);
  const fs::path dir = templ, target = dir / "report.json";
  int go[2], err[2];
  ASSERT_EQ(::pipe(go), 0);
  ASSERT_EQ(::pipe(err), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(go[1]);  // so that the read below ends where the test does
    ::close(err[0]);
    ::dup2(err[1], STDERR_FILENO);
    StopSignals stop("after the write");
    char byte = 0;
    if (::read(go[0], &byte, 1) != 1) ::_exit(2);  // the FIFO is in place
    try {
      specpress::io::write_file_atomic(target.string(), "{}\n");  // blocks in opening the FIFO
    } catch (...) {
      ::_exit(3);
    }
    ::_exit(4);
  }
  ::close(go[0]);
  ::close(err[1]);
  struct Cleanup {  // however the test ends: no child left, no descriptor, no directory
    pid_t child;
    int go, err;
    fs::path dir;
    ~Cleanup() {
      if (child > 0) {  // (never kill(-1), which signals every process)
        ::kill(child, SIGKILL);
        ::waitpid(child, nullptr, 0);
      }
      ::close(go);
      ::close(err);
      specpress::io::remove_tree(dir.string());
    }
  } cleanup{child, go[1], err[0], dir};
  const fs::path tmp = specpress::io::temporary_path(target.string(), ".tmp." + std::to_string(child));
  ASSERT_EQ(::mkfifo(tmp.c_str(), 0600), 0);
  ASSERT_EQ(::write(go[1], "g", 1), 1);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  // the child sleeps only in the open of the FIFO, which has no reader
  const auto wait_for_sleep = [&] {
    while (process_state(child) != 'S' && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    return process_state(child) == 'S';
  };
  ASSERT_TRUE(wait_for_sleep());
  ASSERT_EQ(::kill(child, SIGTERM), 0);
  std::string said;  // the handler's line: the first signal was taken
  ASSERT_EQ(::fcntl(err[0], F_SETFL, O_NONBLOCK), 0);
  while (said.find("stopping after the write") == std::string::npos && std::chrono::steady_clock::now() < deadline) {
    char buffer[256];
    const ssize_t n = ::read(err[0], buffer, sizeof buffer);
    if (n > 0) said.append(buffer, static_cast<size_t>(n));
    if (n == 0) break;  // the child ended
    if (n < 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_NE(said.find("stopping after the write"), std::string::npos) << said;
  ASSERT_TRUE(wait_for_sleep());
  ASSERT_EQ(::kill(child, SIGTERM), 0);
  int status = 0;
  pid_t reaped = 0;
  while ((reaped = ::waitpid(child, &status, WNOHANG)) == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_EQ(reaped, child) << "the second SIGTERM did not end the job";
  cleanup.child = 0;  // reaped: nothing to kill
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM)
      << "exit " << (WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  EXPECT_FALSE(fs::exists(fs::symlink_status(tmp))) << "the temporary file of the write in flight is left";
  EXPECT_FALSE(fs::exists(target));
}

// SIGINT and SIGTERM that come together (both pending as the job runs) are a first and a second signal: the job ends
// by the second, not both taken as the first.
TEST(StopSignals, TwoSignalsAtOnceEndTheJob) {
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, STDERR_FILENO);
    StopSignals stop("at once");
    sigset_t both;
    sigemptyset(&both);
    sigaddset(&both, SIGINT);
    sigaddset(&both, SIGTERM);
    ::sigprocmask(SIG_BLOCK, &both, nullptr);
    ::raise(SIGINT);
    ::raise(SIGTERM);
    ::sigprocmask(SIG_UNBLOCK, &both, nullptr);  // both delivered here
    ::_exit(stop.received() != 0 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM)
      << "exit " << (WIFEXITED(status) ? WEXITSTATUS(status) : -1) << " (0: both were taken as the first)";
}

}  // namespace
