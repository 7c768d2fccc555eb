// A temporary folder for one test process, named by ::testing::TempDir() while it lives.
//
// ctest runs every TEST as a process of its own, two or more at a time, so a fixed name under /tmp was
// shared by tests that ran at once: one TablePng test decoded the picture another had just written there.
// Each test binary's main makes one of these before it runs its tests, so that every file a test puts
// under TempDir() is its process's own; the folder and what the tests left in it go when the process ends, and TEST_TMPDIR is put back.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <system_error>

#include <gtest/gtest.h>

namespace attnlab::testing {

class PrivateTempDir {
 public:
  PrivateTempDir() {
    std::string pattern = ::testing::TempDir() + "attnlab_test.XXXXXX";  // the system's, before ours is set
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("cannot make a temporary folder from " + pattern);
    path_ = pattern;
    if (const char* before = std::getenv("TEST_TMPDIR")) before_ = before, had_before_ = true;
    ::setenv("TEST_TMPDIR", (path_ + "/").c_str(), 1);  // ::testing::TempDir() reads it on every call
  }
  ~PrivateTempDir() {
    if (had_before_) ::setenv("TEST_TMPDIR", before_.c_str(), 1);
    else ::unsetenv("TEST_TMPDIR");
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  PrivateTempDir(const PrivateTempDir&) = delete;
  PrivateTempDir& operator=(const PrivateTempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::string before_;  // TEST_TMPDIR as it was, put back at the end
  bool had_before_ = false;
};

}  // namespace attnlab::testing
