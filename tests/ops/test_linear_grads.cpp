// A Linear's gradients on the threads (linear_grads, framework/ops/matmul.cpp): the input and weight
// gradients side by side, the bias's sum and the caller's next step (then_x) on the input gradient's
// thread (or after both, across the threads, when the input gradient is large), and the fused Linears
// that take theirs there; each the same bits whoever runs which chunk.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <stdexcept>
#include <tuple>
#include <utility>

#include "framework/autograd/grad_mode.hpp"
#include "framework/ops/ops.hpp"
#include "framework/ops/parallel.hpp"
#include "tests/test_util.hpp"

namespace attnlab {
namespace {

// A Linear's two gradients run side by side (each product on its own half of the threads), the bias's
// summed by the input gradient's thread: on 1, 2 and 3 threads, alone or together, they are the products
// g W and g^T x and the column sums of g (the same bits as sum_to), and sums of nothing are zeros.
TEST(LinearGrads, SideBySideAreTheTwoProductsAndTheBiasSum) {
  Generator gen(7);
  const Tensor g = randn({3, 170, 48}, gen, DType::float64), x = randn({3, 170, 80}, gen, DType::float64),
               w = randn({48, 80}, gen, DType::float64);
  const Tensor want_x = matmul(g, w), want_w = matmul(reshape(g, {510, 48}), reshape(x, {510, 80}), true, false);
  const std::vector<double> want_b = sum_to(g, {48}).to_vector();
  const auto expect_near = [](const Tensor& got, const Tensor& want, double tol) {
    ASSERT_EQ(got.shape(), want.shape());
    const std::vector<double> a = got.to_vector(), b = want.to_vector();
    for (std::size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], tol * (1 + std::fabs(b[i]))) << "element " << i;
  };
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    for (const auto& [dx, dw] : {std::pair{true, true}, std::pair{true, false}, std::pair{false, true}, std::pair{false, false}})
      for (bool db : {false, true}) {
        const LinearGrads grads = linear_grads(g, dw ? x : Tensor(), w, dx, dw, db);
        EXPECT_EQ(grads.x.defined(), dx);
        EXPECT_EQ(grads.weight.defined(), dw);
        ASSERT_EQ(grads.bias.defined(), db);
        if (dx) expect_near(grads.x, want_x, 1e-12);
        if (dw) expect_near(grads.weight, want_w, 1e-12);
        if (db) {
          EXPECT_EQ(grads.bias.to_vector(), want_b) << threads << " threads, dx " << dx << ", dW " << dw;
        }
      }
  }
  set_num_threads(2);
  const LinearGrads none = linear_grads(zeros({4, 0}), zeros({4, 5}), zeros({0, 5}), true, true, true);  // no output features
  expect_near(none.x, zeros({4, 5}), 0);
  EXPECT_EQ(none.weight.shape(), (Shape{0, 5}));
  EXPECT_EQ(none.bias.shape(), (Shape{0}));
  const LinearGrads no_rows = linear_grads(zeros({0, 3}), zeros({0, 5}), zeros({3, 5}), true, true, true);  // sums of nothing
  expect_near(no_rows.bias, zeros({3}), 0);
  EXPECT_THROW(linear_grads(zeros({4, 3}), zeros({5, 5}), zeros({3, 5}), true, true), std::invalid_argument);  // x's rows
  set_num_threads(1);
}

// On two threads the thread of the input gradient also takes the weight gradient's last rows when they
// are worth it (matmul.cpp, products_side_by_side; a [160, 64] weight over 2100 rows moves 16): the
// gradients are still the two products, and the blocks are fixed by the shapes, so the caller running
// every chunk itself (sharing off) gives the same bits.
TEST(LinearGrads, WithTheWeightGradientsLastRowsMovedAreTheTwoProductsWhoeverRunsThem) {
  Generator gen(8);
  for (const auto& [rows, out, in] : {std::tuple{2100, 160, 64}, std::tuple{777, 48, 80}}) {
    const Tensor g = randn({static_cast<std::size_t>(rows), static_cast<std::size_t>(out)}, gen, DType::float64),
                 x = randn({static_cast<std::size_t>(rows), static_cast<std::size_t>(in)}, gen, DType::float64),
                 w = randn({static_cast<std::size_t>(out), static_cast<std::size_t>(in)}, gen, DType::float64);
    set_num_threads(1);
    const Tensor want_x = matmul(g, w), want_w = matmul(g, x, true, false);
    set_num_threads(2);
    ThreadPool& pool = ThreadPool::instance();
    const LinearGrads shared = linear_grads(g, x, w, true, true, true);
    pool.set_sharing(false);
    const LinearGrads alone = linear_grads(g, x, w, true, true, true);
    pool.set_sharing(true);
    set_num_threads(1);
    for (const auto& [got, want] : {std::pair{shared.x, want_x}, std::pair{shared.weight, want_w}}) {
      const std::vector<double> a = got.to_vector(), b = want.to_vector();
      ASSERT_EQ(a.size(), b.size());
      for (std::size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-12 * (1 + std::fabs(b[i]))) << rows << " rows, element " << i;
    }
    EXPECT_EQ(shared.x.to_vector(), alone.x.to_vector()) << rows << " rows";
    EXPECT_EQ(shared.weight.to_vector(), alone.weight.to_vector()) << rows << " rows";
    EXPECT_EQ(shared.bias.to_vector(), sum_to(g, {static_cast<std::size_t>(out)}).to_vector()) << rows << " rows";
    EXPECT_EQ(shared.bias.to_vector(), alone.bias.to_vector()) << rows << " rows";
  }
}

