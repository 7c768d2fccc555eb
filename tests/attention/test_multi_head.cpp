// MultiHeadAttention: shapes, parameter count, permutation equivariance, no leak from the future,
// cross-attention, and float64 gradchecks over inputs and parameters.
#include <gtest/gtest.h>

#include "framework/attention/multi_head.hpp"
#include "tests/test_util.hpp"

namespace attnlab {
namespace {

std::shared_ptr<MultiHeadAttention> make_mha(std::size_t d, std::size_t heads, bool causal, bool bias = true,
                                             std::uint64_t seed = 0) {
  Generator gen(seed);
  auto kernel = make_kernel("softmax", KernelSpec{heads, d / heads, 16, causal}, YAML::Node(), gen);
  return std::make_shared<MultiHeadAttention>(d, heads, kernel, bias, gen);
}

using testing::with_parameters;

TEST(MultiHeadAttention, ShapesAndNames) {
  auto mha = make_mha(8, 2, false);
  Generator gen(1);
  const AttentionResult r = mha->forward(randn({3, 5, 8}, gen), Tensor(), AttentionContext{false, Tensor(), true});
  EXPECT_EQ(r.output.shape(), (Shape{3, 5, 8}));
  EXPECT_EQ(r.pattern.shape(), (Shape{3, 2, 5, 5}));
  std::vector<std::string> names;
  for (const auto& p : mha->named_parameters()) names.push_back(p.name);
  EXPECT_EQ(names, (std::vector<std::string>{"qkv.weight", "qkv.bias", "proj.weight", "proj.bias"}));
  EXPECT_THROW(make_mha(8, 3, false), std::invalid_argument);
  try {
    check_heads_divide(64, 3);
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "n_heads (3) must divide d_model (64)");
  }
}

TEST(MultiHeadAttention, SingleHeadParameterCount) {
  // d = d_k = d_v: W^Q, W^K, W^V hold d (2 d_k + d_v) parameters; the output projection adds d^2.
  const std::size_t d = 6;
  auto mha = make_mha(d, 1, false, /*bias=*/false);
  EXPECT_EQ(mha->qkv->parameter_count(), d * (2 * d + d));
  EXPECT_EQ(mha->parameter_count(), d * (2 * d + d) + d * d);
}

TEST(MultiHeadAttention, BidirectionalWithoutPositionsIsPermutationEquivariant) {
  auto mha = make_mha(8, 2, false);
  Generator gen(2);
  const Tensor x = randn({2, 5, 8}, gen, DType::float64);
  mha->to(DType::float64);
  const Tensor perm = from_indices({3, 0, 4, 1, 2}, {5});
  const Tensor y = mha->forward(x, Tensor(), {}).output;
  const Tensor y_of_permuted = mha->forward(index_select(x, 1, perm), Tensor(), {}).output;
  const auto a = index_select(y, 1, perm).to_vector(), b = y_of_permuted.to_vector();
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-12);
}

TEST(MultiHeadAttention, CausalOutputsIgnoreTheFuture) {
  auto mha = make_mha(8, 2, true);
  Generator gen(3);
  Tensor x = randn({1, 6, 8}, gen, DType::float64);
  mha->to(DType::float64);
  const Tensor before = mha->forward(x, Tensor(), AttentionContext{true, Tensor(), false}).output;
  Tensor changed = x.clone();
  for (std::size_t c = 0; c < 8; ++c) changed.data<double>()[4 * 8 + c] += 10.0;  // token 4
  const Tensor after = mha->forward(changed, Tensor(), AttentionContext{true, Tensor(), false}).output;
  for (std::size_t t = 0; t < 6; ++t)
    for (std::size_t c = 0; c < 8; ++c) {
      if (t < 4) {
        EXPECT_EQ(before.at({0, t, c}), after.at({0, t, c})) << "token " << t;
      }
    }
  EXPECT_NE(before.at({0, 5, 0}), after.at({0, 5, 0}));  // later tokens do see it
}

TEST(MultiHeadAttention, CrossAttentionGivesRectangularPatterns) {
  auto mha = make_mha(8, 2, false);
  Generator gen(4);
  const Tensor x = randn({2, 3, 8}, gen), context = randn({2, 7, 8}, gen);
  const AttentionResult r = mha->forward(x, context, AttentionContext{false, Tensor(), true});
  EXPECT_EQ(r.output.shape(), (Shape{2, 3, 8}));
  EXPECT_EQ(r.pattern.shape(), (Shape{2, 2, 3, 7}));
  const Tensor rows = sum(r.pattern, -1);
  for (double v : rows.to_vector()) EXPECT_NEAR(v, 1.0, 1e-6);
  // Keys and values come from the context: changing x's other tokens leaves a query's output alone.
  EXPECT_THROW(mha->forward(x, randn({1, 7, 8}, gen), {}), std::invalid_argument);
}

TEST(MultiHeadAttentionGradcheck, SelfAttention) {
  auto mha = make_mha(4, 2, false);
  mha->to(DType::float64);
  EXPECT_TRUE(testing::gradcheck_passes([&](const auto& in) { return mha->forward(in[0], Tensor(), {}).output; },
                                        with_parameters({testing::param({2, 3, 4}, 1)}, *mha)));
}

TEST(MultiHeadAttentionGradcheck, CausalWithPaddingAndRotary) {
  auto mha = make_mha(4, 2, true);
  mha->to(DType::float64);
  Generator gen(0);
  PositionalEncoding rope(PositionalKind::rotary, 8, 4, 2, gen);
  const Tensor padding = from_mask({false, false, false, true, false, false, false, false}, {2, 4});
  EXPECT_TRUE(testing::gradcheck_passes(
      [&](const auto& in) { return mha->forward(in[0], Tensor(), AttentionContext{true, padding, false}, &rope).output; },
      with_parameters({testing::param({2, 4, 4}, 1)}, *mha)));
}

TEST(MultiHeadAttentionGradcheck, CrossAttention) {
  auto mha = make_mha(4, 2, false);
  mha->to(DType::float64);
  const Tensor padding = from_mask({false, false, true, false, false, false, false, false, false, false}, {2, 5});
  EXPECT_TRUE(testing::gradcheck_passes(
      [&](const auto& in) { return mha->forward(in[0], in[1], AttentionContext{false, padding, false}).output; },
      with_parameters({testing::param({2, 3, 4}, 1), testing::param({2, 5, 4}, 2)}, *mha)));
}

}  // namespace
}  // namespace attnlab
