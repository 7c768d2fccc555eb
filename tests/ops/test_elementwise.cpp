// Elementwise ops: forward values by hand or against std:: math, broadcasting, and float64 gradchecks.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "framework/ops/parallel.hpp"
#include "tests/test_util.hpp"

namespace attnlab {
namespace {

using testing::expect_values;
using testing::gradcheck_passes;
using testing::param;
using testing::param_uniform;

TEST(Elementwise, AddBroadcastsLikeNumpy) {
  Tensor a = from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = from_vector({10, 20, 30}, {3});
  expect_values(a + b, {11, 22, 33, 14, 25, 36});
  Tensor col = from_vector({100, 200}, {2, 1});
  Tensor row = from_vector({1, 2, 3}, {1, 3});
  Tensor outer = col + row;
  EXPECT_EQ(outer.shape(), (Shape{2, 3}));
  expect_values(outer, {101, 102, 103, 201, 202, 203});
  expect_values(a * scalar(2.0), {2, 4, 6, 8, 10, 12});
  expect_values(a - b, {-9, -18, -27, -6, -15, -24});
  expect_values(b / a, {10, 10, 10, 2.5, 4, 5});
}

TEST(Elementwise, MiddleAxisBroadcastMatchesANaiveLoop) {
  Generator gen(3);
  Tensor a = randn({2, 3, 4}, gen);
  Tensor b = randn({2, 1, 4}, gen);
  Tensor c = mul(a, b);
  for (std::size_t i = 0; i < 2; ++i)
    for (std::size_t j = 0; j < 3; ++j)
      for (std::size_t k = 0; k < 4; ++k) EXPECT_FLOAT_EQ(c.at({i, j, k}), a.at({i, j, k}) * b.at({i, 0, k}));
}

TEST(Elementwise, IncompatibleShapesAreAnErrorNamingThem) {
  try {
    add(zeros({2, 3}), zeros({4}));
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("[2, 3]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[4]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(add(zeros({2}), zeros({2}, DType::float64)), std::invalid_argument);
}

TEST(Elementwise, UnaryValuesMatchStdMath) {
  const std::vector<double> xs = {-3.0, -0.7, -0.1, 0.2, 0.9, 2.5};
  Tensor x = from_vector(xs, {6}, DType::float64);
  const auto ex = exp(x).to_vector(), th = tanh(x).to_vector(), sg = sigmoid(x).to_vector(),
             rl = relu(x).to_vector(), ge = gelu(x).to_vector(), el = elu(x, 0.5).to_vector(),
             sq = pow(x, 2.0).to_vector(), ng = neg(x).to_vector();
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const double v = xs[i];
    EXPECT_NEAR(ex[i], std::exp(v), 1e-12);
    EXPECT_NEAR(th[i], std::tanh(v), 1e-12);
    EXPECT_NEAR(sg[i], 1.0 / (1.0 + std::exp(-v)), 1e-12);
    EXPECT_EQ(rl[i], v > 0 ? v : 0.0);
    EXPECT_NEAR(ge[i], 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0))), 1e-12);
    EXPECT_NEAR(el[i], v > 0 ? v : 0.5 * (std::exp(v) - 1.0), 1e-12);
    EXPECT_NEAR(sq[i], v * v, 1e-12);
    EXPECT_EQ(ng[i], -v);
  }
  Tensor p = from_vector({0.25, 4.0}, {2}, DType::float64);
  expect_values(sqrt(p), {0.5, 2.0}, 1e-12);
  expect_values(log(p), {std::log(0.25), std::log(4.0)}, 1e-12);
}

TEST(Elementwise, Float32MatchesFloat64) {
  Generator gen(1);
  Tensor x = randn({257}, gen, DType::float64);  // odd length: exercises the SIMD tail
  Tensor x32 = x.to(DType::float32);
  for (auto f : {+[](const Tensor& t) { return exp(t); }, +[](const Tensor& t) { return tanh(t); },
                 +[](const Tensor& t) { return gelu(t); }, +[](const Tensor& t) { return sigmoid(t); },
                 +[](const Tensor& t) { return elu(t); }}) {
    const auto a = f(x).to_vector(), b = f(x32).to_vector();
    for (std::size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5 * (1 + std::fabs(a[i])));
  }
}

