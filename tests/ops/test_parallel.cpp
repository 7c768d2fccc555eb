// The threaded paths give the same results as the serial ones: products split by rows or columns or
// batch, row kernels split by rows, elementwise ops by ranges.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace attnlab