// then_x runs once, after dx is whole (it reads every element), on 1 to 3 threads, whether the
// products run side by side or dx alone; also when there is nothing to sum; never without dx.
TEST(LinearGrads, RunThenOnTheFinishedInputGradientOnce) {
  Generator gen(10);
  const Tensor g = randn({333, 48}, gen, DType::float64), x = randn({333, 80}, gen, DType::float64), w = randn({48, 80}, gen, DType::float64);
  const std::vector<double> want = matmul(g, w).to_vector();
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    for (bool dw : {true, false}) {
      int calls = 0;
      std::vector<double> seen;
      const LinearGrads grads = linear_grads(g, x, w, true, dw, true, [&](Tensor& dx) {
        ++calls;
        seen = dx.to_vector();
        dx = dx * 2.0;  // what then_x leaves in dx is what the caller gets
      });
      EXPECT_EQ(calls, 1) << threads << " threads";
      EXPECT_EQ(seen, want) << threads << " threads";
      EXPECT_EQ(grads.x.to_vector(), (matmul(g, w) * 2.0).to_vector()) << threads << " threads";
    }
    {  // whichever thread runs it, then_x sees the caller's grad mode (it is per thread)
      NoGradGuard no_grad;
      for (int i = 0; i < 20; ++i) linear_grads(g, x, w, true, true, false, [&](Tensor&) { EXPECT_FALSE(grad_enabled()); });
    }
    linear_grads(g, x, w, true, true, false, [&](Tensor&) { EXPECT_TRUE(grad_enabled()); });
    int calls = 0;
    linear_grads(g, x, w, false, true, true, [&](Tensor&) { ++calls; });
    EXPECT_EQ(calls, 0) << "no dx, no then_x";
    linear_grads(zeros({0, 48}, DType::float64), zeros({0, 80}, DType::float64), w, true, true, true, [&](Tensor& dx) {
      ++calls;
      EXPECT_EQ(dx.shape(), (Shape{0, 80}));
    });
    EXPECT_EQ(calls, 1) << "sums of nothing";
  }
  set_num_threads(1);
}

// The fused Linears run the next step of their backward (the norm's, GELU's slope) on the input
// gradient's thread, inside the products' region (an input gradient of 777 x 64), or after the region,
// split across the threads (777 x 96, at least 4 kElementsPerChunk elements): every gradient has the same
// bits on one thread, on two, and on two with the caller running every chunk (sharing off).
TEST(LinearGrads, FusedLinearGradientsAreBitForBitTheSameOnOneAndTwoThreadsShared) {
  for (std::size_t in : {64, 96}) {
    ASSERT_EQ(777 * in >= 4 * kElementsPerChunk, in == 96);
    Generator gen(11);
    Tensor h = randn({777, in}, gen).set_requires_grad(true), fc = randn({160, in}, gen).set_requires_grad(true),
           bias = randn({160}, gen).set_requires_grad(true), nw = randn({in}, gen).set_requires_grad(true),
           nb = randn({in}, gen).set_requires_grad(true);
    const Tensor g = randn({777, 160}, gen);
    const std::vector<std::pair<std::function<Tensor()>, std::vector<Tensor>>> cases{
        {[&] { return layer_norm_linear(h, nw, nb, 1e-5, fc, bias); }, {h, nw, nb, fc, bias}},
        {[&] { return gelu_linear(h, fc, bias, nb); }, {h, fc, bias, nb}},
        {[&] { return gelu_linear(h, fc, bias); }, {h, fc, bias}}};
    ThreadPool& pool = ThreadPool::instance();
    for (std::size_t c = 0; c < cases.size(); ++c) {
      auto grads = [&](int threads, bool sharing) {
        set_num_threads(threads);
        pool.set_sharing(sharing);
        for (Tensor t : cases[c].second) t.zero_grad();
        cases[c].first().backward(g);
        std::vector<std::vector<double>> all;
        for (const Tensor& t : cases[c].second) all.push_back(t.grad().to_vector());
        return all;
      };
      const auto one = grads(1, true), two = grads(2, true), alone = grads(2, false);
      pool.set_sharing(true);
      set_num_threads(1);
      EXPECT_EQ(one, two) << "case " << c << ", width " << in;
      EXPECT_EQ(two, alone) << "case " << c << ", width " << in;
    }
  }
}

}  // namespace
}  // namespace attnlab
