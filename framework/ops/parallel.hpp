// Threads: attnlab runs one thread pool (ThreadPool: the caller and its workers take a region's chunks
// from a counter; idle workers park instead of spinning), with OpenBLAS kept at one thread, so the two
// never run against each other (../shared/XTENSOR_NOTES.md measured 2-4x losses when they do). Large
// matrix products are split across the pool by matmul itself; elementwise ops and row-wise kernels
// split their ranges with parallel_for.
#pragma once

#include <cstddef>
#include <type_traits>

#include "framework/ops/thread_pool.hpp"

namespace attnlab {

// Threads used by attnlab's parallel regions (and OpenBLAS set to 1). At least 1.
void set_num_threads(int threads);
int num_threads();
// The machine's cores as this process may use them (its CPU affinity), at least 1.
int available_cores();
// The threads a process uses: `requested` when positive, else available_cores() divided among the
// `sharers` that run at once on this machine (ranks, a comparison's jobs), at least 1.
int default_threads(int requested, int sharers);

// Calls body(begin, end) on disjoint chunks covering [0, n), in parallel when n is at least 2 * grain
// and more than one thread is configured; serially (one call) otherwise or inside another parallel region.
template <class F>
void parallel_for(std::size_t n, std::size_t grain, F&& body) {
  ThreadPool& pool = ThreadPool::instance();
  const std::size_t threads = static_cast<std::size_t>(pool.threads());
  if (threads <= 1 || n < 2 * grain || ThreadPool::in_region()) {
    if (n) body(std::size_t{0}, n);
    return;
  }
  std::size_t chunks = n / grain;
  if (chunks > threads) chunks = threads;
  struct Region {
    std::size_t n, chunks;
    std::remove_reference_t<F>* body;
  } region{n, chunks, &body};
  pool.run(chunks, [](void* context, std::size_t c) {
    const Region& r = *static_cast<const Region*>(context);
    (*r.body)(r.n * c / r.chunks, r.n * (c + 1) / r.chunks);
  }, &region);
}

}  // namespace attnlab
