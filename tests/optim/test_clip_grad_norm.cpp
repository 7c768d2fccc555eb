// clip_grad_norm: the norm before clipping, scaling above max_norm only, both dtypes, a tensor listed twice,
// non-finite norms.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "tests/optim/optim_testing.hpp"

namespace attnlab::optim_testing {
namespace {

TEST(ClipGradNorm, ScalesAboveMaxNormAndReturnsTheNormBefore) {
  Tensor a = leaf({3.0, 4.0});
  Tensor b = leaf({12.0}, DType::float32);
  Tensor no_grad = leaf({100.0});
  set_grad(a, {3.0, 4.0});
  set_grad(b, {12.0});
  EXPECT_DOUBLE_EQ(clip_grad_norm({a, b, no_grad}, 6.5), 13.0);
  const double scale = 6.5 / (13.0 + 1e-6);
  testing::expect_values(a.grad(), {3.0 * scale, 4.0 * scale}, 1e-12);
  testing::expect_values(b.grad(), {12.0 * scale}, 1e-5);
  EXPECT_NEAR(clip_grad_norm({a, b}, 100.0), 6.5, 1e-5);  // the clipped norm is max_norm
  EXPECT_FALSE(no_grad.grad().defined());
}

TEST(ClipGradNorm, NormOfLongGradientsOfBothDtypes) {
  // 21 and 13 elements: whole blocks of the accumulation loop and a tail.
  Generator gen(5);
  Tensor a = randn({21}, gen).set_requires_grad(true);
  Tensor b = randn({13}, gen, DType::float64).set_requires_grad(true);
  a.set_grad(randn({21}, gen));
  b.set_grad(randn({13}, gen, DType::float64));
  double expected = 0.0;
  for (const Tensor& t : {a, b}) {
    for (double g : t.grad().to_vector()) expected += g * g;
  }
  expected = std::sqrt(expected);
  EXPECT_NEAR(clip_grad_norm({a, b}, 1.0), expected, 1e-12);
  double after = 0.0;
  for (const Tensor& t : {a, b}) {
    for (double g : t.grad().to_vector()) after += g * g;
  }
  EXPECT_NEAR(std::sqrt(after), 1.0, 1e-6);
}

TEST(ClipGradNorm, LeavesGradientsBelowMaxNorm) {
  Tensor a = leaf({1.0, 1.0});
  set_grad(a, {3.0, 4.0});
  EXPECT_DOUBLE_EQ(clip_grad_norm({a}, 5.5), 5.0);
  EXPECT_EQ(a.grad().to_vector(), (Values{3.0, 4.0}));
  EXPECT_DOUBLE_EQ(clip_grad_norm({a}, std::numeric_limits<double>::infinity()), 5.0);
}

TEST(ClipGradNorm, CountsATensorListedTwiceOnce) {
  Tensor a = leaf({1.0, 1.0});
  set_grad(a, {3.0, 4.0});
  EXPECT_DOUBLE_EQ(clip_grad_norm({a, a}, 2.5), 5.0);
  testing::expect_values(a.grad(), {1.5, 2.0}, 1e-6);  // scaled once, not twice
}

TEST(ClipGradNorm, NonFiniteNormIsReturnedWithoutScaling) {
  Tensor a = leaf({1.0, 1.0});
  set_grad(a, {std::numeric_limits<double>::infinity(), 4.0});
  EXPECT_TRUE(std::isinf(clip_grad_norm({a}, 1.0)));
  EXPECT_EQ(a.grad().to_vector()[1], 4.0);
  set_grad(a, {std::nan(""), 4.0});
  EXPECT_TRUE(std::isnan(clip_grad_norm({a}, 1.0)));
  EXPECT_EQ(a.grad().to_vector()[1], 4.0);
  expect_error([&] { clip_grad_norm({a}, 0.0); }, "max_norm must be > 0, got 0");
}

}  // namespace
}  // namespace attnlab::optim_testing
