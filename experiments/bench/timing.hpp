// How the benchmarks time repeated work: a step run at least `min_runs` times and until `min_seconds` have
// passed, with the total time and the fastest single run (the one a machine shared with other work
// disturbed least).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>

namespace attnlab::bench {

struct Timing {
  double seconds = 0;  // all runs, first start to last end
  std::size_t runs = 0;
  double fastest = 0;  // seconds of the fastest run
};

template <class F>
Timing time_runs(std::size_t min_runs, double min_seconds, F&& step) {
  using Clock = std::chrono::steady_clock;
  Timing t;
  const auto start = Clock::now();
  while (t.runs < min_runs || t.seconds < min_seconds) {
    const auto before = Clock::now();
    step();
    const auto after = Clock::now();
    const double took = std::chrono::duration<double>(after - before).count();
    t.fastest = t.runs == 0 ? took : std::min(t.fastest, took);
    ++t.runs;
    t.seconds = std::chrono::duration<double>(after - start).count();
  }
  return t;
}

}  // namespace attnlab::bench
