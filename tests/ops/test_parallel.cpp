// The threaded paths give the same results as the serial ones: products split by rows or columns or
// batch, row kernels split by rows, elementwise ops by ranges.
#include <gtest/gtest.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <functional>
#include <random>
#include <stdexcept>
#include <thread>
#include <utility>

#include "framework/models/text_models.hpp"
#include "framework/ops/parallel.hpp"
#include "tests/test_util.hpp"

namespace attnlab {
namespace {

// Runs f once on one thread and once on two, and compares every value of the outputs and of the
// gradients it leaves on `inputs`.
void expect_same_on_two_threads(const std::function<Tensor()>& f, const std::vector<Tensor>& inputs) {
  auto run = [&](int threads) {
    set_num_threads(threads);
    for (Tensor t : inputs) t.zero_grad();
    Tensor y = f();
    y.backward(ones(y.shape(), y.dtype()) * 0.5 + 0.25);
    std::vector<std::vector<double>> values{y.to_vector()};
    for (const Tensor& t : inputs) values.push_back(t.grad().to_vector());
    return values;
  };
  const auto serial = run(1), threaded = run(2);
  set_num_threads(1);
  ASSERT_EQ(serial.size(), threaded.size());
  for (std::size_t i = 0; i < serial.size(); ++i) {
    ASSERT_EQ(serial[i].size(), threaded[i].size());
    for (std::size_t j = 0; j < serial[i].size(); ++j)
      EXPECT_NEAR(serial[i][j], threaded[i][j], 1e-4 * (1 + std::fabs(serial[i][j]))) << "output " << i << " element " << j;
  }
}

TEST(Parallel, ParallelForCoversTheRangeOnce) {
  set_num_threads(2);
  std::vector<int> hits(100000, 0);
  parallel_for(hits.size(), 1000, [&](std::size_t b, std::size_t e) {
    for (std::size_t i = b; i < e; ++i) ++hits[i];
  });
  set_num_threads(1);
  for (int h : hits) ASSERT_EQ(h, 1);
}

TEST(Parallel, MatmulSplitsGiveTheSameProducts) {
  Generator gen(1);
  Tensor tall = randn({512, 96}, gen).set_requires_grad(true), w = randn({160, 96}, gen).set_requires_grad(true);
  expect_same_on_two_threads([&] { return matmul(tall, w, false, true); }, {tall, w});  // rows split
  Tensor wide_a = randn({40, 256}, gen).set_requires_grad(true), wide_b = randn({256, 900}, gen).set_requires_grad(true);
  expect_same_on_two_threads([&] { return matmul(wide_a, wide_b); }, {wide_a, wide_b});  // columns split
  Tensor q = randn({6, 4, 64, 16}, gen).set_requires_grad(true), k = randn({6, 4, 64, 16}, gen).set_requires_grad(true);
  expect_same_on_two_threads([&] { return matmul(q, k, false, true); }, {q, k});  // batch split
  // linear's bias is each block's starting value, written by the block's own thread
  Tensor bias = randn({160}, gen).set_requires_grad(true), wide_bias = randn({256}, gen).set_requires_grad(true);
  expect_same_on_two_threads([&] { return linear(tall, w, bias); }, {tall, w, bias});  // rows split
  Tensor few = randn({40, 900}, gen).set_requires_grad(true), many_out = randn({256, 900}, gen).set_requires_grad(true);
  expect_same_on_two_threads([&] { return linear(few, many_out, wide_bias); }, {few, many_out, wide_bias});  // columns split
}

// Where two gradients meet (x feeds two ops), the engine adds them through the adder framework/ops installs,
// split across the threads: the same bits as on one thread (each element is one addition). 300 x 257 is
// more than two of its ranges.
TEST(Parallel, GradientsThatMeetAreSummedBitForBitTheSameOnOneAndTwoThreads) {
  Generator gen(9);
  Tensor x = randn({300, 257}, gen).set_requires_grad(true);
  const Tensor a = randn({300, 257}, gen), b = randn({257}, gen), g = randn({300, 257}, gen);
  auto grads = [&](int threads) {
    set_num_threads(threads);
    x.zero_grad();
    (tanh(x) * a + sigmoid(x) * b + x * x).backward(g);
    return x.grad().to_vector();
  };
  const auto one = grads(1), two = grads(2);
  set_num_threads(1);
  EXPECT_EQ(one, two);
}

TEST(Parallel, RowKernelsAndElementwiseOpsGiveTheSameValues) {
  Generator gen(2);
  Tensor x = randn({300, 257}, gen).set_requires_grad(true), w = randn({257}, gen).set_requires_grad(true),
         b = randn({257}, gen).set_requires_grad(true);
  expect_same_on_two_threads([&] { return softmax(x); }, {x});
  expect_same_on_two_threads([&] { return layer_norm(x, w, b); }, {x, w, b});
  expect_same_on_two_threads([&] { return gelu(x) * x + b; }, {x, b});
  expect_same_on_two_threads([&] { return scaled_masked_softmax(reshape(x, {3, 100, 257}), 0.3, Tensor(), true); }, {x});
  const Tensor targets = uniform({300}, gen, 0, 257, DType::float64).to(DType::int64);
  expect_same_on_two_threads([&] { return cross_entropy(x, targets); }, {x});
}

TEST(Parallel, LayerNormGradientsAreBitForBitTheSameOnOneAndTwoThreads) {
  // The weight and bias gradients are sums over rows, taken in blocks that depend on the rows alone.
  Generator gen(3);
  Tensor x = randn({777, 96}, gen).set_requires_grad(true), w = randn({96}, gen).set_requires_grad(true),
         b = randn({96}, gen).set_requires_grad(true);
  const Tensor g = randn({777, 96}, gen);
  auto grads = [&](int threads) {
    set_num_threads(threads);
    for (Tensor t : {x, w, b}) t.zero_grad();
    layer_norm(x, w, b).backward(g);
    return std::vector<std::vector<double>>{x.grad().to_vector(), w.grad().to_vector(), b.grad().to_vector()};
  };
  const auto one = grads(1), two = grads(2);
  set_num_threads(1);
  EXPECT_EQ(one, two);
}

TEST(Parallel, GeluIsBitForBitTheSameOnOneAndTwoThreads) {
  // Split in whole SIMD blocks: only the tensor's own tail takes the scalar erf.
  Generator gen(4);
  Tensor x = randn({300, 257}, gen).set_requires_grad(true);
  const Tensor g = randn({300, 257}, gen);
  auto run = [&](int threads) {
    set_num_threads(threads);
    x.zero_grad();
    Tensor y = gelu(x);
    y.backward(g);
    return std::vector<std::vector<double>>{y.to_vector(), x.grad().to_vector()};
  };
  const auto one = run(1), two = run(2);
  set_num_threads(1);
  EXPECT_EQ(one, two);
}

TEST(ThreadPool, NestedRegionsRunSeriallyAndBackToBackRegionsAllComplete) {
  set_num_threads(2);
  std::vector<std::atomic<int>> hits(64);
  for (int round = 0; round < 2000; ++round)
    parallel_for(hits.size(), 8, [&](std::size_t b, std::size_t e) {
      for (std::size_t i = b; i < e; ++i) {
        EXPECT_TRUE(ThreadPool::in_region());
        parallel_for(4, 1, [&](std::size_t ib, std::size_t ie) { hits[i] += static_cast<int>(ie - ib); });  // serial inside
      }
    });
  set_num_threads(1);
  for (const auto& h : hits) EXPECT_EQ(h.load(), 2000 * 4);
}

TEST(ThreadPool, ResizingBetweenRegionsWorksAndInsideOneIsRefused) {
  for (int threads : {2, 1, 2, 2, 1}) {
    set_num_threads(threads);
    EXPECT_EQ(ThreadPool::instance().threads(), threads);
    std::atomic<int> sum{0};
    parallel_for(1000, 10, [&](std::size_t b, std::size_t e) { sum += static_cast<int>(e - b); });
    EXPECT_EQ(sum.load(), 1000);
  }
  set_num_threads(2);
  EXPECT_THROW(parallel_for(100, 10, [&](std::size_t, std::size_t) { ThreadPool::instance().resize(1); }), std::logic_error);
  set_num_threads(1);
}

TEST(ThreadPool, AChunksExceptionReachesTheCallerAfterTheOtherChunksRan) {
  set_num_threads(2);
  std::atomic<int> ran{0};
  EXPECT_THROW(ThreadPool::instance().run(
                   8, [](void* context, std::size_t chunk) {
                     ++*static_cast<std::atomic<int>*>(context);
                     if (chunk == 3) throw std::runtime_error("chunk 3");
                   },
                   &ran),
               std::runtime_error);
  EXPECT_EQ(ran.load(), 8);
  set_num_threads(1);
}

// Regions of 1 to 9 chunks back to back, some after a pause long enough for the workers to park (their
// spin is 300 us), some with chunks that sleep (so the caller parks waiting for them), one in fifty
// throwing, over pools of 2, 3 and 4 threads; each region's chunks write into that region's own counters
// on the caller's stack.
void expect_every_chunk_runs_once(int rounds) {
  std::mt19937 rng(5);
  for (int threads : {2, 3, 4}) {
    set_num_threads(threads);
    for (int round = 0; round < rounds; ++round) {
      struct Region {
        std::vector<std::atomic<int>> hits;
        int sleep_us;
        bool throws;
      } region{std::vector<std::atomic<int>>(1 + rng() % 9), rng() % 4 == 0 ? static_cast<int>(rng() % 60) : 0, rng() % 50 == 0};
      bool threw = false;
      try {
        ThreadPool::instance().run(region.hits.size(), [](void* context, std::size_t chunk) {
          Region& r = *static_cast<Region*>(context);
          ++r.hits[chunk];
          if (r.sleep_us) std::this_thread::sleep_for(std::chrono::microseconds(r.sleep_us));
          if (r.throws && chunk == 0) throw std::runtime_error("chunk 0");
        }, &region);
      } catch (const std::runtime_error&) {
        threw = true;
      }
      EXPECT_EQ(threw, region.throws) << "round " << round;
      for (const auto& h : region.hits) ASSERT_EQ(h.load(), 1) << "round " << round << " on " << threads << " threads";
      if (rng() % 5 == 0) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 700));
    }
  }
  set_num_threads(1);
}

