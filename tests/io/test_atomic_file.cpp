// write_file_atomically replaces a file by renaming a finished temporary one over it, and a failed write
// leaves the previous file as it was.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "framework/io/atomic_file.hpp"

namespace attnlab {
namespace {

namespace fs = std::filesystem;

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class AtomicFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "attnlab_atomic_" + ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir_;
};

// A hard link to the old file keeps the old bytes only if the new file is a new inode renamed into
// place; writing the target in place (truncate, then write) would change what the link shows.
TEST_F(AtomicFile, ReplacesTheFileInsteadOfRewritingIt) {
  const std::string path = dir_ + "/a.txt", link = dir_ + "/old.txt";
  write_file_atomically(path, "old");
  ASSERT_EQ(::link(path.c_str(), link.c_str()), 0);
  write_file_atomically(path, "new bytes");
  EXPECT_EQ(read_all(path), "new bytes");
  EXPECT_EQ(read_all(link), "old");
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST_F(AtomicFile, AFailedWriteLeavesThePreviousFileAndNamesIt) {
  const std::string path = dir_ + "/a.txt";
  write_file_atomically(path, "old");
  fs::create_directory(path + ".tmp");  // the temporary file cannot be opened
  try {
    write_file_atomically(path, "new");
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(path + ".tmp"), std::string::npos) << e.what();
  }
  EXPECT_EQ(read_all(path), "old");
  try {
    write_file_atomically(dir_ + "/no/such/folder/b.txt", "x");
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("check that the folder exists"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace attnlab
