// Progress output of a training run: on a terminal, one line redrawn in place (a bar with the step, the
// loss, the latest held-out accuracy, tokens/s and the time left); in logs and pipes, a timestamped line
// every log.interval steps. Messages (evaluations, the end of the run) end the bar's line first.
//
// Output never holds the training back: a thread of its own writes the lines, so a stdout that nobody
// reads (a full pipe, a paused pager, mpirun shutting down after forwarding SIGTERM) cannot keep a run
// from stopping with its checkpoint. While the output is stalled, progress lines beyond a bound are
// dropped (and counted when it moves again); messages are kept. When the Progress ends it waits up to
// kDrainSeconds for the lines to go out, then leaves them. A run's last word (stopped, diverged: how to
// resume) also goes to stderr when stdout has not taken it within kStallSeconds: mpirun, once it has
// forwarded a SIGTERM, no longer passes rank 0's stdout on, but still its stderr.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace attnlab {

// automatic: a bar on a terminal, lines otherwise; lines: lines always (rank 0 of a data-parallel job:
// mpirun gives its ranks a pseudo-terminal even when its own output goes to a file); none: nothing (the
// other ranks).
enum class ProgressOutput { automatic, lines, none };

class LineWriter;

class Progress {
 public:
  static constexpr double kDrainSeconds = 10, kStallSeconds = 0.25;
  explicit Progress(std::size_t last_step, ProgressOutput output = ProgressOutput::automatic);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;
  // After every step: redraws the bar (at most ten times a second) on a terminal.
  void step(std::size_t step, double loss, double tokens_per_s, double eta_seconds);
  // Every log.interval steps: a line with the mean loss, when not on a terminal; `extra` ends it (a
  // data-parallel run's allreduce figures).
  void log_line(std::size_t step, double mean_loss, double lr, double tokens_per_s, double eta_seconds, const std::string& extra = "");
  // A held-out evaluation: a line, and its accuracy on the bar from now on.
  void evaluation(std::size_t step, double loss, double token_accuracy, double exact_match);
  // Any other line ("[hh:mm:ss] " prefixed when `timestamped`), after ending the bar's line.
  void message(const std::string& text, bool timestamped = false);
  // A message the user must see (how to resume): also to stderr when stdout is stalled (see above).
  void final_message(const std::string& text);

 private:
  void end_bar();
  void emit(std::string text, bool droppable);
  std::unique_ptr<LineWriter> writer_;  // none when silent
  std::size_t last_step_;
  bool silent_, terminal_;
  bool bar_open_ = false;  // the cursor is at the end of the bar: end that line before printing
  double last_draw_ = -1;
  std::string accuracy_ = "held-out acc -";
};

}  // namespace attnlab
