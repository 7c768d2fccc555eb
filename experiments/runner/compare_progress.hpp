// What `attnlab compare` shows while its runs train, between the lines that say a run started or ended:
// how many runs are done of all, each run under way at its step, and the time left. The time left is
// the steps still to train over the steps trained per second since the command started (the runs of a
// comparison share one rate, whatever their number at a time). On a terminal it is one line redrawn in
// place, at most twice a second; in logs and pipes a line every kLineSeconds while runs train.
#pragma once

#include <cstddef>
#include <map>
#include <string>

#include "experiments/runner/compare_plan.hpp"

namespace attnlab {

class CompareProgress {
 public:
  static constexpr double kLineSeconds = 60;
  // `status`: show the status line at all (not on the ranks of an mpirun job, whose lines interleave).
  explicit CompareProgress(bool status);
  // A run to train in this session: its planned steps, from the step its folder holds now.
  void add(const PlannedRun& run);
  void started(const PlannedRun& run);
  // A run that ended (finished or not): its steps count as trained.
  void ended(const PlannedRun& run);
  // Between waits: the status, redrawn or printed when due.
  void tick();
  // A line of its own (a run started, finished, failed), after the status line is ended.
  void say(const std::string& text);
  // "eta 2m 10s" from the rate so far; "eta -" before any step was trained.
  std::string eta() const;

 private:
  struct Steps {
    std::size_t last = 0, from = 0, now = 0;  // planned, at the start of this session, latest seen
    bool running = false;
    std::size_t reached(const PlannedRun& run) const;  // its folder's latest step, within [from, last]
  };
  std::string status() const;
  std::map<const PlannedRun*, Steps> runs_;
  bool status_, terminal_;
  bool line_open_ = false;
  double started_ = 0, last_shown_ = -1e300;
};

// The step a run has reached: its metrics.jsonl's last row's "step" (0 when it has none).
std::size_t run_step(const std::string& run_dir);

// How a duration reads: "45s", "2m 10s", "1h 05m".
std::string duration_text(double seconds);

}  // namespace attnlab
