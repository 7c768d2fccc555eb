// Stopping cleanly on a signal: while a StopSignals is alive, Ctrl-C (SIGINT) and SIGTERM (what cluster
// schedulers, `kill` and `docker stop` send before a kill) only set a flag, which the training loop and
// `attnlab compare` poll to stop after the current step with a checkpoint written. The previous handlers
// come back when it goes out of scope.
//
// `attnlab compare` starts its runs with both signals blocked, so that one it forwards while a run is
// still starting up waits for the run's handler instead of killing it before it can write a checkpoint:
// a StopSignals unblocks them once its handler is in place (a pending signal then sets the flag), and
// every command that installs none calls unblock_stop_signals() first thing.
#pragma once

#include <csignal>
#include <stdexcept>
#include <string>

namespace attnlab {

// Unblocks SIGINT and SIGTERM in the calling thread (a signal pending since the process started is
// delivered now, to whatever handler is in place).
void unblock_stop_signals();

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

// A stop signal at an exact point, for tests that would otherwise have to time a kill into a window:
// when the environment variable ATTNLAB_TEST_STOP_AT equals `point` ("start:2" in attnlab compare: right
// after it started its second job; "report:1"; "part:detectors" in attnlab analyze: before that part), the
// process raises SIGTERM on itself there.
void test_stop_point(const std::string& point);

// Thrown by a command that stops at a safe point on a signal (attnlab analyze between its parts); main
// prints the message and exits with 128 + the signal.
struct StoppedBySignal : std::runtime_error {
  StoppedBySignal(const std::string& message, int signal) : std::runtime_error(message), signal(signal) {}
  int signal;
};

}  // namespace attnlab
