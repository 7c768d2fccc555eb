// write_file_atomically replaces a file by renaming a finished temporary one over it, and a failed write
// leaves the previous file as it was; read_file names what it could not read and why.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "framework/io/atomic_file.hpp"

namespace attnlab {
namespace {

namespace fs = std::filesystem;

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
  EXPECT_EQ(read_file(path, "test file"), "new bytes");
  EXPECT_EQ(read_file(link, "test file"), "old");
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
  EXPECT_EQ(read_file(path, "test file"), "old");
  try {
    write_file_atomically(dir_ + "/no/such/folder/b.txt", "x");
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("check that the folder exists"), std::string::npos) << e.what();
  }
}

TEST_F(AtomicFile, ReadErrorsSayWhatTheFileIsAndWhy) {
  const auto message = [](const std::string& path) {
    try {
      read_file(path, "checkpoint");
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message(dir_ + "/missing.ckpt"), "cannot read the checkpoint " + dir_ + "/missing.ckpt: No such file or directory");
  EXPECT_EQ(message(dir_), "cannot read the checkpoint " + dir_ + ": it is a folder");
  write_file_atomically(dir_ + "/bytes", std::string("a\0b", 3));
  EXPECT_EQ(read_file(dir_ + "/bytes", "test file"), std::string("a\0b", 3));
}

}  // namespace
}  // namespace attnlab
