// write_file_atomically: POSIX open/write/fsync/rename; replace_folder: renameat2; read_file;
// create_folders; remove_stale_temporaries (see atomic_file.hpp).
#include "framework/io/atomic_file.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <vector>

namespace attnlab {
namespace {

// Removes the temporary file and throws "cannot <what> <file>: <reason>", the reason read from errno.
[[noreturn]] void fail(const std::string& temporary, const std::string& what, const std::string& file) {
  const std::string reason = std::strerror(errno);
  std::remove(temporary.c_str());
  throw std::runtime_error("cannot " + what + " " + file + ": " + reason);
}

constexpr const char* kTemporaryMark = ".tmp-";

bool ends_with(const std::string& s, const std::string& tail) { return s.size() > tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0; }

// Whether the entry `name` (a folder when `folder`) is a temporary whose writer has gone: X.tmp-PID with no
// process PID, or a file X.tmp that a version before 2026-11-27 wrote without its pid, where X is of a
// kind attnlab writes (last.ckpt.tmp, config.yaml.tmp, ...). Anything else named *.tmp is the user's.
bool stale_temporary(const std::string& name, bool folder) {
  static const std::vector<std::string> written = {".ckpt.tmp", ".yaml.tmp", ".json.tmp", ".jsonl.tmp", ".csv.tmp", ".html.tmp",
                                                   ".npy.tmp",  ".txt.tmp",  ".md.tmp",   ".png.tmp",   ".svg.tmp"};
  if (!folder)
    for (const std::string& tail : written)
      if (ends_with(name, tail)) return true;
  const std::size_t at = name.rfind(kTemporaryMark);
  if (at == std::string::npos) return false;
  const std::string digits = name.substr(at + std::strlen(kTemporaryMark));
  if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) return false;
  const long pid = std::strtol(digits.c_str(), nullptr, 10);
  return pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
}

}  // namespace

std::string temporary_path(const std::string& path) { return path + kTemporaryMark + std::to_string(::getpid()); }

void write_file_atomically(const std::string& path, const std::string& bytes) {
  const std::string temporary = temporary_path(path);
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
  if (!in) {
    const int error = errno;
    const std::string message = "cannot read the " + what + " " + path + ": " + std::strerror(error);
    if (error == ENOENT || error == ENOTDIR) throw FileMissing(message);
    throw std::runtime_error(message);
  }
  std::ostringstream bytes;
  bytes << in.rdbuf();
  if (in.bad()) throw std::runtime_error("cannot read the " + what + " " + path + ": " + std::strerror(errno));
  return bytes.str();
}

void replace_folder(const std::string& fresh, const std::string& dir) {
  namespace fs = std::filesystem;
  const auto failed = [&](const std::string& how) {
    throw std::runtime_error("cannot move " + fresh + " into place at " + dir + " (" + how + "): " + std::strerror(errno));
  };
  if (!fs::exists(dir)) {
    if (std::rename(fresh.c_str(), dir.c_str()) != 0) failed("rename");
    return;
  }
  if (::renameat2(AT_FDCWD, fresh.c_str(), AT_FDCWD, dir.c_str(), RENAME_EXCHANGE) == 0) {
    fs::remove_all(fresh);  // the earlier folder, now under the temporary name
    return;
  }
  if (errno != EINVAL && errno != ENOSYS) failed("exchange");
  const std::string old = dir + ".old";  // no exchange here: two renames, the earlier folder kept until the second is done
  fs::remove_all(old);
  if (std::rename(dir.c_str(), old.c_str()) != 0) failed("rename the earlier one");
  if (std::rename(fresh.c_str(), dir.c_str()) != 0) failed("rename");
  fs::remove_all(old);
}

void remove_stale_temporaries(const std::string& folder, const std::vector<std::string>& subfolders, const std::vector<std::string>& replaced) {
  namespace fs = std::filesystem;
  std::vector<std::string> folders{folder};
  for (const std::string& sub : subfolders) folders.push_back(folder + "/" + sub);
  std::error_code ec;
  for (const std::string& f : folders) {
    if (!fs::is_directory(f, ec)) continue;
    std::vector<fs::path> entries;
    for (const auto& entry : fs::directory_iterator(f, ec)) entries.push_back(entry.path());
    for (const fs::path& p : entries) {
      const std::string name = p.filename().string();
      if (stale_temporary(name, fs::is_directory(fs::symlink_status(p, ec)))) {
        fs::remove_all(p, ec);
      } else if (f == folder && ends_with(name, ".old") &&
                 std::find(replaced.begin(), replaced.end(), name.substr(0, name.size() - 4)) != replaced.end()) {
        const fs::path back = p.parent_path() / name.substr(0, name.size() - 4);
        if (!fs::exists(back, ec)) fs::rename(p, back, ec);  // a two-rename replace_folder cut between its renames
      }
    }
  }
}

void create_folders(const std::string& path, const std::string& what) {
  std::error_code ec, is_folder;
  if (path.empty()) throw std::runtime_error("cannot create " + what + ": its path is empty; give a folder's path");
  std::filesystem::create_directories(path, ec);
  if (std::filesystem::is_directory(path, is_folder)) return;
  const std::string reason = ec ? ec.message() : is_folder ? is_folder.message() : "a file has that name";
  throw std::runtime_error("cannot create " + what + " " + path + ": " + reason + "; choose a folder you can write");
}

}  // namespace attnlab
