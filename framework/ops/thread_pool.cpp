#include "framework/ops/thread_pool.hpp"

#include <chrono>
#include <stdexcept>

#if defined(__linux__)
#include <sched.h>
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace attnlab {
namespace {

thread_local bool t_in_region = false;

// How long a thread that has nothing to do keeps looking before it parks: long enough to catch most
// regions of a training step (they follow each other within microseconds, the longest serial stretches
// in tens to hundreds), short enough that a core another process wants is given up within a fraction of
// the scheduler's time slice. A thread stops sooner when it finds itself on the core of the thread it is
// waiting for, whose work its spinning would only delay (see shares_core below).
constexpr std::chrono::microseconds kSpin{300};

// The core the calling thread runs on (glibc reads it from rseq or the vDSO: no system call), or -1.
int current_cpu() {
#if defined(__linux__)
  return sched_getcpu();
#else
  return -1;
#endif
}

bool same_cpu(int mine, int theirs) { return mine >= 0 && mine == theirs; }

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

// Spins until done(), kSpin has passed or shares_core() says the thread being waited for is on this
// core; returns done().
template <class Done, class SharesCore>
bool spin_until(Done done, SharesCore shares_core) {
  const auto until = std::chrono::steady_clock::now() + kSpin;
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (done()) return true;
      cpu_relax();
    }
    if (std::chrono::steady_clock::now() >= until || shares_core()) return done();
  }
}

// Marks the calling thread as inside a chunk for the chunk's duration.
struct InRegion {
  bool was = t_in_region;
  InRegion() { t_in_region = true; }
  ~InRegion() { t_in_region = was; }
};

// Every chunk of a region on the calling thread, in order; the first exception is rethrown after all ran.
void run_serially(std::size_t chunks, ThreadPool::ChunkFn fn, void* context) {
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
}

// Holds ThreadPool's driven_ flag from a successful claim to the end of the scope.
class Drive {
 public:
  explicit Drive(std::atomic<bool>& flag) : flag_(flag), held_(!flag.exchange(true, std::memory_order_acquire)) {}
  ~Drive() {
    if (held_) flag_.store(false, std::memory_order_release);
  }
  Drive(const Drive&) = delete;
  Drive& operator=(const Drive&) = delete;
  bool held() const { return held_; }

 private:
  std::atomic<bool>& flag_;
  bool held_;
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
  for (;;) {  // another thread's region on the workers ends first (regions are short)
    const Drive drive(driven_);
    if (!drive.held()) {
      std::this_thread::yield();
      continue;
    }
    if (threads == this->threads()) return;
    stop_workers();
    worker_cpu_.reset(new std::atomic<int>[static_cast<std::size_t>(threads - 1)]);
    for (int i = 0; i + 1 < threads; ++i) {
      std::atomic<int>& cpu = worker_cpu_[static_cast<std::size_t>(i)];
      cpu.store(-1);
      workers_.emplace_back([this, &cpu, seen = generation_.load()] { worker_loop(cpu, seen); });
    }
    threads_.store(threads, std::memory_order_relaxed);
    return;
  }
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
// The cores in caller_cpu_ and worker_cpu_ only shorten spins: a stale one costs a park or a spin, never
// a region's result.
void ThreadPool::worker_loop(std::atomic<int>& my_cpu, unsigned long long seen) {
  for (;;) {
    const auto moved = [&] { return generation_.load() != seen || stopping_.load(); };
    // Between regions the caller runs the step's serial work; on its core this thread would delay it.
    const auto shares_core = [&] { return same_cpu(current_cpu(), caller_cpu_.load(std::memory_order_relaxed)); };
    if (!spin_until(moved, shares_core)) {
      my_cpu.store(-1, std::memory_order_relaxed);
      std::unique_lock<std::mutex> lock(mutex_);
      ++sleepers_;
      wake_.wait(lock, moved);
      --sleepers_;
    }
    if (stopping_.load()) return;
    seen = generation_.load();
    my_cpu.store(current_cpu(), std::memory_order_relaxed);
    ++active_;
    if (open_.load()) work_on();  // the region that is open now (perhaps newer than `seen`): any is fine
    if (--active_ == 0 && caller_parked_.load()) wake_caller();
  }
}

void ThreadPool::count_waits(bool on) {
  if (on) waits_ = Waits();
  counting_waits_ = on;
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
  // The caller waits for chunks still running on workers: one on its core needs the core, not a spinner.
  const auto shares_core = [&] {
    const int cpu = current_cpu();
    for (std::size_t i = 0; i < workers_.size(); ++i)
      if (same_cpu(cpu, worker_cpu_[i].load(std::memory_order_relaxed))) return true;
    return false;
  };
  if (spin_until(done, shares_core)) return;
  std::unique_lock<std::mutex> lock(mutex_);
  caller_parked_.store(true);
  finished_.wait(lock, done);
  caller_parked_.store(false);
}

void ThreadPool::run(std::size_t chunks, ChunkFn fn, void* context) {
  if (chunks == 0) return;
  if (chunks == 1 || t_in_region || !sharing() || threads() == 1) return run_serially(chunks, fn, context);
  const Drive drive(driven_);
  // Another thread drives the workers (or resizes them): this region stays on its own thread.
  if (!drive.held() || workers_.empty()) return run_serially(chunks, fn, context);
  run_on_workers(chunks, fn, context);
}

void ThreadPool::run_on_workers(std::size_t chunks, ChunkFn fn, void* context) {
  // No worker is inside a region (the last run waited for active_ to reach 0) and open_ is false, so
  // the region's fields are the caller's to write.
  fn_ = fn, context_ = context, chunks_ = chunks, error_ = nullptr;
  next_.store(0, std::memory_order_relaxed);
  done_.store(0, std::memory_order_relaxed);
  caller_cpu_.store(current_cpu(), std::memory_order_relaxed);
  open_.store(true);
  ++generation_;
  if (sleepers_.load() > 0) {
    { std::lock_guard<std::mutex> lock(mutex_); }  // a worker between its last look and its wait holds the mutex
    wake_.notify_all();
  }
  work_on();
  const auto waited_from = counting_waits_ ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point();
  caller_wait([&] { return done_.load() == chunks; });
  open_.store(false);
  caller_wait([&] { return active_.load() == 0; });
  if (counting_waits_) {
    ++waits_.regions;
    waits_.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - waited_from).count();
  }
  caller_cpu_.store(current_cpu(), std::memory_order_relaxed);  // where the serial work after it runs
  if (error_) {
    std::exception_ptr error = error_;
    error_ = nullptr;
    std::rethrow_exception(error);
  }
}

}  // namespace attnlab
