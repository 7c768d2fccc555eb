// The backward engine: accumulation, shared subgraphs, graph release, no-grad, deep graphs, memory.
#include <gtest/gtest.h>

#include "framework/autograd/node.hpp"
#include "framework/ops/ops.hpp"
#include "tests/test_util.hpp"

namespace attnlab {
namespace {

TEST(Engine, GradientsAccumulateAcrossBackwardCalls) {
  Tensor x = from_vector({1.0, 2.0}, {2}).set_requires_grad(true);
  sum(x * 3.0).backward();
  testing::expect_values(x.grad(), {3, 3});
  sum(x * x).backward();  // + 2x
  testing::expect_values(x.grad(), {5, 7});
  x.zero_grad();
  EXPECT_FALSE(x.grad().defined());
  sum(x).backward();
  testing::expect_values(x.grad(), {1, 1});
}

TEST(Engine, SharedSubgraphSumsBothPaths) {
  // y = a * b with a = x^2 and b = x + 1 both using x: dy/dx = 2x (x + 1) + x^2
  Tensor x = from_vector({3.0}, {1}, DType::float64).set_requires_grad(true);
  Tensor a = x * x;
  Tensor b = x + 1.0;
  sum(a * b).backward();
  EXPECT_DOUBLE_EQ(x.grad().item(), 2 * 3 * 4 + 9);
}

TEST(Engine, GradientsAddedInPlaceNeverChangeATensorSomeoneElseHolds) {
  // The engine adds into a gradient in place only when nothing else holds it (engine.cpp's sole_owner).
  Tensor x = from_vector({1.0, 2.0}, {2}, DType::float64).set_requires_grad(true);
  const Tensor seed = from_vector({0.5, -1.0}, {2}, DType::float64);
  (x + x).backward(seed);  // add hands one gradient tensor to both of its inputs
  testing::expect_values(x.grad(), {1.0, -2.0});
  testing::expect_values(seed, {0.5, -1.0});  // the caller's seed is untouched
  const Tensor held = x.grad();
  Tensor y = x * 2.0;
  y.backward(seed, /*retain_graph=*/true);
  y.backward(seed);  // a retained graph, twice: the leaf's gradient accumulates each time
  testing::expect_values(x.grad(), {3.0, -6.0});
  testing::expect_values(held, {3.0, -6.0});  // accumulation into the leaf's gradient is in place, as in PyTorch
  testing::expect_values(seed, {0.5, -1.0});
  Tensor z = from_vector({1.0, 1.0}, {2}, DType::float64).set_requires_grad(true);
  Tensor shared = reshape(z, {1, 2});  // a view sharing z's storage
  (sum(shared) + sum(z * 3.0)).backward();
  testing::expect_values(z.grad(), {4.0, 4.0});
  testing::expect_values(z, {1.0, 1.0});
}

TEST(Engine, SecondBackwardThroughReleasedGraphThrows) {
  Tensor x = from_vector({2.0}, {1}).set_requires_grad(true);
  Tensor y = sum(exp(x));
  y.backward();
  try {
    y.backward();
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("second time"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("retain_graph"), std::string::npos) << e.what();
  }
}

TEST(Engine, RetainGraphAllowsASecondBackward) {
  Tensor x = from_vector({2.0}, {1}, DType::float64).set_requires_grad(true);
  Tensor y = sum(exp(x));
  y.backward(Tensor(), /*retain_graph=*/true);
  y.backward();
  EXPECT_NEAR(x.grad().item(), 2 * std::exp(2.0), 1e-12);
}

TEST(Engine, BackwardNeedsAScalarOrAnExplicitGradient) {
  Tensor x = ones({3}).set_requires_grad(true);
  Tensor y = x * 2.0;
  EXPECT_THROW(y.backward(), std::runtime_error);
  y.backward(from_vector({1.0, 2.0, 3.0}, {3}));
  testing::expect_values(x.grad(), {2, 4, 6});
  EXPECT_THROW(ones({2}).backward(), std::runtime_error);  // nothing requires grad
}

TEST(Engine, NoGradGuardRecordsNothingAndRestores) {
  Tensor x = ones({2}).set_requires_grad(true);
  {
    NoGradGuard no_grad;
    Tensor y = x * 2.0;
    EXPECT_FALSE(y.requires_grad());
    EXPECT_EQ(y.grad_fn(), nullptr);
    {
      NoGradGuard nested;
      EXPECT_FALSE(grad_enabled());
    }
    EXPECT_FALSE(grad_enabled());
  }
  EXPECT_TRUE(grad_enabled());
  EXPECT_TRUE((x * 2.0).requires_grad());
}

TEST(Engine, DetachStopsGradient) {
  Tensor x = from_vector({2.0}, {1}).set_requires_grad(true);
  Tensor y = x * x.detach();  // d/dx = x.detach() only
  sum(y).backward();
  EXPECT_FLOAT_EQ(x.grad().item(), 2.0f);
}

TEST(Engine, GradientReachesOnlyLeavesThatRequireIt) {
  Tensor x = ones({2}).set_requires_grad(true);
  Tensor c = ones({2});
  Tensor h = x * 2.0;
  sum(h * c).backward();
  EXPECT_TRUE(x.grad().defined());
  EXPECT_FALSE(c.grad().defined());
  EXPECT_FALSE(h.grad().defined());  // intermediate results keep no grad
}

TEST(Engine, ANodeWithoutGradientStillLetsItsInputsRun) {
  // A custom op whose backward gives no gradient: x must still receive the gradient of the other path.
  Tensor x = from_vector({1.0, 2.0}, {2}).set_requires_grad(true);
  Tensor h = x * 3.0;
  Tensor blocked = h.detach().clone();
  record(blocked, "blocking_op", {h}, [](const Tensor&) { return std::vector<Tensor>{Tensor()}; });
  Tensor loss = sum(blocked) + sum(h);
  loss.backward();
  testing::expect_values(x.grad(), {3, 3});
}

TEST(Engine, LongChainBackwardAndDestructionDoNotRecurse) {
  // 100,000 nodes: a recursive backward or a recursive destructor would overflow the stack.
  Tensor x = from_vector({1.0}, {1}, DType::float64).set_requires_grad(true);
  const std::size_t before = Storage::live_bytes();
  {
    Tensor y = x;
    for (int i = 0; i < 100000; ++i) y = y + 1e-5;
    EXPECT_NEAR(y.item(), 2.0, 1e-9);
    y.backward(Tensor(), /*retain_graph=*/true);
    EXPECT_EQ(x.grad().item(), 1.0);
  }
  EXPECT_EQ(Storage::live_bytes(), before + 8);  // only x.grad is left
  {
    Tensor y = x;
    for (int i = 0; i < 100000; ++i) y = y * 1.0;
  }  // destroyed without backward
  SUCCEED();
}

TEST(Engine, GraphMemoryIsFreedAfterBackwardAndWhenTheOutputDies) {
  Tensor w = testing::param({64, 64}, 1);
  Tensor x = testing::param({16, 64}, 2);
  w.set_requires_grad(true);
  const std::size_t baseline = Storage::live_bytes();
  std::size_t with_graph = 0;
  {
    Tensor h = tanh(matmul(x, w));
    Tensor y = sum(exp(h) * h);
    with_graph = Storage::live_bytes();
    EXPECT_GT(with_graph, baseline);
    h = Tensor();
    y.backward();
    // Saved values released: what is left is the loss itself and the two new gradients.
    EXPECT_LE(Storage::live_bytes(), baseline + 8 + w.numel() * 8 + x.numel() * 8);
  }
  // With the output gone nothing of the graph survives: no reference cycle through saved values.
  EXPECT_EQ(Storage::live_bytes(), baseline + w.numel() * 8 + x.numel() * 8);
  w.zero_grad();
  x.zero_grad();
  EXPECT_EQ(Storage::live_bytes(), baseline);
}

TEST(Engine, NoCycleEvenWithoutBackward) {
  Tensor x = testing::param({8, 8}, 3);
  const std::size_t baseline = Storage::live_bytes();
  {
    Tensor y = sigmoid(exp(x));  // both keep their own output for backward
    Tensor z = sum(sqrt(y));
  }
  EXPECT_EQ(Storage::live_bytes(), baseline);
}

TEST(Engine, WrongGradientShapeFromACustomOpIsReported) {
  Tensor x = ones({2, 3}).set_requires_grad(true);
  Tensor y = x.detach().clone();
  record(y, "bad_op", {x}, [](const Tensor&) { return std::vector<Tensor>{ones({3, 2})}; });
  try {
    sum(y).backward();
    FAIL() << "expected an error";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("bad_op"), std::string::npos) << e.what();
  }
}

TEST(Engine, AnOpWithSeveralOutputsGetsEachOutputsGradient) {
  // y0, y1 = (2x, 3x) as one node: the backward sees the gradient of each output, summed over its uses,
  // and an undefined one for an output nothing used.
  Tensor x = from_vector({1.0, 2.0}, {2}).set_requires_grad(true);
  std::vector<Tensor> seen;
  std::vector<Tensor> ys{x.detach() * 2.0, x.detach() * 3.0, x.detach() * 4.0};
  record(ys, "three", {x}, [&seen](const std::vector<Tensor>& g) {
    seen = g;
    return std::vector<Tensor>{g[0] * 2.0 + g[1] * 3.0};
  });
  EXPECT_EQ(ys[1].impl()->output_nr, 1u);
  sum(ys[1] * 5.0 + ys[0] + ys[1]).backward();
  ASSERT_EQ(seen.size(), 3u);
  testing::expect_values(seen[0], {1, 1});
  testing::expect_values(seen[1], {6, 6});
  EXPECT_FALSE(seen[2].defined());
  testing::expect_values(x.grad(), {20, 20});
}
}  // namespace
}  // namespace attnlab
