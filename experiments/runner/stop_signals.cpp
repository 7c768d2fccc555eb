#include "experiments/runner/stop_signals.hpp"

#include <pthread.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace attnlab {
namespace {

std::atomic<int> g_signal{0};

extern "C" void on_stop_signal(int signal) {
  int none = 0;
  g_signal.compare_exchange_strong(none, signal);  // the first one counts
}

}  // namespace

void test_stop_point(const std::string& point) {
  const char* at = std::getenv("ATTNLAB_TEST_STOP_AT");  // read at each point: a test process may set it late (pytest)
  if (!at) return;
  const std::string spec = at;
  const std::size_t sign = spec.find('@');
  if (spec.substr(0, sign) != point) return;
  std::raise(sign != std::string::npos && spec.substr(sign + 1) == "SIGINT" ? SIGINT : SIGTERM);
}

void stop_with_parent() {
  const char* parent = std::getenv(kParentPidVariable);
  if (!parent) return;
  const pid_t pid = static_cast<pid_t>(std::atol(parent));
  unsetenv(kParentPidVariable);  // for this process alone, not for what it may start
#ifdef __linux__
  // The kernel watches the thread that started this process: the comparison's main thread, which lives
  // as long as the comparison does.
  prctl(PR_SET_PDEATHSIG, SIGTERM);
#endif
  // Asked after the parent may have ended: its end is then seen here (this process was handed to another
  // parent), not signalled.
  if (getppid() != pid) {
    std::fprintf(stderr, "attnlab: the comparison that started this process (pid %d) has ended; not starting\n", static_cast<int>(pid));
    std::exit(128 + SIGTERM);
  }
}

sigset_t stop_signal_set() {
  sigset_t stop;
  sigemptyset(&stop);
  for (int signal : {SIGINT, SIGTERM, SIGUSR1}) sigaddset(&stop, signal);
  return stop;
}

void unblock_stop_signals() {
  const sigset_t stop = stop_signal_set();
  pthread_sigmask(SIG_UNBLOCK, &stop, nullptr);
}

StopSignals::StopSignals(bool restart_calls) {
  g_signal = 0;
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  action.sa_flags = restart_calls ? SA_RESTART : 0;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, &previous_int_);
  sigaction(SIGTERM, &action, &previous_term_);
  sigaction(SIGUSR1, &action, &previous_usr1_);
  unblock_stop_signals();
}

StopSignals::~StopSignals() {
  sigaction(SIGINT, &previous_int_, nullptr);
  sigaction(SIGTERM, &previous_term_, nullptr);
  sigaction(SIGUSR1, &previous_usr1_, nullptr);
}

bool StopSignals::requested() const { return g_signal != 0; }

int StopSignals::signal() const { return g_signal; }

const char* StopSignals::name() const { return g_signal == SIGTERM ? "SIGTERM" : g_signal == SIGUSR1 ? "SIGUSR1" : "SIGINT"; }

}  // namespace attnlab
