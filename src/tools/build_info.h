// build_info.h — what built this specpress: its version, the source commit, LibTorch's version and, on CUDA builds,
// the CUDA runtime and driver. `specpress --version` prints it; bench and diagnose reports, bench checkpoints and the
// server's /props carry it, so that a number can be traced to the code that measured it.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace specpress::tools {

struct BuildInfo {
  std::string version;       // the project's version (CMake's project VERSION)
  std::string commit;        // git commit, "-dirty" with uncommitted changes, or "unknown"
  std::string torch;         // LibTorch's version, as compiled against
  bool cuda_build = false;   // built with the CUDA fast path
  std::string cuda_runtime;  // "13.0" on CUDA builds, else empty
  std::string cuda_driver;   // the driver's CUDA version ("" where no driver answers)
};

BuildInfo build_info();
// One line: "specpress 0.1.0 (commit 0123456789ab, CPU build, LibTorch 1.13.0)".
std::string build_line();
nlohmann::ordered_json build_json();

}  // namespace specpress::tools
