// test_remove_tree.cpp — io::remove_tree (io/remove_tree.h), which deletes checkpoints, --force outputs and the tests'
// scratch directories without std::filesystem::remove_all: a tree of directories and files goes whole, a symbolic
// link goes as a link (its target stays), a missing path removes nothing, and an entry that cannot be removed is
// named in the error.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"
#include "io/remove_tree.h"

namespace fs = std::filesystem;
using specpress::io::remove_tree;

namespace {

fs::path make_temp_dir() {
  std::string templ = (fs::temp_directory_path() / "specpress-remove-tree-XXXXXX").string();
  if (::mkdtemp(templ.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  return templ;
}

void touch(const fs::path& p) { std::ofstream(p) << "x"; }

}  // namespace

TEST(RemoveTree, RemovesTheTreeAndLinksButNotTheirTargets) {
  const fs::path base = make_temp_dir();
  const fs::path kept = base / "kept", tree = base / "tree";
  fs::create_directories(kept);
  touch(kept / "target.txt");
  fs::create_directories(tree / "a" / "b");
  touch(tree / "one.txt");
  touch(tree / "a" / "two.txt");
  touch(tree / "a" / "b" / "three.txt");
  fs::create_directory_symlink(kept, tree / "a" / "link_to_dir");
  fs::create_symlink(kept / "target.txt", tree / "link_to_file");
  // tree, a, b, three files, two links
  EXPECT_EQ(remove_tree(tree.string()), 8u);
  EXPECT_FALSE(fs::exists(fs::symlink_status(tree)));
  EXPECT_TRUE(fs::exists(kept / "target.txt")) << "a link's target was removed";
  EXPECT_EQ(remove_tree(tree.string()), 0u) << "a missing path removes nothing";
  EXPECT_EQ(remove_tree((kept / "target.txt").string()), 1u) << "a single file";
  EXPECT_EQ(remove_tree(base.string()), 2u);
  EXPECT_FALSE(fs::exists(base));
}

TEST(RemoveTree, AnEntryThatCannotBeRemovedIsNamed) {
  // procfs refuses every unlink, root's too: the first entry under the directory is named, not the directory
  if (!fs::exists("/proc/self/fdinfo/0")) GTEST_SKIP() << "no /proc/self/fdinfo";
  try {
    remove_tree("/proc/self/fdinfo");
    FAIL() << "removing /proc/self/fdinfo succeeded";
  } catch (const specpress::Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot remove /proc/self/fdinfo/"), std::string::npos) << e.what();
  }
}
