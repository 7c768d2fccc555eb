// Stopping cleanly on a signal: while a StopSignals is alive, Ctrl-C (SIGINT), SIGTERM (what cluster
// schedulers, `kill` and `docker stop` send before a kill) and SIGUSR1 only set a flag, which the training
// loop and `attnlab compare` poll to stop after the current step with a checkpoint written. The previous
// handlers come back when it goes out of scope. SIGUSR1 is for mpirun: it passes SIGUSR1 on to every rank
// at once, where it holds SIGTERM back a second and kills the ranks a second later (docs/distributed.md).
//
// `attnlab compare` starts its runs with the stop signals blocked, so that one it forwards while a run is
// still starting up waits for the run's handler instead of killing it before it can write a checkpoint:
// a StopSignals unblocks them once its handler is in place (a pending signal then sets the flag), and
// every command that installs none calls unblock_stop_signals() first thing.
#pragma once

#include <csignal>
#include <stdexcept>
#include <string>

namespace attnlab {

// The variable through which `attnlab compare` gives the runs it starts its pid (compare.cpp).
inline constexpr const char* kParentPidVariable = "ATTNLAB_PARENT_PID";

// With ATTNLAB_PARENT_PID in the environment (a run started by `attnlab compare`): asks the kernel to send
// this process SIGTERM when that comparison ends, however it ends (kill -9 included), so that no run
// outlives it and trains on beside the same command run again; a train stops after its step with a
// checkpoint (SIGTERM waits, blocked, for its handler). When the comparison has already ended, says so
// and exits with 143. Called first thing in main.
void stop_with_parent();

// SIGINT, SIGTERM and SIGUSR1.
sigset_t stop_signal_set();

// Unblocks the stop signals in the calling thread (a signal pending since the process started is
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
  int signal() const;         // SIGINT, SIGTERM or SIGUSR1, the first received (0 when none)
  const char* name() const;   // "SIGINT", "SIGTERM", "SIGUSR1"
  int exit_status() const { return 128 + signal(); }  // 130, 143 or 138, as a shell reports a process it stopped

 private:
  struct sigaction previous_int_ {}, previous_term_ {}, previous_usr1_ {};
};

// A stop signal at an exact point, for tests that would otherwise have to time a kill into a window:
// when the environment variable ATTNLAB_TEST_STOP_AT equals `point` ("start:2" in attnlab compare: right
// after it started its second job; "report:1"; "part:detectors" in attnlab analyze: before that part;
// "step:5" in training: after step 5; "eval:10": before each batch of the evaluation after step 10), the process raises SIGTERM on itself there, or SIGINT when the
// value ends in "@SIGINT" ("step:5@SIGINT", Ctrl-C as a notebook sends it).
void test_stop_point(const std::string& point);

// Thrown by a command that stops at a safe point on a signal (attnlab analyze between its parts); main
// prints the message and exits with 128 + the signal.
struct StoppedBySignal : std::runtime_error {
  StoppedBySignal(const std::string& message, int signal) : std::runtime_error(message), signal(signal) {}
  int signal;
};

}  // namespace attnlab
