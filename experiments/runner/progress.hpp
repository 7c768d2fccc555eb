// Progress output of a training run: on a terminal, one line redrawn in place (a bar with the step, the
// loss, the latest held-out accuracy, tokens/s and the time left); in logs and pipes, a timestamped line
// every log.interval steps. Messages (evaluations, the end of the run) end the bar's line first.
#pragma once

#include <cstddef>
#include <string>

namespace attnlab {

// automatic: a bar on a terminal, lines otherwise; lines: lines always (rank 0 of a data-parallel job:
// mpirun gives its ranks a pseudo-terminal even when its own output goes to a file); none: nothing (the
// other ranks).
enum class ProgressOutput { automatic, lines, none };

class Progress {
 public:
  explicit Progress(std::size_t last_step, ProgressOutput output = ProgressOutput::automatic);
  // After every step: redraws the bar (at most ten times a second) on a terminal.
  void step(std::size_t step, double loss, double tokens_per_s, double eta_seconds);
  // Every log.interval steps: a line with the mean loss, when not on a terminal; `extra` ends it (a
  // data-parallel run's allreduce figures).
  void log_line(std::size_t step, double mean_loss, double lr, double tokens_per_s, double eta_seconds, const std::string& extra = "");
  // A held-out evaluation: a line, and its accuracy on the bar from now on.
  void evaluation(std::size_t step, double loss, double token_accuracy, double exact_match);
  // Any other line ("[hh:mm:ss] " prefixed when `timestamped`), after ending the bar's line.
  void message(const std::string& text, bool timestamped = false);

 private:
  void end_bar();
  std::size_t last_step_;
  bool silent_, terminal_;
  bool bar_open_ = false;  // the cursor is at the end of the bar: end that line before printing
  double last_draw_ = -1;
  std::string accuracy_ = "held-out acc -";
};

}  // namespace attnlab
