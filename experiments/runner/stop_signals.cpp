#include "experiments/runner/stop_signals.hpp"

#include <pthread.h>

#include <atomic>
#include <cstdlib>

namespace attnlab {
namespace {

std::atomic<int> g_signal{0};

extern "C" void on_stop_signal(int signal) {
  int none = 0;
  g_signal.compare_exchange_strong(none, signal);  // the first one counts
}

}  // namespace

void test_stop_point(const std::string& point) {
  static const char* const at = std::getenv("ATTNLAB_TEST_STOP_AT");
  if (at && point == at) std::raise(SIGTERM);
}

void unblock_stop_signals() {
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
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
  unblock_stop_signals();
}

StopSignals::~StopSignals() {
  sigaction(SIGINT, &previous_int_, nullptr);
  sigaction(SIGTERM, &previous_term_, nullptr);
}

bool StopSignals::requested() const { return g_signal != 0; }

int StopSignals::signal() const { return g_signal; }

const char* StopSignals::name() const { return g_signal == SIGTERM ? "SIGTERM" : "SIGINT"; }

}  // namespace attnlab
