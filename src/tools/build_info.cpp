// build_info.cpp — BuildInfo from the generated commit header, CMake's version and LibTorch's and CUDA's own
// version macros and queries.
#include "tools/build_info.h"

#include <fmt/format.h>
#include <torch/version.h>

#ifdef SPECPRESS_FAST_PATH
#include <cuda_runtime_api.h>
#endif

#include "build_commit.h"

namespace specpress::tools {
namespace {
#ifdef SPECPRESS_FAST_PATH
std::string cuda_version(int v) { return fmt::format("{}.{}", v / 1000, (v % 1000) / 10); }
#endif
}  // namespace

BuildInfo build_info() {
  BuildInfo b;
  b.version = SPECPRESS_VERSION;
  b.commit = SPECPRESS_BUILD_COMMIT;
  b.torch = TORCH_VERSION;
#ifdef SPECPRESS_FAST_PATH
  b.cuda_build = true;
  int v = 0;
  if (cudaRuntimeGetVersion(&v) == cudaSuccess) b.cuda_runtime = cuda_version(v);
  if (cudaDriverGetVersion(&v) == cudaSuccess && v > 0) b.cuda_driver = cuda_version(v);
#endif
  return b;
}

std::string build_line() {
  const BuildInfo b = build_info();
  std::string cuda;
  if (b.cuda_build)
    cuda = fmt::format(", CUDA runtime {}, driver {}", b.cuda_runtime.empty() ? "unknown" : b.cuda_runtime,
                       b.cuda_driver.empty() ? "none" : b.cuda_driver);
  return fmt::format("specpress {} (commit {}, {} build, LibTorch {}{})", b.version, b.commit,
                     b.cuda_build ? "CUDA" : "CPU", b.torch, cuda);
}

nlohmann::ordered_json build_json() {
  const BuildInfo b = build_info();
  nlohmann::ordered_json j = {{"version", b.version}, {"commit", b.commit}, {"torch", b.torch},
                              {"cuda_build", b.cuda_build}};
  if (b.cuda_build) {
    j["cuda_runtime"] = b.cuda_runtime;
    j["cuda_driver"] = b.cuda_driver;
  }
  return j;
}

}  // namespace specpress::tools
