// The threaded paths give the same results as the serial ones: products split by rows or columns or
// batch, row kernels split by rows, elementwise ops by ranges.
#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>

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

}  // namespace
}  // namespace attnlab
