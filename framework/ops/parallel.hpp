// Threads: attnlab runs one thread pool at a time (OpenMP), with OpenBLAS kept at one thread, so the two
// never spin against each other (../shared/XTENSOR_NOTES.md measured 2-4x losses when they do). Large
// matrix products are split across the pool by matmul itself; elementwise ops and row-wise kernels
// split their ranges with parallel_for.
#pragma once

#include <cstddef>
#include <exception>

namespace attnlab {

// Threads used by attnlab's parallel regions (and OpenBLAS set to 1). At least 1.
void set_num_threads(int threads);
int num_threads();

namespace detail {
bool in_parallel_region();
int parallel_threads();
}  // namespace detail

// Calls body(begin, end) on disjoint chunks covering [0, n), in parallel when n is at least 2 * grain
// and more than one thread is configured; serially (one call) otherwise or inside another parallel region.
template <class F>
void parallel_for(std::size_t n, std::size_t grain, F&& body) {
  const int threads = detail::parallel_threads();
  if (threads <= 1 || n < 2 * grain || detail::in_parallel_region()) {
    if (n) body(std::size_t{0}, n);
    return;
  }
  std::size_t chunks = n / grain;
  if (chunks > static_cast<std::size_t>(threads)) chunks = static_cast<std::size_t>(threads);
  // An exception may not leave an OpenMP region: the first one is kept and rethrown after it.
  std::exception_ptr error;
#pragma omp parallel for num_threads(static_cast<int>(chunks)) schedule(static, 1)
  for (std::size_t c = 0; c < chunks; ++c) {
    const std::size_t begin = n * c / chunks, end = n * (c + 1) / chunks;
    try {
      body(begin, end);
    } catch (...) {
#pragma omp critical(attnlab_parallel_for_error)
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace attnlab
