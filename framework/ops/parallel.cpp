#include "framework/ops/parallel.hpp"

#include <omp.h>

#include <algorithm>

#include "framework/ops/blas.hpp"

namespace attnlab {
namespace {
int g_threads = 1;
}

void set_num_threads(int threads) {
  g_threads = std::max(1, threads);
  omp_set_num_threads(g_threads);
  set_blas_threads(1);
}

int num_threads() { return g_threads; }

namespace detail {
bool in_parallel_region() { return omp_in_parallel(); }
int parallel_threads() { return g_threads; }
}  // namespace detail

}  // namespace attnlab
