#include "framework/ops/parallel.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>

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

}  // namespace attnlab