// float32 GELU runs its own erf (Abramowitz & Stegun 7.1.26): its value and slope stay within a few
// float roundings of the exact ones over the whole range, tails included, and every element of a tensor
// gets the same value whether it falls in a full vector or in the padded tail.
TEST(Elementwise, Float32GeluIsAccurateEverywhere) {
  std::vector<double> xs;
  for (double v = -12.0; v <= 12.0; v += 0.00731) xs.push_back(v);
  Tensor x = from_vector(xs, {xs.size()}, DType::float32).set_requires_grad(true);
  Tensor y = gelu(x);
  sum(y).backward();
  const auto h = y.to_vector(), s = x.grad().to_vector(), x32 = x.to_vector();
  const double c = 1.0 / std::sqrt(2.0 * M_PI);
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const double v = x32[i], phi = 0.5 * (1.0 + std::erf(v / std::sqrt(2.0)));
    EXPECT_NEAR(h[i], v * phi, 3e-7 * std::fabs(v) + 1e-7) << "x = " << v;
    EXPECT_NEAR(s[i], phi + v * c * std::exp(-0.5 * v * v), 1e-6) << "x = " << v;
  }
  // The same values at other offsets: x[i:] puts every element at a different lane and tail position.
  for (std::size_t offset : {1, 3, 7}) {
    const auto shifted = gelu(slice(x.detach(), 0, static_cast<std::int64_t>(offset), static_cast<std::int64_t>(xs.size()))).to_vector();
    for (std::size_t i = 0; i < shifted.size(); ++i) ASSERT_EQ(shifted[i], h[i + offset]) << "offset " << offset;
  }
}

TEST(Elementwise, SigmoidSaturatesWithoutNaN) {
  Tensor x = from_vector({-1000.0, 1000.0}, {2});
  const auto y = sigmoid(x).to_vector();
  EXPECT_EQ(y[0], 0.0);
  EXPECT_EQ(y[1], 1.0);
}

TEST(Elementwise, WhereAndMaskedFill) {
  Tensor cond = from_mask({true, false, true}, {3});
  Tensor a = from_vector({1, 2, 3}, {3});
  Tensor b = from_vector({-1, -2, -3}, {3});
  expect_values(where(cond, a, b), {1, -2, 3});
  Tensor x = from_vector({1, 2, 3, 4}, {2, 2});
  Tensor row_mask = from_mask({false, true}, {2});  // broadcast over rows
  Tensor filled = masked_fill(x, row_mask, -std::numeric_limits<double>::infinity());
  EXPECT_EQ(filled.at({0, 0}), 1.0);
  EXPECT_EQ(filled.at({1, 1}), -std::numeric_limits<double>::infinity());
  EXPECT_THROW(masked_fill(x, from_mask({true, true, true}, {3}), 0.0), std::invalid_argument);
  EXPECT_THROW(masked_fill(x, from_mask({true}, {1, 1, 1}), 0.0), std::invalid_argument);  // would grow x
}

