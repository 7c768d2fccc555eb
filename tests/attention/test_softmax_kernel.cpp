// The softmax kernel against the worked example of the tutorials this project follows ("The cat sat"),
// and its masking behaviour.
#include <gtest/gtest.h>

#include <cmath>

#include "framework/attention/kernel.hpp"
#include "tests/test_util.hpp"

namespace attnlab {
namespace {

std::shared_ptr<AttentionKernel> softmax_kernel(std::size_t head_dim, bool causal = false) {
  Generator gen(0);
  return make_kernel("softmax", KernelSpec{1, head_dim, 16, causal}, YAML::Node(), gen);
}

TEST(SoftmaxKernel, TheCatSatWorkedExample) {
  // d_k = 2; Q, K, V for the tokens "The", "cat", "sat", as [B=1, H=1, T=3, D=2].
  const Tensor q = from_vector({0.5, 0.5, 0.8, 0.2, 0.3, 0.9}, {1, 1, 3, 2}, DType::float64);
  const Tensor k = from_vector({0.2, 0.8, 0.9, 0.3, 0.1, 0.7}, {1, 1, 3, 2}, DType::float64);
  const Tensor v = from_vector({0.1, 0.9, 0.8, 0.5, 0.4, 0.6}, {1, 1, 3, 2}, DType::float64);
  testing::expect_values(matmul(q, k, false, true), {0.50, 0.60, 0.40, 0.32, 0.78, 0.22, 0.78, 0.54, 0.66}, 1e-12);

  auto kernel = softmax_kernel(2);
  const AttentionResult r = kernel->forward(q, k, v, AttentionContext{false, Tensor(), true});
  // The weights computed independently: softmax of each row of raw scores / sqrt(2).
  const double raw[3][3] = {{0.50, 0.60, 0.40}, {0.32, 0.78, 0.22}, {0.78, 0.54, 0.66}};
  const double values[3][2] = {{0.1, 0.9}, {0.8, 0.5}, {0.4, 0.6}};
  for (std::size_t i = 0; i < 3; ++i) {
    double total = 0, w[3];
    for (std::size_t j = 0; j < 3; ++j) total += (w[j] = std::exp(raw[i][j] / std::sqrt(2.0)));
    double row_sum = 0;
    for (std::size_t j = 0; j < 3; ++j) {
      w[j] /= total;
      EXPECT_NEAR(r.pattern.at({0, 0, i, j}), w[j], 1e-12);
      row_sum += r.pattern.at({0, 0, i, j});
    }
    EXPECT_NEAR(row_sum, 1.0, 1e-12);
    for (std::size_t c = 0; c < 2; ++c) {
      double expected = 0;
      for (std::size_t j = 0; j < 3; ++j) expected += w[j] * values[j][c];
      EXPECT_NEAR(r.output.at({0, 0, i, c}), expected, 1e-12);
    }
  }
  // The tutorial's rounded figure for "The".
  EXPECT_NEAR(r.output.at({0, 0, 0, 0}), 0.443, 5e-4);
  EXPECT_NEAR(r.output.at({0, 0, 0, 1}), 0.664, 5e-4);
}

TEST(SoftmaxKernel, CausalUpperTriangleIsExactlyZero) {
  Generator gen(1);
  const Tensor q = randn({2, 3, 5, 4}, gen), k = randn({2, 3, 5, 4}, gen), v = randn({2, 3, 5, 4}, gen);
  const AttentionResult r = softmax_kernel(4, true)->forward(q, k, v, AttentionContext{true, Tensor(), true});
  for (std::size_t b = 0; b < 2; ++b)
    for (std::size_t h = 0; h < 3; ++h)
      for (std::size_t i = 0; i < 5; ++i) {
        double total = 0;
        for (std::size_t j = 0; j < 5; ++j) {
          if (j > i) {
            EXPECT_EQ(r.pattern.at({b, h, i, j}), 0.0);
          }
          total += r.pattern.at({b, h, i, j});
        }
        EXPECT_NEAR(total, 1.0, 1e-6);
      }
  EXPECT_NEAR(r.pattern.at({0, 0, 0, 0}), 1.0, 1e-7);  // the first token sees only itself
}

TEST(SoftmaxKernel, PaddedKeysGetZeroWeightAndFullyPaddedRowsZeros) {
  Generator gen(2);
  const Tensor q = randn({2, 1, 3, 4}, gen), k = randn({2, 1, 3, 4}, gen), v = randn({2, 1, 3, 4}, gen);
  // Batch 0: key 2 padded. Batch 1: every key padded.
  const Tensor padding = from_mask({false, false, true, true, true, true}, {2, 3});
  const AttentionResult r = softmax_kernel(4)->forward(q, k, v, AttentionContext{false, padding, true});
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(r.pattern.at({0, 0, i, 2}), 0.0);
    EXPECT_NEAR(r.pattern.at({0, 0, i, 0}) + r.pattern.at({0, 0, i, 1}), 1.0, 1e-6);
    for (std::size_t j = 0; j < 3; ++j) EXPECT_EQ(r.pattern.at({1, 0, i, j}), 0.0);
  }
  for (double x : r.output.to_vector()) EXPECT_FALSE(std::isnan(x));
  for (std::size_t i = 0; i < 3; ++i)
    for (std::size_t c = 0; c < 4; ++c) EXPECT_EQ(r.output.at({1, 0, i, c}), 0.0);
  EXPECT_THROW(softmax_kernel(4)->forward(q, k, v, AttentionContext{false, from_mask({true}, {1, 1}), false}),
               std::invalid_argument);
}

TEST(SoftmaxKernel, UnknownOptionIsAConfigError) {
  Generator gen(0);
  YAML::Node options = YAML::Load("dropot: 0.1");
  try {
    make_kernel("softmax", KernelSpec{1, 4, 8, false}, ComponentOptions(options, "model.attention.options", std::make_shared<ConfigSource>("exp.yaml")), gen);
    FAIL();
  } catch (const std::exception& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("exp.yaml:1:1"), std::string::npos) << m;
    EXPECT_NE(m.find("did you mean 'model.attention.options.dropout'"), std::string::npos) << m;
  }
}

