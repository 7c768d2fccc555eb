// write_file_atomically replaces a file by renaming a finished temporary one over it, and a failed write
// leaves the previous file as it was; read_file names what it could not read and why; replace_folder swaps
// a folder whole; remove_stale_temporaries clears what killed writers left.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <vector>

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
  EXPECT_FALSE(fs::exists(temporary_path(path)));
}

TEST_F(AtomicFile, AFailedWriteLeavesThePreviousFileAndNamesIt) {
  const std::string path = dir_ + "/a.txt";
  write_file_atomically(path, "old");
  fs::create_directory(temporary_path(path));  // the temporary file cannot be opened
  try {
    write_file_atomically(path, "new");
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(temporary_path(path)), std::string::npos) << e.what();
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

// A folder replaced by a finished one in one step: the new contents in place, nothing else left.
TEST_F(AtomicFile, ReplaceFolderPutsTheNewFolderInPlaceWhole) {
  const std::string dir = dir_ + "/analysis", fresh = temporary_path(dir);
  fs::create_directories(dir);
  write_file_atomically(dir + "/old.txt", "old");
  fs::create_directories(fresh);
  write_file_atomically(fresh + "/new.txt", "new");
  replace_folder(fresh, dir);
  EXPECT_TRUE(fs::exists(dir + "/new.txt"));
  EXPECT_FALSE(fs::exists(dir + "/old.txt"));
  EXPECT_FALSE(fs::exists(fresh));
  EXPECT_FALSE(fs::exists(dir + ".old"));
  fs::create_directories(dir_ + "/first.tmp-1");
  replace_folder(dir_ + "/first.tmp-1", dir_ + "/first");  // nothing to replace: a rename
  EXPECT_TRUE(fs::is_directory(dir_ + "/first"));
}

// What killed writers left is removed; what a running writer (this process) holds, and everything else,
// stays; a folder a two-rename replace left only as X.old comes back as X.
TEST_F(AtomicFile, StaleTemporariesOfGoneWritersAreRemoved) {
  pid_t gone = ::fork();  // a pid that surely has no process: a child that has exited and been reaped
  if (gone == 0) ::_exit(0);
  ::waitpid(gone, nullptr, 0);
  const std::string dead = std::to_string(gone);
  fs::create_directories(dir_ + "/patterns");
  for (const std::string& f : std::vector<std::string>{"/last.ckpt.tmp", "/config.yaml.tmp-" + dead, "/patterns/a.npy.tmp-" + dead, "/keep.txt", "/x.tmp-12ab"})
    write_file_atomically(dir_ + f, "x");
  write_file_atomically(temporary_path(dir_ + "/report.html"), "being written");
  fs::create_directories(dir_ + "/analysis.tmp-" + dead + "/inner");
  fs::create_directories(dir_ + "/analysis.old");
  // The user's own: a file and a folder named *.tmp, and X.old beside no X that attnlab replaces.
  write_file_atomically(dir_ + "/notes.tmp", "mine");
  fs::create_directories(dir_ + "/scratch.tmp");
  write_file_atomically(dir_ + "/scratch.tmp/data.txt", "mine");
  write_file_atomically(dir_ + "/best.ckpt.old", "mine");
  remove_stale_temporaries(dir_, {"patterns"}, {"analysis"});
  for (const std::string& f : std::vector<std::string>{"/notes.tmp", "/scratch.tmp/data.txt", "/best.ckpt.old"}) EXPECT_TRUE(fs::exists(dir_ + f)) << f;
  EXPECT_FALSE(fs::exists(dir_ + "/best.ckpt"));
  for (const std::string& f : std::vector<std::string>{"/last.ckpt.tmp", "/config.yaml.tmp-" + dead, "/patterns/a.npy.tmp-" + dead, "/analysis.tmp-" + dead})
    EXPECT_FALSE(fs::exists(dir_ + f)) << f;
  EXPECT_TRUE(fs::exists(temporary_path(dir_ + "/report.html")));
  EXPECT_TRUE(fs::exists(dir_ + "/keep.txt"));
  EXPECT_TRUE(fs::exists(dir_ + "/x.tmp-12ab"));
  EXPECT_TRUE(fs::is_directory(dir_ + "/analysis"));
  EXPECT_FALSE(fs::exists(dir_ + "/analysis.old"));
}

}  // namespace
}  // namespace attnlab
