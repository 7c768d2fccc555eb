// attnlab's one thread pool: the caller and N - 1 workers share the chunks of a parallel region, taking
// them one at a time from a counter, so a worker that is late (its core busy with another process) leaves
// its chunks to whoever is free instead of holding up a barrier. Workers that find nothing to do spin for
// up to 300 microseconds (the next region usually follows within a few) and then park on a condition
// variable; a caller waiting for a chunk that is still running spins as long and then parks too, which
// lets the operating system put the late worker on the caller's core. A thread that finds itself on the
// core of the thread it waits for parks at once (the scheduler often starts both on one core), so a
// spin never takes the core from the work it waits for. Nothing spins for longer than that: with one
// core taken by another process, two threads cost about what one does (OpenMP's teams spun at their
// barriers and ran 6x slower there).
//
// Whether sharing pays can be switched per stretch of work (set_sharing): with sharing off the caller
// runs every chunk itself, the same chunks in the same order of results, so what a region computes does
// not depend on it (SharingTuner, parallel.hpp, decides from measured step times).
//
// The hand-off itself takes no lock: a region is published by atomics (open_, generation_) and its end
// is seen in atomics (done_, active_); the mutex and condition variables are touched only by a thread
// that parks and by whoever must wake it (counted in sleepers_ / caller_parked_). On a 2-vCPU VM a
// region of two 20-microsecond chunks took 38 us with the mutex taken at every hand-off, 23 us without.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace attnlab {

class ThreadPool {
 public:
  // A chunk's work: fn(context, chunk).
  using ChunkFn = void (*)(void* context, std::size_t chunk);

  static ThreadPool& instance();
  ~ThreadPool();

  // One thread at a time drives the workers. run and resize may be called from any thread (Python
  // threads call into attnlab side by side): a region begun while another thread's region is on the
  // workers runs its chunks serially on its own thread, the same chunks, so the same results; a run
  // from inside a chunk runs serially on that chunk's thread.
  //
  // Threads taking part in a region, the caller included (at least 1). Starts or stops workers, once no
  // other thread's region is on them; refused (std::logic_error) from inside a chunk, where it would wait
  // for its own thread.
  void resize(int threads);
  int threads() const { return threads_.load(std::memory_order_relaxed); }
  // Whether the calling thread is running a chunk (a region inside a chunk runs serially).
  static bool in_region();

  // Runs fn(context, c) for every c in [0, chunks) and returns when all have run; the first exception a
  // chunk throws is rethrown here once every chunk has run, in parallel or serially alike.
  void run(std::size_t chunks, ChunkFn fn, void* context);
  // Whether regions hand chunks to the workers (true at first); with false the caller runs them all.
  void set_sharing(bool on) { sharing_.store(on, std::memory_order_relaxed); }
  bool sharing() const { return sharing_.load(std::memory_order_relaxed); }

  // The regions that handed out chunks since count_waits(true), and the caller's time in them after its
  // last chunk, waiting for chunks still running on workers: a worker that came late, or whose chunks
  // took longer than the caller's (bench gpt reports it as a share of the step). Counted only while on;
  // count_waits(true) starts from zero.
  struct Waits {
    std::size_t regions = 0;
    double seconds = 0;
  };
  void count_waits(bool on);
  Waits waits() const { return waits_; }

 private:
  ThreadPool() = default;
  // A worker's life; `seen` the generation when it was made, so that a region opened before the thread
  // first runs is still one it joins.
  void worker_loop(std::atomic<int>& my_cpu, unsigned long long seen);
  void work_on();  // takes and runs chunks of the current region until none is left
  void stop_workers();
  template <class Done>
  void caller_wait(Done done);  // spins, then parks until done()
  void wake_caller();
  void run_on_workers(std::size_t chunks, ChunkFn fn, void* context);  // with driven_ claimed

  std::vector<std::thread> workers_;               // (the thread that holds driven_)
  std::atomic<int> threads_{1};                     // workers_.size() + 1
  std::atomic<bool> driven_{false};                 // a thread is driving the workers (a region, or resize)
  std::unique_ptr<std::atomic<int>[]> worker_cpu_;  // the core each worker joined its last region on (-1: parked)
  std::atomic<int> caller_cpu_{-1};                 // the core the caller last opened or finished a region on
  std::mutex mutex_;
  std::condition_variable wake_, finished_;
  // The region being run: written by the caller only while it is closed and no worker is inside.
  ChunkFn fn_ = nullptr;
  void* context_ = nullptr;
  std::size_t chunks_ = 0;
  std::exception_ptr error_;                        // (mutex)
  std::atomic<bool> open_{false};                   // workers may join the current region
  std::atomic<bool> stopping_{false};
  std::atomic<unsigned long long> generation_{0};   // moves on with every region and at stop
  std::atomic<int> sleepers_{0};                    // workers parked (or about to) on wake_
  std::atomic<bool> caller_parked_{false};          // the caller parked (or about to) on finished_
  std::atomic<bool> sharing_{true};
  bool counting_waits_ = false;  // (the thread that drives the step: bench gpt alone counts)
  Waits waits_;                  // (the same)
  alignas(64) std::atomic<int> active_{0};          // workers inside a region (or checking whether one is open)
  alignas(64) std::atomic<std::size_t> next_{0};    // the next chunk to take
  alignas(64) std::atomic<std::size_t> done_{0};    // chunks finished
};

}  // namespace attnlab