TEST(FusedGradcheck, ScaledMaskedSoftmax) {
  // Causal rows, a padding mask broadcast over heads and queries, and a fully masked row.
  const Tensor padding = from_mask({false, false, true, false, true, true, true, true}, {2, 1, 1, 4});
  EXPECT_TRUE(testing::gradcheck_passes(
      [&](const auto& in) { return scaled_masked_softmax(in[0], 0.7, padding, true); }, {testing::param({2, 2, 3, 4}, 1)}));
  EXPECT_TRUE(testing::gradcheck_passes([&](const auto& in) { return scaled_masked_softmax(in[0], 1.3, Tensor(), false); },
                                        {testing::param({2, 3, 5}, 2)}));
}

TEST(ScaledMaskedSoftmax, EqualsMaskedFillThenSoftmax) {
  Generator gen(3);
  const Tensor x = randn({2, 2, 3, 5}, gen, DType::float64);
  const Tensor padding = from_mask({false, true, false, false, false, true, true, false, false, false}, {2, 1, 1, 5});
  Tensor causal = zeros({3, 5}, DType::boolean);
  for (std::size_t i = 0; i < 3; ++i)
    for (std::size_t j = 0; j < 5; ++j) causal.data<bool>()[i * 5 + j] = j > i + 2;
  const Tensor mask = where(padding, ones({}, DType::float64), zeros({}, DType::float64)) +
                      where(causal, ones({}, DType::float64), zeros({}, DType::float64));
  const Tensor reference = softmax(masked_fill(x * 0.5, mask.to(DType::boolean), -INFINITY));
  const auto a = scaled_masked_softmax(x, 0.5, padding, true).to_vector(), b = reference.to_vector();
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-14);
}

}  // namespace
}  // namespace attnlab