TEST(Elementwise, BroadcastToAndSumToAreAdjoint) {
  Tensor x = from_vector({1, 2, 3}, {3, 1});
  Tensor big = broadcast_to(x, {2, 3, 4});
  EXPECT_EQ(big.shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(big.at({1, 2, 3}), 3.0);
  expect_values(sum_to(big, {3, 1}), {8, 16, 24});
  expect_values(sum_to(ones({2, 3}), {}), {6});
}

// ---- gradient checks (float64, torch.autograd.gradcheck tolerances) ----

TEST(ElementwiseGradcheck, Add) {
  EXPECT_TRUE(gradcheck_passes([](const auto& in) { return add(in[0], in[1]); }, {param({2, 3}, 1), param({2, 3}, 2)}));
}
TEST(ElementwiseGradcheck, AddBroadcast) {
  EXPECT_TRUE(gradcheck_passes([](const auto& in) { return add(in[0], in[1]); }, {param({2, 3, 4}, 1), param({3, 1}, 2)}));
  EXPECT_TRUE(gradcheck_passes([](const auto& in) { return add(in[0], in[1]); }, {param({4}, 3), param({2, 3, 4}, 4)}));
}
TEST(ElementwiseGradcheck, SubBroadcast) {
  EXPECT_TRUE(gradcheck_passes([](const auto& in) { return sub(in[0], in[1]); }, {param({2, 1, 4}, 1), param({3, 1}, 2)}));
}
TEST(ElementwiseGradcheck, MulBroadcast) {
  EXPECT_TRUE(gradcheck_passes([](const auto& in) { return mul(in[0], in[1]); }, {param({2, 3, 4}, 1), param({1, 3, 1}, 2)}));
  EXPECT_TRUE(gradcheck_passes([](const auto& in) { return mul(in[0], in[1]); }, {param({2, 3}, 3), param({}, 4)}));
}
TEST(ElementwiseGradcheck, DivBroadcast) {
  EXPECT_TRUE(gradcheck_passes([](const auto& in) { return div(in[0], in[1]); },
                               {param({2, 3}, 1), param_uniform({3}, 2, 0.5, 2.0)}));
}
TEST(ElementwiseGradcheck, Scalars) {
  EXPECT_TRUE(gradcheck_passes([](const auto& in) { return 3.0 - in[0] * 2.5 + 1.0 / in[1]; },
                               {param({5}, 1), param_uniform({5}, 2, 0.5, 2.0)}));
}
TEST(ElementwiseGradcheck, Neg) {
  EXPECT_TRUE(gradcheck_passes([](const auto& in) { return neg(in[0]); }, {param({7}, 1)}));
}
TEST(ElementwiseGradcheck, Pow) {
  for (double p : {2.0, 3.0, 0.5, -1.5}) {
    EXPECT_TRUE(gradcheck_passes([p](const auto& in) { return pow(in[0], p); }, {param_uniform({6}, 1, 0.3, 2.0)}))
        << "exponent " << p;
  }
}
TEST(ElementwiseGradcheck, Exp) {
  EXPECT_TRUE(gradcheck_passes([](const auto& in) { return exp(in[0]); }, {param({2, 5}, 1)}));
}
TEST(ElementwiseGradcheck, Log) {
  EXPECT_TRUE(gradcheck_passes([](const auto& in) { return log(in[0]); }, {param_uniform({2, 5}, 1, 0.2, 3.0)}));
}
TEST(ElementwiseGradcheck, Sqrt) {
  EXPECT_TRUE(gradcheck_passes([](const auto& in) { return sqrt(in[0]); }, {param_uniform({2, 5}, 1, 0.2, 3.0)}));
}
TEST(ElementwiseGradcheck, Tanh) {
  EXPECT_TRUE(gradcheck_passes([](const auto& in) { return tanh(in[0]); }, {param({2, 5}, 1)}));
}
TEST(ElementwiseGradcheck, Sigmoid) {
  EXPECT_TRUE(gradcheck_passes([](const auto& in) { return sigmoid(in[0]); }, {param({2, 5}, 1, 2.0)}));
}
TEST(ElementwiseGradcheck, Relu) {
  // Values kept away from the kink at 0.
  Tensor x = from_vector({-1.5, -0.3, 0.4, 2.0, -0.8, 0.9}, {2, 3}, DType::float64).set_requires_grad(true);
  EXPECT_TRUE(gradcheck_passes([](const auto& in) { return relu(in[0]); }, {x}));
}
TEST(ElementwiseGradcheck, Gelu) {
  EXPECT_TRUE(gradcheck_passes([](const auto& in) { return gelu(in[0]); }, {param({3, 7}, 1, 2.0)}));
}
TEST(ElementwiseGradcheck, Elu) {
  Tensor x = from_vector({-1.5, -0.3, 0.4, 2.0, -0.8, 0.9}, {6}, DType::float64).set_requires_grad(true);
  EXPECT_TRUE(gradcheck_passes([](const auto& in) { return elu(in[0], 0.7); }, {x}));
}
TEST(ElementwiseGradcheck, WhereBroadcast) {
  Tensor cond = from_mask({true, false, false, true, true, false}, {2, 3});
  EXPECT_TRUE(gradcheck_passes([cond](const auto& in) { return where(cond, in[0], in[1]); },
                               {param({2, 3}, 1), param({3}, 2)}));
}
TEST(ElementwiseGradcheck, MaskedFill) {
  Tensor mask = from_mask({false, true, false}, {1, 3});
  EXPECT_TRUE(gradcheck_passes([mask](const auto& in) { return masked_fill(in[0], mask, -5.0); }, {param({2, 3}, 1)}));
}
TEST(ElementwiseGradcheck, BroadcastToAndSumTo) {
  EXPECT_TRUE(gradcheck_passes([](const auto& in) { return broadcast_to(in[0], {2, 3, 4}); }, {param({3, 1}, 1)}));
}
}  // namespace
}  // namespace attnlab

