// Shape ops: values by hand, storage sharing of reshape, error messages, float64 gradchecks.
#include <gtest/gtest.h>

#include "tests/test_util.hpp"

namespace attnlab {
namespace {

using testing::expect_values;
using testing::gradcheck_passes;
using testing::param;

TEST(ShapeOps, ReshapeInfersAndSharesStorage) {
  Tensor x = arange(6);
  Tensor y = reshape(x, {2, -1});
  EXPECT_EQ(y.shape(), (Shape{2, 3}));
  EXPECT_EQ(y.storage(), x.storage());
  EXPECT_EQ(y.at({1, 0}), 3.0);
  EXPECT_THROW(reshape(x, {4, -1}), std::invalid_argument);
  EXPECT_THROW(reshape(x, {-1, -1}), std::invalid_argument);
  EXPECT_THROW(reshape(x, {7}), std::invalid_argument);
  EXPECT_EQ(flatten(zeros({2, 3, 4}), 1).shape(), (Shape{2, 12}));
  EXPECT_EQ(unsqueeze(zeros({2, 3}), -1).shape(), (Shape{2, 3, 1}));
  EXPECT_EQ(unsqueeze(zeros({2, 3}), 0).shape(), (Shape{1, 2, 3}));
  EXPECT_EQ(squeeze(zeros({2, 1, 3}), 1).shape(), (Shape{2, 3}));
  EXPECT_THROW(squeeze(zeros({2, 3}), 1), std::invalid_argument);
}

TEST(ShapeOps, TransposeAndPermuteMoveElements) {
  Tensor x = reshape(arange(6), {2, 3});
  expect_values(transpose(x, 0, 1), {0, 3, 1, 4, 2, 5});
  Tensor y = reshape(arange(24), {2, 3, 4});
  Tensor p = permute(y, {2, 0, 1});
  EXPECT_EQ(p.shape(), (Shape{4, 2, 3}));
  for (std::size_t i = 0; i < 2; ++i)
    for (std::size_t j = 0; j < 3; ++j)
      for (std::size_t k = 0; k < 4; ++k) EXPECT_EQ(p.at({k, i, j}), y.at({i, j, k}));
  // Head split of attention: [B, T, H, D] -> [B, H, T, D]
  Tensor q = reshape(arange(2 * 3 * 2 * 4), {2, 3, 2, 4});
  Tensor h = permute(q, {0, 2, 1, 3});
  EXPECT_EQ(h.at({1, 1, 2, 3}), q.at({1, 2, 1, 3}));
  EXPECT_THROW(permute(y, {0, 0, 1}), std::invalid_argument);
  EXPECT_THROW(permute(y, {0, 1}), std::invalid_argument);
}

TEST(ShapeOps, SliceWithStepAndNegativeBounds) {
  Tensor x = reshape(arange(12), {3, 4});
  expect_values(slice(x, 1, 1, 3), {1, 2, 5, 6, 9, 10});
  expect_values(slice(x, 0, -1, 3), {8, 9, 10, 11});
  expect_values(slice(x, 1, 0, 4, 2), {0, 2, 4, 6, 8, 10});
  EXPECT_EQ(slice(x, 1, 3, 100).shape(), (Shape{3, 1}));
  EXPECT_EQ(slice(x, 1, 3, 1).shape(), (Shape{3, 0}));
}

TEST(ShapeOps, ConcatAlongAnyAxis) {
  Tensor a = reshape(arange(4), {2, 2});
  Tensor b = full({2, 1}, 9);
  expect_values(concat({a, b}, 1), {0, 1, 9, 2, 3, 9});
  expect_values(concat({a, a}, 0), {0, 1, 2, 3, 0, 1, 2, 3});
  EXPECT_THROW(concat({a, b}, 0), std::invalid_argument);
}

TEST(ShapeOpsGradcheck, Reshape) {
  EXPECT_TRUE(gradcheck_passes([](const auto& in) { return mul(reshape(in[0], {3, -1}), in[1]); },
                               {param({2, 6}, 1), param({4}, 2)}));
}
TEST(ShapeOpsGradcheck, Transpose) {
  EXPECT_TRUE(gradcheck_passes([](const auto& in) { return transpose(in[0], 0, 2); }, {param({2, 3, 4}, 1)}));
}
TEST(ShapeOpsGradcheck, Permute) {
  EXPECT_TRUE(gradcheck_passes([](const auto& in) { return permute(in[0], {0, 2, 1, 3}); }, {param({2, 3, 2, 4}, 1)}));
}
TEST(ShapeOpsGradcheck, Slice) {
  EXPECT_TRUE(gradcheck_passes([](const auto& in) { return slice(in[0], 1, 1, 4, 2); }, {param({2, 5, 3}, 1)}));
}
TEST(ShapeOpsGradcheck, Concat) {
  EXPECT_TRUE(gradcheck_passes([](const auto& in) { return concat({in[0], in[1], in[0]}, 1); },
                               {param({2, 3}, 1), param({2, 1}, 2)}));
}

TEST(ShapeOps, SplitHeadsIsThePermuteAndSlices) {
  Generator gen(3);
  const Tensor x = randn({2, 5, 3 * 4 * 6}, gen);  // [B, T, 3 H D], H 4, D 6
  const std::vector<Tensor> parts = split_heads(x, 3, 4);
  const Tensor expected = permute(reshape(x, {2, 5, 3, 4, 6}), {2, 0, 3, 1, 4});  // [3, B, H, T, D]
  ASSERT_EQ(parts.size(), 3u);
  for (std::int64_t p = 0; p < 3; ++p) {
    EXPECT_EQ(parts[p].shape(), (Shape{2, 4, 5, 6}));
    EXPECT_EQ(parts[p].to_vector(), reshape(slice(expected, 0, p, p + 1), {2, 4, 5, 6}).to_vector()) << "part " << p;
  }
  EXPECT_THROW(split_heads(x, 5, 4), std::invalid_argument);
}
TEST(ShapeOpsGradcheck, SplitHeadsWithEveryPartOrSomeUnused) {
  // Outputs used in another order than they were made, one twice, one not at all (its gradient is zero).
  EXPECT_TRUE(gradcheck_passes([](const auto& in) {
    const std::vector<Tensor> p = split_heads(in[0], 3, 2);
    return p[2] * 2.0 + p[0] * p[0] + p[2];
  }, {param({2, 3, 3 * 2 * 2}, 1)}));
  EXPECT_TRUE(gradcheck_passes([](const auto& in) { return split_heads(in[0], 1, 3)[0]; }, {param({2, 4, 6}, 2)}));
}
}  // namespace
}  // namespace attnlab
