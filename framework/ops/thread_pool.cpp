#include "framework/ops/thread_pool.hpp"

#include <chrono>
#include <stdexcept>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace attnlab {
namespace {

thread_local bool t_in_region = false;

// How long a thread that has nothing to do keeps looking before it parks: long enough to catch the next
// region of a training step (they follow each other within microseconds), short enough that a thread
// whose core another process wants gives it up at once.
constexpr std::chrono::microseconds kSpin{30};

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

// Spins until done() or kSpin has passed; returns done().
template <class Done>
bool spin_until(Done done) {
  const auto until = std::chrono::steady_clock::now() + kSpin;
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (done()) return true;
      cpu_relax();
    }
    if (std::chrono::steady_clock::now() >= until) return done();
  }
}

// Marks the calling thread as inside a chunk for the chunk's duration.
struct InRegion {
  bool was = t_in_region;
  InRegion() { t_in_region = true; }
  ~InRegion() { t_in_region = was; }
};

}  // namespace

ThreadPool& ThreadPool::instance() {
  static ThreadPool* pool = new ThreadPool();  // never destroyed: its parked workers end with the process
  return *pool;
}

ThreadPool::~ThreadPool() { stop_workers(); }

bool ThreadPool::in_region() { return t_in_region; }

void ThreadPool::resize(int threads) {
  if (t_in_region) throw std::logic_error("ThreadPool::resize called inside a parallel region (a worker cannot stop itself)");
  if (threads < 1) threads = 1;
  if (threads == this->threads()) return;
  stop_workers();
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

void ThreadPool::stop_workers() {
  if (workers_.empty()) return;
  stopping_.store(true);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++generation_;
  }
  wake_.notify_all();
  for (std::thread& w : workers_) w.join();
  workers_.clear();
  stopping_.store(false);
}

// The ordering that makes the lock-free hand-off safe, all on sequentially consistent atomics:
// - a worker announces itself in active_ before it reads open_, and the caller closes open_ before it
//   waits for active_ to reach 0, so either the caller waits for that worker or the worker sees the
//   region closed and touches nothing of it;
// - a parking thread announces itself (sleepers_, caller_parked_) under the mutex before its last look
//   at what it waits for, and whoever changes that looks at the announcement afterwards and notifies
//   under the mutex, so no wake-up is lost.
void ThreadPool::worker_loop() {
  unsigned long long seen = generation_.load();
  for (;;) {
    const auto moved = [&] { return generation_.load() != seen || stopping_.load(); };
    if (!spin_until(moved)) {
      std::unique_lock<std::mutex> lock(mutex_);
      ++sleepers_;
      wake_.wait(lock, moved);
      --sleepers_;
    }
    if (stopping_.load()) return;
    seen = generation_.load();
    ++active_;
    if (open_.load()) work_on();  // the region that is open now (perhaps newer than `seen`): any is fine
    if (--active_ == 0 && caller_parked_.load()) wake_caller();
  }
}

void ThreadPool::wake_caller() {
  std::lock_guard<std::mutex> lock(mutex_);
  finished_.notify_all();
}

void ThreadPool::work_on() {
  for (;;) {
    const std::size_t chunk = next_.fetch_add(1, std::memory_order_relaxed);
    if (chunk >= chunks_) return;
    try {
      InRegion inside;
      fn_(context_, chunk);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!error_) error_ = std::current_exception();
    }
    if (done_.fetch_add(1) + 1 == chunks_ && caller_parked_.load()) wake_caller();
  }
}

template <class Done>
void ThreadPool::caller_wait(Done done) {
  if (spin_until(done)) return;
  std::unique_lock<std::mutex> lock(mutex_);
  caller_parked_.store(true);
  finished_.wait(lock, done);
  caller_parked_.store(false);
}

void ThreadPool::run(std::size_t chunks, ChunkFn fn, void* context) {
  if (chunks == 0) return;
  if (workers_.empty() || chunks == 1 || t_in_region || !sharing_) {
    InRegion inside;  // a region inside this one runs serially too
    std::exception_ptr error;
    for (std::size_t c = 0; c < chunks; ++c) {
      try {
        fn(context, c);
      } catch (...) {
        if (!error) error = std::current_exception();
      }
    }
    if (error) std::rethrow_exception(error);
    return;
  }
  // No worker is inside a region (the last run waited for active_ to reach 0) and open_ is false, so
  // the region's fields are the caller's to write.
  fn_ = fn, context_ = context, chunks_ = chunks, error_ = nullptr;
  next_.store(0, std::memory_order_relaxed);
  done_.store(0, std::memory_order_relaxed);
  open_.store(true);
  ++generation_;
  if (sleepers_.load() > 0) {
    { std::lock_guard<std::mutex> lock(mutex_); }  // a worker between its last look and its wait holds the mutex
    wake_.notify_all();
  }
  work_on();
  caller_wait([&] { return done_.load() == chunks; });
  open_.store(false);
  caller_wait([&] { return active_.load() == 0; });
  if (error_) {
    std::exception_ptr error = error_;
    error_ = nullptr;
    std::rethrow_exception(error);
  }
}

}  // namespace attnlab