TEST(ThreadPool, EveryChunkRunsOnceWhetherWorkersAreSpinningParkedOrStoppedInBetween) {
  expect_every_chunk_runs_once(600);
}

// With every thread on one core, each finds the thread it waits for on its own core and parks without
// spinning (ThreadPool's shares_core): the regions still all complete, every chunk once.
TEST(ThreadPool, EveryChunkRunsOnceWithAllThreadsOnOneCore) {
  set_num_threads(1);
  cpu_set_t before;
  ASSERT_EQ(sched_getaffinity(0, sizeof before, &before), 0);
  const int cpu = sched_getcpu();
  ASSERT_GE(cpu, 0);
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  ASSERT_EQ(sched_setaffinity(0, sizeof one, &one), 0);  // the workers started next inherit it
  expect_every_chunk_runs_once(300);
  set_num_threads(1);  // (also after a failed assertion there) no pinned worker outlives the test
  ASSERT_EQ(sched_setaffinity(0, sizeof before, &before), 0);
}

TEST(ThreadPool, WithSharingOffTheCallerRunsEveryChunk) {
  set_num_threads(2);
  ThreadPool& pool = ThreadPool::instance();
  pool.set_sharing(false);
  struct Seen {
    std::thread::id caller = std::this_thread::get_id();
    std::atomic<int> elsewhere{0};
  } seen;
  for (int round = 0; round < 200; ++round)
    pool.run(4, [](void* context, std::size_t) {
      Seen& s = *static_cast<Seen*>(context);
      if (std::this_thread::get_id() != s.caller) ++s.elsewhere;
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }, &seen);
  pool.set_sharing(true);
  set_num_threads(1);
  EXPECT_EQ(seen.elsewhere.load(), 0);
}

