// write_file_atomically: POSIX open/write/fsync/rename; read_file; create_folders (see atomic_file.hpp).
#include "framework/io/atomic_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace attnlab {
namespace {

// Removes the temporary file and throws "cannot <what> <file>: <reason>", the reason read from errno.
[[noreturn]] void fail(const std::string& temporary, const std::string& what, const std::string& file) {
  const std::string reason = std::strerror(errno);
  std::remove(temporary.c_str());
  throw std::runtime_error("cannot " + what + " " + file + ": " + reason);
}

}  // namespace

void write_file_atomically(const std::string& path, const std::string& bytes) {
  const std::string temporary = path + ".tmp";
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    const std::string reason = std::strerror(errno);
    throw std::runtime_error("cannot write " + temporary + " (the temporary file for " + path + "): " + reason +
                             "; check that the folder exists and is writable");
  }
  std::size_t written = 0;
  while (written < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int saved = errno;
      ::close(fd);
      errno = saved;
      fail(temporary, "write", temporary);
    }
    written += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0) {
    const int saved = errno;
    ::close(fd);
    errno = saved;
    fail(temporary, "flush", temporary);
  }
  if (::close(fd) != 0) fail(temporary, "flush", temporary);
  if (std::rename(temporary.c_str(), path.c_str()) != 0) fail(temporary, "move the finished file into place at", path);
}

std::string read_file(const std::string& path, const std::string& what) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw std::runtime_error("cannot read the " + what + " " + path + ": it is a folder");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read the " + what + " " + path + ": " + std::strerror(errno));
  std::ostringstream bytes;
  bytes << in.rdbuf();
  if (in.bad()) throw std::runtime_error("cannot read the " + what + " " + path + ": " + std::strerror(errno));
  return bytes.str();
}

void create_folders(const std::string& path, const std::string& what) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (std::filesystem::is_directory(path)) return;
  const std::string reason = ec ? ec.message() : "a file has that name";
  throw std::runtime_error("cannot create " + what + " " + path + ": " + reason + "; choose a folder you can write");
}

}  // namespace attnlab
