// Indexing ops: lookups by hand, repeated indices accumulate in backward, range errors, gradchecks.
#include <gtest/gtest.h>

#include "tests/test_util.hpp"

namespace attnlab {
namespace {

using testing::expect_values;
using testing::gradcheck_passes;
using testing::param;

Tensor ids(std::vector<std::int64_t> v, Shape s) { return from_indices(v, s); }

TEST(IndexOps, EmbeddingLooksUpRows) {
  Tensor w = reshape(arange(8), {4, 2});
  Tensor e = embedding(w, ids({3, 0, 3}, {1, 3}));
  EXPECT_EQ(e.shape(), (Shape{1, 3, 2}));
  expect_values(e, {6, 7, 0, 1, 6, 7});
}

TEST(IndexOps, EmbeddingBackwardAccumulatesRepeatedIds) {
  Tensor w = zeros({4, 2}).set_requires_grad(true);
  sum(embedding(w, ids({3, 0, 3}, {3}))).backward();
  expect_values(w.grad(), {1, 1, 0, 0, 0, 0, 2, 2});
}

TEST(IndexOps, OutOfRangeIdsAreAnErrorNamingThePosition) {
  Tensor w = zeros({4, 2});
  try {
    embedding(w, ids({1, 4}, {2}));
    FAIL();
  } catch (const std::out_of_range& e) {
    EXPECT_NE(std::string(e.what()).find("index 4 at position 1"), std::string::npos) << e.what();
  }
  EXPECT_THROW(embedding(w, from_vector({1.0}, {1})), std::invalid_argument);  // float ids
}

TEST(IndexOps, IndexSelectAndGather) {
  Tensor x = reshape(arange(6), {2, 3});
  expect_values(index_select(x, 1, ids({2, 0}, {2})), {2, 0, 5, 3});
  expect_values(gather(x, 1, ids({2, 2, 0, 1}, {2, 2})), {2, 2, 3, 4});
  EXPECT_THROW(gather(x, 1, ids({0, 0, 0}, {3, 1})), std::invalid_argument);
}

TEST(IndexOps, OneHot) {
  Tensor h = one_hot(ids({2, 0}, {2}), 3);
  EXPECT_EQ(h.shape(), (Shape{2, 3}));
  expect_values(h, {0, 0, 1, 1, 0, 0});
  EXPECT_THROW(one_hot(ids({3}, {1}), 3), std::out_of_range);
}

TEST(IndexOpsGradcheck, IndexSelect) {
  const Tensor index = ids({2, 0, 2, 1}, {4});
  EXPECT_TRUE(gradcheck_passes([index](const auto& in) { return index_select(in[0], 1, index); }, {param({2, 3, 2}, 1)}));
}
TEST(IndexOpsGradcheck, Embedding) {
  const Tensor tokens = ids({1, 4, 1, 0, 2, 4}, {2, 3});
  EXPECT_TRUE(gradcheck_passes([tokens](const auto& in) { return embedding(in[0], tokens); }, {param({5, 3}, 1)}));
}
TEST(IndexOpsGradcheck, Gather) {
  const Tensor index = ids({0, 2, 2, 1, 1, 1, 0, 0}, {2, 4});
  EXPECT_TRUE(gradcheck_passes([index](const auto& in) { return gather(in[0], 1, index); }, {param({2, 3}, 1)}));
}

}  // namespace
}  // namespace attnlab
