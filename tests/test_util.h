// test_util.h — helpers shared by the tests: where ../shared lives (tests skip with a message when it
// is absent), golden-fixture readers, scratch directories and running the specpress binary.
#pragma once
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/remove_tree.h"

namespace specpress::test {

inline std::string shared_dir() { return SPECPRESS_SHARED_DIR; }
// (paths appended, not built with operator+: GCC 12 warns falsely on that once inlined, -Wstringop-overflow)
inline bool have_shared() {
  return std::filesystem::exists(shared_dir().append("/golden/dflash-tiny-a/target/config.json"));
}
#define SPECPRESS_REQUIRE_SHARED()                                                                      \
  do {                                                                                                  \
    if (!::specpress::test::have_shared())                                                              \
      GTEST_SKIP() << "../shared (golden fixtures and data) not found at " << SPECPRESS_SHARED_DIR;     \
  } while (0)

// Device the golden tests run on: SPECPRESS_TEST_DEVICE=cuda runs them on the GPU machine's CUDA path.
inline std::string test_device_name() {
  const char* d = std::getenv("SPECPRESS_TEST_DEVICE");
  return d != nullptr && *d != '\0' ? d : "cpu";
}

inline std::string golden_dir() {
  std::string dir = shared_dir();
  dir.append("/golden/dflash-tiny-a");
  return dir;
}

struct GoldenRun {
  std::vector<int64_t> prompt, ar_output, dflash_output, acceptance_lengths, stop_ids;
  int64_t max_new_tokens = 0;
  nlohmann::json steps;
};

inline std::vector<GoldenRun> golden_runs() {
  std::ifstream in(golden_dir() + "/dflash_runs.json");
  nlohmann::json j = nlohmann::json::parse(in);
  std::vector<GoldenRun> runs;
  for (const auto& r : j["runs"]) {
    GoldenRun g;
    g.prompt = r["prompt"].get<std::vector<int64_t>>();
    g.ar_output = r["ar_output"].get<std::vector<int64_t>>();
    g.dflash_output = r["dflash_output"].get<std::vector<int64_t>>();
    g.acceptance_lengths = r["acceptance_lengths"].get<std::vector<int64_t>>();
    g.stop_ids = r["stop_token_ids"].get<std::vector<int64_t>>();
    g.max_new_tokens = r["max_new_tokens"].get<int64_t>();
    g.steps = r["steps"];
    runs.push_back(std::move(g));
  }
  return runs;
}

// A fresh directory under the system temp dir, removed when the object dies.
struct ScratchDir {
  std::filesystem::path path;
  explicit ScratchDir(const std::string& tag) {
    path = std::filesystem::temp_directory_path() /
           ("specpress-" + tag + "-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "-" +
            std::to_string(reinterpret_cast<uintptr_t>(this)));
    io::remove_tree(path.string());
    std::filesystem::create_directories(path);
  }
  ~ScratchDir() {
    try {
      io::remove_tree(path.string());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "ScratchDir: %s\n", e.what());
    }
  }
  std::string str() const { return path.string(); }
};

inline void write_text(const std::filesystem::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary);
  out << text;
}

struct CommandResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

// Runs the specpress binary with `args` (shell-quoted by the caller), capturing stdout and stderr.
inline CommandResult run_specpress(const std::string& args) {
  static int counter = 0;
  std::string err_path = (std::filesystem::temp_directory_path() /
                          ("specpress-stderr-" + std::to_string(::getpid()) + "-" + std::to_string(counter++)))
                             .string();
  // no GPU for the CPU suites' runs: --device auto then takes the CPU in f32 on any machine (tests/gpu has its own)
  std::string cmd = "CUDA_VISIBLE_DEVICES= " + std::string(SPECPRESS_BINARY) + " " + args + " 2>" + err_path;
  CommandResult r;
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) return r;
  std::array<char, 4096> buf{};
  size_t n = 0;
  while ((n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0) r.out.append(buf.data(), n);
  int status = ::pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream e(err_path);
  r.err.assign(std::istreambuf_iterator<char>(e), std::istreambuf_iterator<char>());
  std::filesystem::remove(err_path);
  return r;
}

// Runs specpress with `args` in the background (no GPU, stdout to `out_path` or dropped, stderr to `err_path`; job
// control on, so that SIGINT is not ignored there), waits until the shell condition `ready` holds (every 50 ms, at
// most a minute), sends `signal` ("INT", "TERM") and returns the exit status as the shell prints it, e.g. "130\n".
// `args` and `ready` must hold no single quote.
inline std::string signal_specpress(const std::string& args, const std::string& err_path, const std::string& ready,
                                    const std::string& signal, const std::string& out_path = "/dev/null") {
  const std::string script = "set -m; CUDA_VISIBLE_DEVICES= " + std::string(SPECPRESS_BINARY) + " " + args +
                             " >" + out_path + " 2>" + err_path + " & pid=$!; for i in $(seq 1200); do " + ready +
                             " && break; sleep 0.05; done; kill -" + signal + " $pid; wait $pid; echo $?";
  FILE* pipe = ::popen(("bash -c '" + script + "'").c_str(), "r");
  if (pipe == nullptr) return "popen failed";
  std::string status;
  std::array<char, 64> buf{};
  for (size_t n; (n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0;) status.append(buf.data(), n);
  ::pclose(pipe);
  return status;
}

// Expects `fn` to throw a specpress::Error whose message contains `message`.
template <typename Fn>
void expect_error(Fn fn, const std::string& message) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one containing: " << message;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << "error was: " << e.what();
  }
}

inline std::string join_ids(const std::vector<int64_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
  return s;
}

}  // namespace specpress::test