// A region begun on a second thread while the first thread's region is on the workers runs every chunk
// on its own thread (Python threads call into attnlab side by side): the first region's chunks wait until
// the second region has ended, so the two overlap whatever the scheduler does. Before, the second thread
// took over the region the workers were running and one of the two never ended.
TEST(ThreadPool, ARegionFromAnotherThreadWhileOneIsOnTheWorkersRunsOnItsOwnThread) {
  set_num_threads(2);
  ThreadPool& pool = ThreadPool::instance();
  struct Shared {
    std::atomic<bool> first_open{false}, second_done{false};
    std::thread::id second;
    std::vector<std::atomic<int>> hits = std::vector<std::atomic<int>>(8);
    std::atomic<int> elsewhere{0};
  } shared;
  std::thread other([&] {
    shared.second = std::this_thread::get_id();
    while (!shared.first_open.load()) std::this_thread::yield();
    pool.run(shared.hits.size(), [](void* context, std::size_t chunk) {
      Shared& s = *static_cast<Shared*>(context);
      ++s.hits[chunk];
      if (std::this_thread::get_id() != s.second) ++s.elsewhere;
    }, &shared);
    shared.second_done = true;
  });
  pool.run(2, [](void* context, std::size_t) {
    Shared& s = *static_cast<Shared*>(context);
    s.first_open = true;
    while (!s.second_done.load()) std::this_thread::yield();
  }, &shared);
  other.join();
  for (const auto& h : shared.hits) EXPECT_EQ(h.load(), 1);
  EXPECT_EQ(shared.elsewhere.load(), 0);
  std::atomic<int> sum{0};  // and the workers still take the next region
  parallel_for(1000, 10, [&](std::size_t b, std::size_t e) { sum += static_cast<int>(e - b); });
  EXPECT_EQ(sum.load(), 1000);
  set_num_threads(1);
}

