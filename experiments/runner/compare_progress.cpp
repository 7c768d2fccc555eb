#include "experiments/runner/compare_progress.hpp"

#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>

namespace attnlab {
namespace {

double seconds_now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// A run's name in the status line: its path in the comparison folder without the leading "runs/".
std::string short_name(const PlannedRun& run) { return run.rel.rfind("runs/", 0) == 0 ? run.rel.substr(5) : run.rel; }

}  // namespace

std::size_t run_step(const std::string& run_dir) {
  std::ifstream in(run_dir + "/metrics.jsonl", std::ios::binary | std::ios::ate);
  if (!in) return 0;
  const std::streamoff size = in.tellg(), tail = std::min<std::streamoff>(size, 4096);
  std::string text(static_cast<std::size_t>(tail), '\0');
  in.seekg(size - tail);
  in.read(text.data(), tail);
  const std::size_t at = text.rfind("\"step\":");
  if (at == std::string::npos) return 0;
  return std::strtoull(text.c_str() + at + 7, nullptr, 10);
}

std::string duration_text(double seconds) {
  const long s = static_cast<long>(seconds + 0.5);
  char text[32];
  if (s < 60) std::snprintf(text, sizeof text, "%lds", s);
  else if (s < 3600) std::snprintf(text, sizeof text, "%ldm %02lds", s / 60, s % 60);
  else std::snprintf(text, sizeof text, "%ldh %02ldm", s / 3600, s % 3600 / 60);
  return text;
}

CompareProgress::CompareProgress(bool status)
    : status_(status), terminal_(status && isatty(fileno(stdout)) != 0), started_(seconds_now()),
      last_shown_(terminal_ ? -1e300 : started_) {}  // in a log, the first status line a full kLineSeconds in

void CompareProgress::add(const PlannedRun& run) {
  Steps s;
  s.last = YAML::Load(run.config_yaml)["train"]["steps"].as<std::size_t>(0);
  s.from = s.now = std::min(run_step(run.run_dir), s.last);
  runs_[&run] = s;
}

std::size_t CompareProgress::Steps::reached(const PlannedRun& run) const { return std::max(from, std::min(run_step(run.run_dir), last)); }

void CompareProgress::started(const PlannedRun& run) {
  const auto it = runs_.find(&run);
  if (it != runs_.end()) it->second.running = true;
}

void CompareProgress::ended(const PlannedRun& run) {
  const auto it = runs_.find(&run);
  if (it == runs_.end()) return;
  it->second.running = false;
  it->second.now = it->second.reached(run);
  it->second.last = it->second.now;  // a run that stopped short has nothing left to train in this session
}

std::string CompareProgress::eta() const {
  double trained = 0, left = 0;
  for (const auto& [run, s] : runs_) trained += static_cast<double>(s.now - s.from), left += static_cast<double>(s.last - s.now);
  if (left == 0) return "eta 0s";
  if (trained == 0) return "eta -";
  return "eta " + duration_text(left * (seconds_now() - started_) / trained);
}

std::string CompareProgress::status() const {
  std::string running;
  for (const auto& [run, s] : runs_)
    if (s.running) running += (running.empty() ? "" : ", ") + short_name(*run) + " step " + std::to_string(s.now) + "/" + std::to_string(s.last);
  return running.empty() ? "" : "  under way: " + running + "; " + eta();
}

void CompareProgress::tick() {
  if (!status_) return;
  const double now = seconds_now();
  if (now - last_shown_ < (terminal_ ? 0.5 : kLineSeconds)) return;
  for (auto& [run, s] : runs_)
    if (s.running) s.now = s.reached(*run);
  const std::string text = status();
  last_shown_ = now;
  if (text.empty()) return;
  if (terminal_) {
    std::printf("\r\033[K%s", text.c_str());
    line_open_ = true;
  } else {
    std::printf("%s\n", text.c_str());
  }
  std::fflush(stdout);
}

void CompareProgress::say(const std::string& text) {
  if (line_open_) std::printf("\r\033[K");
  line_open_ = false;
  std::printf("%s\n", text.c_str());
  std::fflush(stdout);
  if (terminal_) last_shown_ = -1e300;  // the status comes back at the next tick
}

}  // namespace attnlab
