// Reductions: values against naive loops, keepdim shapes, max ties, and float64 gradchecks.
#include <gtest/gtest.h>

#include "tests/test_util.hpp"

namespace attnlab {
namespace {

using testing::expect_values;
using testing::gradcheck_passes;
using testing::param;

TEST(Reduce, SumAndMeanOverAxes) {
  Tensor x = from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(sum(x).item(), 21.0);
  EXPECT_EQ(sum(x).dim(), 0u);
  expect_values(sum(x, 0), {5, 7, 9});
  expect_values(sum(x, -1), {6, 15});
  EXPECT_EQ(sum(x, 1, true).shape(), (Shape{2, 1}));
  EXPECT_EQ(sum(x, 1).shape(), (Shape{2}));
  expect_values(mean(x, 0), {2.5, 3.5, 4.5});
  EXPECT_DOUBLE_EQ(mean(x).item(), 3.5);
  EXPECT_THROW(sum(x, 2), std::out_of_range);
}

TEST(Reduce, MiddleAxisMatchesANaiveLoop) {
  Generator gen(2);
  Tensor x = randn({3, 4, 5}, gen, DType::float64);
  Tensor s = sum(x, 1);
  Tensor m = max(x, 1);
  for (std::size_t i = 0; i < 3; ++i)
    for (std::size_t k = 0; k < 5; ++k) {
      double total = 0, best = -1e300;
      for (std::size_t j = 0; j < 4; ++j) {
        total += x.at({i, j, k});
        best = std::max(best, x.at({i, j, k}));
      }
      EXPECT_NEAR(s.at({i, k}), total, 1e-12);
      EXPECT_EQ(m.at({i, k}), best);
    }
}

TEST(Reduce, MaxTiesSendTheGradientToTheFirstMaximum) {
  Tensor x = from_vector({1, 5, 5, 2}, {4}).set_requires_grad(true);
  max(x).backward();
  expect_values(x.grad(), {0, 1, 0, 0});
  Tensor y = from_vector({3, 3, 1, 7, 7, 7}, {2, 3}).set_requires_grad(true);
  sum(max(y, 1)).backward();
  expect_values(y.grad(), {1, 0, 0, 1, 0, 0});
  expect_values(argmax(y, 1), {0, 0});
}

TEST(Reduce, VarianceBiasedAndUnbiased) {
  Tensor x = from_vector({1, 2, 3, 4}, {1, 4}, DType::float64);
  expect_values(var(x, 1), {1.25}, 1e-12);
  expect_values(var(x, 1, false, true), {5.0 / 3.0}, 1e-12);
  EXPECT_THROW(var(from_vector({1}, {1}), 0, false, true), std::invalid_argument);
}

TEST(ReduceGradcheck, SumAll) {
  EXPECT_TRUE(gradcheck_passes([](const auto& in) { return sum(in[0]); }, {param({2, 3, 4}, 1)}));
}
TEST(ReduceGradcheck, SumAxis) {
  for (std::int64_t axis : {0, 1, -1})
    for (bool keepdim : {false, true})
      EXPECT_TRUE(gradcheck_passes([=](const auto& in) { return sum(in[0], axis, keepdim); }, {param({2, 3, 4}, 1)}))
          << "axis " << axis << " keepdim " << keepdim;
}
TEST(ReduceGradcheck, Mean) {
  EXPECT_TRUE(gradcheck_passes([](const auto& in) { return mean(in[0]); }, {param({3, 4}, 1)}));
  EXPECT_TRUE(gradcheck_passes([](const auto& in) { return mean(in[0], 1, true); }, {param({2, 3, 4}, 2)}));
}
TEST(ReduceGradcheck, Max) {
  // Random normal values have no ties.
  EXPECT_TRUE(gradcheck_passes([](const auto& in) { return max(in[0]); }, {param({3, 4}, 1)}));
  for (std::int64_t axis : {0, 1, 2})
    EXPECT_TRUE(gradcheck_passes([=](const auto& in) { return max(in[0], axis); }, {param({2, 3, 4}, 2)}))
        << "axis " << axis;
}
TEST(ReduceGradcheck, Var) {
  EXPECT_TRUE(gradcheck_passes([](const auto& in) { return var(in[0], -1); }, {param({3, 5}, 1)}));
  EXPECT_TRUE(gradcheck_passes([](const auto& in) { return var(in[0], 0, true, true); }, {param({4, 3}, 2)}));
}

}  // namespace
}  // namespace attnlab