namespace attnlab {
namespace {

TEST(Elementwise, GeluLinearEqualsGeluThenLinear) {
  Generator gen(4);
  const Tensor x = randn({2, 3, 5}, gen, DType::float64), w = randn({4, 5}, gen, DType::float64), b = randn({4}, gen, DType::float64);
  const auto fused = gelu_linear(x, w, b).to_vector(), plain = (matmul(gelu(x), w, false, true) + b).to_vector();
  for (std::size_t i = 0; i < fused.size(); ++i) EXPECT_NEAR(fused[i], plain[i], 1e-12);
}

TEST(ElementwiseGradcheck, GeluLinear) {
  EXPECT_TRUE(testing::gradcheck_passes([](const auto& in) { return gelu_linear(in[0], in[1], in[2]); },
                                        {testing::param({2, 3, 5}, 1), testing::param({4, 5}, 2), testing::param({4}, 3)}));
  EXPECT_TRUE(testing::gradcheck_passes([](const auto& in) { return gelu_linear(in[0], in[1], Tensor()); },
                                        {testing::param({3, 5}, 4), testing::param({2, 5}, 5)}));
  // With the bias of the Linear before the GELU (gelu(x + x_bias) W^T + b), also without b.
  EXPECT_TRUE(testing::gradcheck_passes([](const auto& in) { return gelu_linear(in[0], in[1], in[2], in[3]); },
                                        {testing::param({2, 3, 5}, 6), testing::param({4, 5}, 7), testing::param({4}, 8),
                                         testing::param({5}, 9)}));
  EXPECT_TRUE(testing::gradcheck_passes([](const auto& in) { return gelu_linear(in[0], in[1], Tensor(), in[2]); },
                                        {testing::param({3, 17}, 10), testing::param({2, 17}, 11), testing::param({17}, 12)}));
}

// A bias gradient (sum_to over the leading axes) is each column's float32 sum taken row after row, on one
// thread and on two: the threads split whole 64-column blocks, never the rows. 1024 rows, so that two
// threads split the columns; one block alone (64), a last partial block (200), several blocks (256, 600),
// ranges wide enough to be taken a few rows at a time (512, 600, 1040), and rows not a multiple of those
// few (1031).
TEST(Elementwise, SumToRowsSumsEachColumnInRowOrderOnAnyThreadCount) {
  Generator gen(11);
  for (const auto& [rows, cols] : std::vector<std::pair<std::size_t, std::size_t>>{
           {1024, 64}, {1024, 200}, {1024, 256}, {1024, 600}, {1024, 512}, {1031, 600}, {1031, 1040}, {7, 520}}) {
    const Tensor g = randn({rows, cols}, gen);
    const std::vector<double> values = g.to_vector();
    std::vector<float> expected(cols, 0.0f);
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t c = 0; c < cols; ++c) expected[c] += static_cast<float>(values[r * cols + c]);
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      const std::vector<double> sums = sum_to(g, {cols}).to_vector();
      ASSERT_EQ(sums.size(), cols);
      for (std::size_t c = 0; c < cols; ++c)
        ASSERT_EQ(sums[c], static_cast<double>(expected[c])) << "column " << c << " of " << cols << ", " << threads << " threads";
    }
  }
  set_num_threads(1);
}

// gelu_linear with x_bias is the same float32 bits, values and gradients, as adding the bias first: the
// bias is added to each element before its GELU, and its gradient sums the rows of dx in order, as
// sum_to does. Rows of 40 (not a whole number of vectors) and of 512 (several column blocks), 99 of
// them; and 1024 rows of 200, which two threads split into whole column blocks and a partial one.
TEST(Elementwise, GeluLinearWithInputBiasIsBitForBitTheBiasAddedFirst) {
  Generator gen(7);
  for (const Shape& shape : {Shape{3, 33, 40}, Shape{3, 33, 512}, Shape{8, 128, 200}}) {
    const std::size_t cols = shape[2];
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      Tensor x = randn(shape, gen).set_requires_grad(true), xb = randn({cols}, gen).set_requires_grad(true),
             w = randn({24, cols}, gen).set_requires_grad(true), b = randn({24}, gen).set_requires_grad(true);
      const Tensor g = randn({shape[0], shape[1], 24}, gen);
      const Tensor fused = gelu_linear(x, w, b, xb);
      fused.backward(g);
      std::vector<std::vector<double>> fused_grads;  // float32 values, exactly
      for (Tensor t : {x, xb, w, b}) fused_grads.push_back(t.grad().to_vector()), t.zero_grad();
      const Tensor composed = gelu_linear(x + xb, w, b);
      composed.backward(g);
      EXPECT_EQ(fused.to_vector(), composed.to_vector()) << cols << " columns, " << threads << " threads";
      const std::vector<Tensor> inputs{x, xb, w, b};
      for (std::size_t i = 0; i < inputs.size(); ++i) EXPECT_EQ(fused_grads[i], inputs[i].grad().to_vector()) << "input " << i;
      EXPECT_THROW(gelu_linear(x, w, b, zeros({cols + 1})), std::invalid_argument);  // x_bias must be [cols]
    }
  }
  set_num_threads(1);
}

}  // namespace
}  // namespace attnlab
