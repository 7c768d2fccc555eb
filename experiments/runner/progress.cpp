#include "experiments/runner/progress.hpp"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>

namespace attnlab {
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
    : last_step_(last_step),
      silent_(output == ProgressOutput::none),
      terminal_(output == ProgressOutput::automatic && isatty(fileno(stdout)) != 0) {}

void Progress::step(std::size_t step, double loss, double tokens_per_s, double eta) {
  if (!terminal_) return;
  const double now = seconds_now();
  if (now - last_draw_ < 0.1 && step != last_step_) return;
  const int width = 24;
  const int filled = static_cast<int>(width * static_cast<double>(step) / static_cast<double>(last_step_));
  std::printf("\r[%s%s] %zu/%zu  loss %.4f  %s  %.0f tok/s  eta %.0fs   ", std::string(filled, '#').c_str(),
              std::string(width - filled, '.').c_str(), step, last_step_, loss, accuracy_.c_str(), tokens_per_s, eta);
  std::fflush(stdout);
  last_draw_ = now;
  bar_open_ = true;
}

void Progress::log_line(std::size_t step, double mean_loss, double lr, double tokens_per_s, double eta, const std::string& extra) {
  if (terminal_ || silent_) return;
  std::printf("[%s] step %zu/%zu  loss %.4f  lr %.3g  %.0f tok/s  eta %.0fs%s\n", clock_time().c_str(), step, last_step_, mean_loss, lr,
              tokens_per_s, eta, extra.c_str());
  std::fflush(stdout);
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
  std::printf("%s%s\n", timestamped ? ("[" + clock_time() + "] ").c_str() : "", text.c_str());
  std::fflush(stdout);
}

void Progress::end_bar() {
  if (bar_open_) std::printf("\n");
  bar_open_ = false;
}

}  // namespace attnlab