// Threads that resize the pool and run regions at once: every region's chunks run once, and the pool
// ends with the size last asked for.
TEST(ThreadPool, ResizingFromOneThreadWhileAnotherRunsRegionsLosesNoChunk) {
  set_num_threads(2);
  std::atomic<bool> stop{false};
  std::atomic<int> regions{0};
  std::thread runner([&] {
    while (!stop.load()) {
      std::vector<std::atomic<int>> hits(6);
      parallel_for(hits.size(), 1, [&](std::size_t b, std::size_t e) {
        for (std::size_t i = b; i < e; ++i) ++hits[i];
      });
      for (const auto& h : hits) ASSERT_EQ(h.load(), 1);
      ++regions;
    }
  });
  for (int round = 0; round < 200; ++round) {
    while (regions.load() < round) std::this_thread::yield();  // the runner keeps up with the resizes
    set_num_threads(round % 3 + 1);
  }
  stop = true;
  runner.join();
  EXPECT_EQ(num_threads(), 199 % 3 + 1);
  set_num_threads(1);
}

// count_waits counts the regions that hand chunks out while it is on, from zero each time it is turned on:
// not a region run serially (one chunk, sharing off), none after it is off. In the last region counted,
// the worker's chunk ends only after the caller's has, so the caller waits for it there.
TEST(ThreadPool, CountsTheRegionsThatHandOutChunksAndTheCallersWaitInThem) {
  set_num_threads(2);
  ThreadPool& pool = ThreadPool::instance();
  const auto region = [&](std::size_t chunks) { pool.run(chunks, [](void*, std::size_t) {}, nullptr); };
  region(2);  // before counting
  pool.count_waits(true);
  for (int i = 0; i < 5; ++i) region(2);
  region(1);
  pool.set_sharing(false);
  region(4);
  pool.set_sharing(true);
  struct Gate {
    std::thread::id caller = std::this_thread::get_id();
    std::atomic<int> started{0};
    std::atomic<bool> caller_done{false};
  } gate;
  pool.run(2, [](void* context, std::size_t) {
    Gate& g = *static_cast<Gate*>(context);
    ++g.started;
    while (g.started.load() < 2) std::this_thread::yield();  // one chunk on each thread
    if (std::this_thread::get_id() == g.caller) {
      g.caller_done = true;
    } else {
      while (!g.caller_done.load()) std::this_thread::yield();
    }
  }, &gate);
  pool.count_waits(false);
  region(2);
  const ThreadPool::Waits counted = pool.waits();
  EXPECT_EQ(counted.regions, 6u);
  EXPECT_GT(counted.seconds, 0.0);
  pool.count_waits(true);
  EXPECT_EQ(pool.waits().regions, 0u);
  EXPECT_EQ(pool.waits().seconds, 0.0);
  pool.count_waits(false);
  set_num_threads(1);
}

