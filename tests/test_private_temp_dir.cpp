// Each test process writes under a temporary folder of its own (private_temp_dir.hpp): two tests that
// ctest runs at once never share a file name under TempDir().
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "tests/private_temp_dir.hpp"

namespace {

namespace fs = std::filesystem;

std::string folder_name(const std::string& temp_dir) { return fs::path(temp_dir).parent_path().filename().string(); }

TEST(PrivateTempDir, TheTestsTemporaryFolderIsTheProcesssOwn) {
  const std::string dir = ::testing::TempDir();
  ASSERT_FALSE(dir.empty());
  EXPECT_EQ(dir.back(), '/');
  EXPECT_EQ(folder_name(dir).rfind("attnlab_test.", 0), 0u) << dir;
  EXPECT_TRUE(fs::is_directory(dir)) << dir;
}

TEST(PrivateTempDir, AnotherIsADifferentFolderAndGoesWithEverythingInItAndPutsTheFirstBack) {
  const std::string outer = ::testing::TempDir();
  std::string inner_path;
  {
    const attnlab::testing::PrivateTempDir inner;
    inner_path = inner.path();
    EXPECT_NE(::testing::TempDir(), outer);
    EXPECT_EQ(::testing::TempDir(), inner_path + "/");
    fs::create_directories(inner_path + "/a/b");
    EXPECT_TRUE(fs::is_directory(inner_path + "/a/b"));
  }
  EXPECT_FALSE(fs::exists(inner_path)) << inner_path;
  EXPECT_EQ(::testing::TempDir(), outer);
}

}  // namespace
