// Stopping cleanly on a signal: while a StopSignals is alive, Ctrl-C (SIGINT) and SIGTERM (what cluster
// schedulers, `kill` and `docker stop` send before a kill) only set a flag, which the training loop and
// `attnlab compare` poll to stop after the current step with a checkpoint written. The previous handlers
// come back when it goes out of scope.
#pragma once

#include <csignal>

namespace attnlab {

class StopSignals {
 public:
  // `restart_calls`: whether an interrupted system call resumes (training) or fails with EINTR
  // (compare, whose pause between looks at its runs ends early to forward the signal to them).
  explicit StopSignals(bool restart_calls = true);
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  bool requested() const;
  int signal() const;         // SIGINT or SIGTERM, the first received (0 when none)
  const char* name() const;   // "SIGINT", "SIGTERM"
  int exit_status() const { return 128 + signal(); }  // 130 or 143, as a shell reports a process it stopped

 private:
  struct sigaction previous_int_ {}, previous_term_ {};
};

}  // namespace attnlab
