#include "framework/ops/parallel.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "framework/ops/blas.hpp"

namespace attnlab {

void set_num_threads(int threads) {
  ThreadPool::instance().resize(std::max(1, threads));
  set_blas_threads(1);
}

int num_threads() { return ThreadPool::instance().threads(); }

int available_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return static_cast<int>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
}

int default_threads(int requested, int sharers) {
  if (requested > 0) return requested;
  return std::max(1, available_cores() / std::max(1, sharers));
}

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

SharingTuner::SharingTuner(SharingTiming timing) : timing_(timing), active_(ThreadPool::instance().threads() > 1) {
  if (active_) plan_probe();
}

SharingTuner::~SharingTuner() { ThreadPool::instance().set_sharing(true); }

void SharingTuner::plan_probe() {
  plan_.clear();
  shared_s_.clear();
  alone_s_.clear();
  // SA AS SA AS, stored last first.
  for (std::size_t pair = 0; pair < kProbePairs; ++pair) {
    const bool shared_first = pair % 2 == 0;
    plan_.push_back(shared_first);
    plan_.push_back(!shared_first);
  }
  std::reverse(plan_.begin(), plan_.end());
  settled_ = false;
}

void SharingTuner::begin_step() {
  if (!active_) return;
  step_start_ = Clock::now();
  const auto warm = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timing_.warm_s));
  if (first_step_) warm_until_ = step_start_ + warm;
  if (settled_ && step_start_ >= settled_until_) {
    plan_probe();
    if (!choice_) warm_until_ = step_start_ + warm;  // the workers have been idle: shared steps start slow again
  }
  const bool warming = first_step_ || step_start_ < warm_until_;
  timed_ = !settled_ && !warming;
  mode_ = settled_ ? choice_ : warming || plan_.back();
  ThreadPool::instance().set_sharing(mode_);
}

void SharingTuner::end_step() {
  if (!active_) return;
  const auto now = Clock::now();
  change_.clear();
  first_step_ = false;
  ++steps_;
  if (mode_) ++shared_steps_;
  if (!timed_) return;
  (mode_ ? shared_s_ : alone_s_).push_back(std::chrono::duration<double>(now - step_start_).count());
  plan_.pop_back();
  if (!plan_.empty()) return;
  const double shared = median(shared_s_), alone = median(alone_s_);
  const bool choice = shares_after_probe(shared, alone);
  if (choice_ && !choice && !confirming_) {  // sharing lost this probe: the next one, at once, decides
    confirming_ = true;
    plan_probe();
    return;
  }
  confirming_ = false;
  if (choice != choice_) {
    char line[200];
    std::snprintf(line, sizeof line, "%s (median step: %.2f ms shared among %d threads, %.2f ms on one; measured again from time to time)",
                  choice ? "threads: each step's work is shared again" : "threads: each step's work now runs on the calling thread alone",
                  shared * 1e3, ThreadPool::instance().threads(), alone * 1e3);
    change_ = line;
  }
  hold_s_ = hold_s_ > 0 && choice == choice_ ? std::min(2 * hold_s_, timing_.longest_hold_s) : timing_.first_hold_s;
  choice_ = choice;
  settled_ = true;
  ++probes_;
  settled_until_ = now + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(hold_s_));
}

}  // namespace attnlab