// A training step of a small GPT on two threads gives the same loss and gradients, bit for bit, whether
// its regions are shared with the worker or run on the caller alone: the chunks are the same, so the
// sharing tuner's timing-dependent choice cannot change a run.
TEST(ThreadPool, AStepIsBitForBitTheSameWithSharingOnAndOff) {
  ModelConfig config;
  config.encoder.d_model = 64;
  config.encoder.n_heads = 4;
  config.encoder.n_layers = 2;
  DataShape shape;
  shape.vocab_size = shape.num_classes = 32;
  shape.max_len = 32;
  Generator gen(4);
  CausalLM model(config, shape, gen);
  std::vector<std::int64_t> ids(16 * 32), targets(16 * 32);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    ids[i] = static_cast<std::int64_t>(i * 7 % 32);
    targets[i] = static_cast<std::int64_t>(i * 5 % 32);
  }
  set_num_threads(2);
  auto step = [&](bool sharing) {
    ThreadPool::instance().set_sharing(sharing);
    for (Tensor p : model.parameters()) p.zero_grad();
    Tensor loss = model.loss(from_indices(ids, {16, 32}), from_indices(targets, {16, 32}));
    loss.backward();
    std::vector<std::vector<double>> values{loss.to_vector()};
    for (const Tensor& p : model.parameters()) values.push_back(p.grad().to_vector());
    return values;
  };
  const auto shared = step(true), alone = step(false);
  ThreadPool::instance().set_sharing(true);
  set_num_threads(1);
  EXPECT_EQ(shared, alone);
}

// The tuner keeps the mode whose steps were faster: here a "step" is a sleep that is longer in one mode.
// No warm-up: the probe starts after the first step. Running alone is chosen only by a second probe
// that agrees with the first.
bool settles_on_sharing(bool sharing_is_faster) {
  SharingTiming timing;
  timing.warm_s = 0;
  SharingTuner tuner(timing);
  auto step = [&] {
    tuner.begin_step();
    const bool fast = ThreadPool::instance().sharing() == sharing_is_faster;
    std::this_thread::sleep_for(std::chrono::milliseconds(fast ? 1 : 8));
    tuner.end_step();
  };
  const std::size_t probes = sharing_is_faster ? 1 : 2, probe_steps = probes * 2 * SharingTuner::kProbePairs;
  for (std::size_t i = 0; i < 1 + probe_steps; ++i) {  // the first step, then the probes
    step();
    const bool last = i == probe_steps;
    // The mode changes (and says so) only when the second probe ends choosing to run alone.
    EXPECT_EQ(tuner.change().empty(), !last || sharing_is_faster) << "step " << i << ": " << tuner.change();
  }
  if (!sharing_is_faster) {
    EXPECT_NE(tuner.change().find("calling thread alone"), std::string::npos) << tuner.change();
  }
  const std::size_t probe_shared = tuner.shared_steps();
  for (int i = 0; i < 5; ++i) step();
  EXPECT_EQ(probe_shared, 1 + probes * SharingTuner::kProbePairs);  // untimed first step shared, then half of each probe
  const bool settled = tuner.shared_steps() - probe_shared == 5;
  EXPECT_TRUE(settled || tuner.shared_steps() == probe_shared) << "the settled steps ran in mixed modes";
  return settled;
}

