#include "experiments/runner/progress.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <deque>
#include <mutex>
#include <thread>

#include "experiments/runner/stop_signals.hpp"

namespace attnlab {

// The lines of a Progress, written to stdout (write(2) on descriptor 1, no stdio lock) by a thread of
// their own. Its state is shared with the thread, which may outlive the writer when stdout stays stalled
// (it is then left blocked in write until the process ends).
class LineWriter {
 public:
  static constexpr std::size_t kMaxQueuedBytes = std::size_t{1} << 20;

  LineWriter() : shared_(std::make_shared<Shared>()) {
    std::fflush(stdout);  // what stdio holds goes out before these lines
    std::thread([shared = shared_] { run(*shared); }).detach();
  }
  ~LineWriter() {
    drain(Progress::kDrainSeconds);
    std::lock_guard<std::mutex> lock(shared_->mutex);
    shared_->done = true;
    shared_->changed.notify_all();
  }
  // Waits up to `seconds` for every queued line to be written; whether they were.
  bool drain(double seconds) {
    std::unique_lock<std::mutex> lock(shared_->mutex);
    return shared_->changed.wait_for(lock, std::chrono::duration<double>(seconds), [&] { return shared_->lines.empty() && !shared_->busy; });
  }
  // Queues `text`; a droppable line is dropped (and counted) while more than kMaxQueuedBytes wait.
  void put(std::string text, bool droppable) {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    if (shared_->closed) return;
    if (droppable && shared_->bytes > kMaxQueuedBytes) {
      ++shared_->dropped;
      return;
    }
    if (shared_->dropped) {
      shared_->lines.push_back("[" + std::to_string(shared_->dropped) + " progress lines dropped while the output was not read]\n");
      shared_->dropped = 0;
    }
    shared_->bytes += text.size();
    shared_->lines.push_back(std::move(text));
    shared_->changed.notify_all();
  }

 private:
  struct Shared {
    std::mutex mutex;
    std::condition_variable changed;
    std::deque<std::string> lines;
    std::size_t bytes = 0, dropped = 0;
    bool busy = false;    // the thread is writing a line
    bool closed = false;  // stdout failed (EPIPE: nobody will read): drop everything
    bool done = false;    // the writer is gone; the thread ends when the queue is empty
  };

  static void run(Shared& s) {
    const sigset_t stop = stop_signal_set();  // they go to the training thread, whose handler polls them
    pthread_sigmask(SIG_BLOCK, &stop, nullptr);
    std::unique_lock<std::mutex> lock(s.mutex);
    while (true) {
      s.changed.wait(lock, [&] { return !s.lines.empty() || s.done; });
      if (s.lines.empty()) return;
      const std::string text = std::move(s.lines.front());
      s.lines.pop_front();
      s.busy = true;
      lock.unlock();
      const bool written = write_all(text);
      lock.lock();
      s.busy = false;
      s.bytes -= text.size();
      if (!written) s.closed = true, s.bytes = 0, s.lines.clear();
      s.changed.notify_all();
    }
  }

  static bool write_all(const std::string& text) {
    for (std::size_t at = 0; at < text.size();) {
      const ssize_t n = ::write(STDOUT_FILENO, text.data() + at, text.size() - at);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      at += static_cast<std::size_t>(n);
    }
    return true;
  }

  std::shared_ptr<Shared> shared_;
};

namespace {

std::string clock_time() {
  const std::time_t now = std::time(nullptr);
  char buffer[16];
  std::strftime(buffer, sizeof buffer, "%H:%M:%S", std::localtime(&now));
  return buffer;
}

double seconds_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

Progress::Progress(std::size_t last_step, ProgressOutput output)
    : writer_(output == ProgressOutput::none ? nullptr : std::make_unique<LineWriter>()),
      last_step_(last_step),
      silent_(output == ProgressOutput::none),
      terminal_(output == ProgressOutput::automatic && isatty(fileno(stdout)) != 0) {}

Progress::~Progress() = default;

namespace {

// Whether standard error is another file than standard output (under mpirun: another channel).
bool stderr_apart() {
  struct stat out {}, err {};
  if (fstat(STDOUT_FILENO, &out) != 0 || fstat(STDERR_FILENO, &err) != 0) return false;
  return out.st_dev != err.st_dev || out.st_ino != err.st_ino;
}

// Writes `text` to standard error through a descriptor of its own that never waits (a stalled stderr
// loses the text instead of holding the caller).
void write_to_stderr_without_waiting(const std::string& text) {
  const int fd = ::open("/proc/self/fd/2", O_WRONLY | O_APPEND | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) return;
  [[maybe_unused]] const ssize_t n = ::write(fd, text.data(), text.size());
  ::close(fd);
}

}  // namespace

void Progress::final_message(const std::string& text) {
  message(text);
  if (writer_ && !writer_->drain(kStallSeconds) && stderr_apart()) write_to_stderr_without_waiting(text + "\n");
}

void Progress::emit(std::string text, bool droppable) {
  if (writer_) writer_->put(std::move(text), droppable);
}

void Progress::step(std::size_t step, double loss, double tokens_per_s, double eta) {
  if (!terminal_) return;
  const double now = seconds_now();
  if (now - last_draw_ < 0.1 && step != last_step_) return;
  const int width = 24;
  const int filled = static_cast<int>(width * static_cast<double>(step) / static_cast<double>(last_step_));
  char line[256];
  std::snprintf(line, sizeof line, "\r[%s%s] %zu/%zu  loss %.4f  %s  %.0f tok/s  eta %.0fs   ", std::string(filled, '#').c_str(),
                std::string(width - filled, '.').c_str(), step, last_step_, loss, accuracy_.c_str(), tokens_per_s, eta);
  emit(line, true);
  last_draw_ = now;
  bar_open_ = true;
}

void Progress::log_line(std::size_t step, double mean_loss, double lr, double tokens_per_s, double eta, const std::string& extra) {
  if (terminal_ || silent_) return;
  char line[256];
  std::snprintf(line, sizeof line, "[%s] step %zu/%zu  loss %.4f  lr %.3g  %.0f tok/s  eta %.0fs", clock_time().c_str(), step, last_step_,
                mean_loss, lr, tokens_per_s, eta);
  emit(std::string(line) + extra + "\n", true);
}

void Progress::evaluation(std::size_t step, double loss, double token_accuracy, double exact_match) {
  char line[160];
  std::snprintf(line, sizeof line, "eval at step %zu: loss %.4f  token accuracy %.2f%%  exact match %.2f%%", step, loss,
                100 * token_accuracy, 100 * exact_match);
  message(line, true);
  std::snprintf(line, sizeof line, "held-out acc %.1f%%", 100 * token_accuracy);
  accuracy_ = line;
}

void Progress::message(const std::string& text, bool timestamped) {
  if (silent_) return;
  end_bar();
  emit((timestamped ? "[" + clock_time() + "] " : "") + text + "\n", false);
}

void Progress::end_bar() {
  if (bar_open_) emit("\n", false);
  bar_open_ = false;
}

}  // namespace attnlab
