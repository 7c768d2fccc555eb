// Threads: attnlab runs one thread pool (ThreadPool: the caller and its workers take a region's chunks
// from a counter; idle workers park instead of spinning), with OpenBLAS kept at one thread, so the two
// never run against each other (two pools spinning at once made the work 2-4x slower, measured). Large
// matrix products are split across the pool by matmul itself; elementwise ops and row-wise kernels
// split their ranges with parallel_for.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <type_traits>
#include <vector>

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
// The most threads a process may ask for (the command line's --threads, the Python module's threads).
constexpr int kMaxThreads = 256;

// How long a SharingTuner lets steps run shared before it times them, and how long it keeps a choice
// (seconds). Tests shorten them.
struct SharingTiming {
  // The first steps of a loop, and the first after a stretch alone, run shared slower than they will
  // (on the 2-vCPU VM, 2026-11-28: 1.3-2x for the first tens of milliseconds; the worker's core wakes up
  // and the scheduler often starts the two threads on one core and separates them only later). Timed
  // then, sharing lost most probes of the toy benchmark (`bench gpt --dim 64 --block 16`, 50 steps),
  // where it settles about 1.2x faster.
  double warm_s = 0.25;
  double first_hold_s = 5;
  double longest_hold_s = 120;
};

// Chooses, from measured step times, whether a loop's parallel regions hand chunks to the pool's workers
// or run them all on the calling thread. Sharing loses when another process holds one of the cores (a
// worker descheduled with a chunk in hand holds the step up for a scheduler time slice) and on models so
// small that moving their data between cores costs more than the second core saves. The loop's steps
// run shared and untimed until warm_s has passed (at least its first step: first allocations, cold
// caches); then the tuner times steps alternately shared and alone (kProbePairs pairs, in the order SA AS
// SA AS against drift), turns sharing off only when two probes in a row found the steps alone clearly
// shorter (shares_after_probe), and probes again after first_hold_s, doubling while the choice stays the
// same up to longest_hold_s, since the machine's load changes; a probe after a stretch alone warms up
// shared first, as the loop's start does. The chunks are the same either way, so a run's results do not
// depend on the choice (tested bit for bit). With one thread it does nothing; sharing is back on when
// the tuner goes.
class SharingTuner {
 public:
  explicit SharingTuner(SharingTiming timing = SharingTiming());
  ~SharingTuner();
  SharingTuner(const SharingTuner&) = delete;
  SharingTuner& operator=(const SharingTuner&) = delete;

  void begin_step();
  void end_step();
  // Steps timed so far and how many of them ran shared.
  std::size_t steps() const { return steps_; }
  std::size_t shared_steps() const { return shared_steps_; }
  // Whether it chooses at all (more than one thread), and the probes it has finished with a choice.
  bool active() const { return active_; }
  std::size_t probes() const { return probes_; }
  // When the probe that end_step just finished changed the mode (the first ones too, if they chose to run
  // alone): a sentence saying so, with the probe's median step times; empty otherwise.
  const std::string& change() const { return change_; }

  static constexpr std::size_t kProbePairs = 8;
  // Whether the steps share their work after a probe whose median steps were `shared` and `alone`
  // (seconds): unless alone was at least kAloneLead shorter. A burst of the host's noise lands on a few
  // steps of a probe: with four pairs and the shorter median winning, 2 of 15 runs of the toy on two
  // threads on a noisy 2-vCPU AMD Zen 4 (`bench gpt --threads 2 --dim 64 --block 16 --vocab 16`, 1000
  // steps, 2026-12-02) chose to run alone and ran at 0.6-0.7x the others' speed until the next probe;
  // with eight pairs and the lead, 1 of 15; with a second probe that must agree, none of 20. With a busy
  // loop on one of the two cores, where sharing can lose, the modes were within about a tenth of each
  // other (two threads 88-116k tokens/s of that toy, one thread 104-113k), so the lead costs little there.
  static constexpr double kAloneLead = 0.05;
  static bool shares_after_probe(double shared, double alone) { return alone >= shared * (1 - kAloneLead); }

 private:
  using Clock = std::chrono::steady_clock;
  void plan_probe();

  SharingTiming timing_;
  bool active_;
  std::vector<bool> plan_;  // modes of the probe steps still to run, last first
  std::vector<double> shared_s_, alone_s_;
  bool first_step_ = true;  // the loop's first step is untimed however short the warm-up
  bool timed_ = false;      // whether the current step counts for the probe
  bool settled_ = false, choice_ = true, mode_ = true;
  bool confirming_ = false;  // the probe running checks the last one's choice to run alone
  double hold_s_ = 0;
  Clock::time_point step_start_, settled_until_, warm_until_;
  std::size_t steps_ = 0, shared_steps_ = 0, probes_ = 0;
  std::string change_;
};

// Elements of work per parallel chunk of the elementwise and row-wise ops (about 16K: enough to pay for
// handing a chunk to another core). At 32K the toy's [512, 64] activations and gradients (residual adds,
// the backward's gradient sums, their bias rows) ran on one thread while the other waited; at 16K they
// split in two: the toy step on two threads 0.7-1.2% shorter by its median step, 1.5-2.4% by its mean
// (`bench gpt --threads 2 --layers 2 --heads 4 --dim 64 --block 16 --batch 32 --vocab 16 --steps 4000`,
// the two grains alternated step by step in one process, three runs, AMD Zen 4, 2026-12-07; 8K no
// better); the reference GPT's step, whose tensors split either way, and one thread unchanged.
inline constexpr std::size_t kElementsPerChunk = std::size_t{1} << 14;

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