TEST(SharingTuner, KeepsWhicheverModeRanFasterAndSharesAgainWhenItGoes) {
  set_num_threads(2);
  EXPECT_TRUE(settles_on_sharing(true));
  EXPECT_TRUE(ThreadPool::instance().sharing());
  EXPECT_FALSE(settles_on_sharing(false));
  EXPECT_TRUE(ThreadPool::instance().sharing());  // turned back on when the tuner went
  set_num_threads(1);
  SharingTuner idle;  // one thread: nothing to choose
  idle.begin_step();
  idle.end_step();
  EXPECT_EQ(idle.steps(), 0u);
  EXPECT_TRUE(ThreadPool::instance().sharing());
}

// A probe turns sharing off only when the steps alone were clearly shorter: a few of its steps slowed by
// the host's noise must not leave a run on one thread until the next probe.
TEST(SharingTuner, RunsAloneOnlyWhenAProbeFoundItClearlyFaster) {
  EXPECT_TRUE(SharingTuner::shares_after_probe(0.010, 0.012));   // shared was faster
  EXPECT_TRUE(SharingTuner::shares_after_probe(0.010, 0.010));   // even
  EXPECT_TRUE(SharingTuner::shares_after_probe(0.010, 0.0097));  // alone 3% shorter: within the lead
  EXPECT_FALSE(SharingTuner::shares_after_probe(0.010, 0.009));  // alone 10% shorter
  EXPECT_FALSE(SharingTuner::shares_after_probe(0.010, 0.010 * (1 - SharingTuner::kAloneLead) * 0.999));
}

// Nothing is timed, and every step runs shared, until the warm-up has passed: at the loop's start and
// again when a probe follows a stretch alone. Each check compares times read on either side of the
// tuner's own reading, so it holds however late a step starts.
TEST(SharingTuner, RunsSharedUntilTheWarmUpHasPassed) {
  set_num_threads(2);
  using Clock = std::chrono::steady_clock;
  SharingTiming timing;
  timing.warm_s = 0.02;
  timing.first_hold_s = 0.03;
  SharingTuner tuner(timing);
  const auto warm = std::chrono::duration<double>(timing.warm_s);
  Clock::time_point warm_from = Clock::now();  // at or before the tuner's start of the warm-up
  // 0: the loop's warm-up and first two probes, which choose to run alone; 1: alone until the hold ends;
  // 2: the next probe's warm-up, until its first step alone; 3: done.
  int phase = 0;
  for (int i = 0; i < 5000 && phase < 3; ++i) {
    const Clock::time_point before = Clock::now();
    tuner.begin_step();
    const bool shared = ThreadPool::instance().sharing();
    if (phase == 1 && shared) warm_from = before, phase = 2;
    if (!shared) {
      EXPECT_GE(Clock::now() - warm_from, warm) << "step " << i << " ran alone during a warm-up";
      if (phase == 2) phase = 3;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(shared ? 8 : 1));  // alone is faster
    tuner.end_step();
    if (phase == 0 && !tuner.change().empty()) {
      EXPECT_NE(tuner.change().find("calling thread alone"), std::string::npos) << tuner.change();
      phase = 1;
    }
  }
  EXPECT_EQ(phase, 3) << "the tuner did not probe again after its hold";
  ThreadPool::instance().set_sharing(true);
  set_num_threads(1);
}

}  // namespace
}  // namespace attnlab
