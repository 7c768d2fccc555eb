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
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    ++generation_;
  }
  wake_.notify_all();
  for (std::thread& w : workers_) w.join();
  workers_.clear();
  std::lock_guard<std::mutex> lock(mutex_);
  stopping_ = false;
}

void ThreadPool::worker_loop() {
  unsigned long long seen = generation_.load();
  for (;;) {
    spin_until([&] { return generation_.load(std::memory_order_acquire) != seen; });
    std::unique_lock<std::mutex> lock(mutex_);
    wake_.wait(lock, [&] { return stopping_ || generation_.load() != seen; });  // stopping_: also when stopped before it began
    if (stopping_) return;
    seen = generation_.load();
    if (!open_) continue;  // that region ended before this worker came
    ++active_;
    lock.unlock();
    work_on();
    lock.lock();
    if (--active_ == 0) finished_.notify_all();
  }
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
    if (done_.fetch_add(1, std::memory_order_acq_rel) + 1 == chunks_) {
      std::lock_guard<std::mutex> lock(mutex_);
      finished_.notify_all();
    }
  }
}

void ThreadPool::run(std::size_t chunks, ChunkFn fn, void* context) {
  if (chunks == 0) return;
  if (workers_.empty() || chunks == 1 || t_in_region) {
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
  {
    std::lock_guard<std::mutex> lock(mutex_);
    fn_ = fn, context_ = context, chunks_ = chunks, error_ = nullptr;
    next_.store(0, std::memory_order_relaxed);
    done_.store(0, std::memory_order_relaxed);
    open_ = true;
    ++generation_;
  }
  wake_.notify_all();
  work_on();
  spin_until([&] { return done_.load(std::memory_order_acquire) == chunks; });
  std::exception_ptr error;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    finished_.wait(lock, [&] { return done_.load() == chunks_; });
    open_ = false;  // no worker joins it any more; wait for those inside to leave
    finished_.wait(lock, [&] { return active_ == 0; });
    error = error_;
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace attnlab
