// test_toolchain.cpp — the CUDA build's link against PyTorch's LibTorch, whose libtorch.so exports the
// std::filesystem of its statically linked libstdc++ (pytorch/pytorch#133437): the binaries must bind the system's
// libstdc++ (the top CMakeLists.txt names it first on every link line), or std::filesystem::remove_all crashes on a
// non-empty directory, as a resumed training's checkpoint rotation did.
#include <dlfcn.h>
#include <unistd.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

namespace fs = std::filesystem;

TEST(Toolchain, StdFilesystemBindsTheSystemLibstdcxx) {
  const auto remove_all = static_cast<std::uintmax_t (*)(const fs::path&)>(&fs::remove_all);
  Dl_info info{};
  ASSERT_NE(dladdr(reinterpret_cast<void*>(remove_all), &info), 0);
  ASSERT_NE(info.dli_fname, nullptr);
  const std::string bound_to = info.dli_fname;  // libstdc++ (a non-PIE binary would name its own PLT entry)
  EXPECT_EQ(bound_to.find("libtorch"), std::string::npos) << "std::filesystem::remove_all is bound to " << bound_to;
  EXPECT_EQ(bound_to.find("libc10"), std::string::npos) << "std::filesystem::remove_all is bound to " << bound_to;
  const fs::path root = fs::temp_directory_path() / ("specpress-toolchain-" + std::to_string(::getpid()));
  fs::create_directories(root / "a" / "b");
  std::ofstream(root / "a" / "b" / "file") << "x";
  std::ofstream(root / "file") << "y";
  EXPECT_EQ(fs::remove_all(root), 5u);  // root, a, b and the two files
  EXPECT_FALSE(fs::exists(root));
}
