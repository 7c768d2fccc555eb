// Tensor handles, factories, dtypes and the seeded generator.
#include <gtest/gtest.h>

#include "framework/ops/ops.hpp"
#include "framework/tensor/random.hpp"
#include "tests/test_util.hpp"

namespace attnlab {
namespace {

TEST(Tensor, HandleIsSharedNotCopied) {
  Tensor a = zeros({2, 3});
  Tensor b = a;
  b.data<float>()[4] = 7.0f;
  EXPECT_EQ(a.at({1, 1}), 7.0);
  EXPECT_TRUE(a.same(b));
  Tensor c = a.clone();
  c.data<float>()[4] = 1.0f;
  EXPECT_EQ(a.at({1, 1}), 7.0);
}

TEST(Tensor, FactoriesGiveShapesDtypesAndValues) {
  Tensor z = zeros({2, 3, 4});
  EXPECT_EQ(z.shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(z.dtype(), DType::float32);
  EXPECT_EQ(z.numel(), 24u);
  EXPECT_EQ(z.size(-1), 4u);
  EXPECT_EQ(sum(z).item(), 0.0);
  Tensor o = ones({3}, DType::float64);
  EXPECT_EQ(o.dtype(), DType::float64);
  testing::expect_values(o, {1, 1, 1});
  testing::expect_values(full({2}, 2.5), {2.5, 2.5});
  testing::expect_values(arange(4), {0, 1, 2, 3});
  testing::expect_values(arange(1.0, 2.0, 0.25, DType::float64), {1.0, 1.25, 1.5, 1.75});
  Tensor s = scalar(3.0);
  EXPECT_EQ(s.dim(), 0u);
  EXPECT_EQ(s.item(), 3.0);
  Tensor ids = from_indices(std::vector<std::int64_t>{3, 1, 2}, {3});
  EXPECT_EQ(ids.dtype(), DType::int64);
  EXPECT_EQ(ids.at({0}), 3.0);
  Tensor m = from_mask({true, false}, {2});
  EXPECT_EQ(m.dtype(), DType::boolean);
  testing::expect_values(m, {1, 0});
}

TEST(Tensor, FromVectorChecksTheCount) {
  EXPECT_THROW(from_vector({1.0, 2.0}, {3}), std::invalid_argument);
}

TEST(Tensor, DataChecksTheDtype) {
  Tensor t = zeros({2});
  EXPECT_THROW(t.data<double>(), std::invalid_argument);
}

TEST(Tensor, RequiresGradOnlyOnFloatingLeaves) {
  Tensor ids = from_indices(std::vector<std::int64_t>{1}, {1});
  EXPECT_THROW(ids.set_requires_grad(true), std::invalid_argument);
  Tensor x = ones({2}).set_requires_grad(true);
  Tensor y = x * 2.0;
  EXPECT_FALSE(y.is_leaf());
  EXPECT_THROW(y.set_requires_grad(false), std::logic_error);
}

TEST(Tensor, ToConvertsAndIsDifferentiable) {
  Tensor x = from_vector({1.5, -2.25}, {2}).set_requires_grad(true);
  Tensor y = x.to(DType::float64);
  EXPECT_EQ(y.dtype(), DType::float64);
  testing::expect_values(y, {1.5, -2.25});
  sum(y * 3.0).backward();
  EXPECT_EQ(x.grad().dtype(), DType::float32);
  testing::expect_values(x.grad(), {3, 3});
}

TEST(Tensor, ToBoolTreatsNonZeroAsTrue) {
  testing::expect_values(from_vector({0.0, 0.5, -2.0}, {3}).to(DType::boolean), {0, 1, 1});
  testing::expect_values(from_mask({true, false}, {2}).to(DType::float32), {1, 0});
}

TEST(Tensor, DetachSharesStorageButNotTheGraph) {
  Tensor x = ones({2}).set_requires_grad(true);
  Tensor y = x * 2.0;
  Tensor d = y.detach();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_TRUE(d.is_leaf());
  EXPECT_EQ(d.storage(), y.storage());
}

TEST(Generator, SameSeedSameNumbersDifferentSeedDifferentNumbers) {
  Generator a(42), b(42), c(43);
  for (int i = 0; i < 100; ++i) {
    const auto x = a.next_u64();
    EXPECT_EQ(x, b.next_u64());
    EXPECT_NE(x, c.next_u64());
  }
}

TEST(Generator, KnownFirstValuesPinTheAlgorithm) {
  // xoshiro256** seeded by splitmix64(0): pinned so that a change of algorithm (and with it every
  // seeded experiment) cannot go unnoticed.
  Generator g(0);
  const std::uint64_t first = g.next_u64();
  Generator h(0);
  EXPECT_EQ(first, h.next_u64());
  EXPECT_EQ(first, 0x99ec5f36cb75f2b4ULL);
}

TEST(Generator, NormalAndUniformHaveTheRightMoments) {
  Generator g(7);
  Tensor n = randn({20000}, g, DType::float64);
  EXPECT_NEAR(mean(n).item(), 0.0, 0.03);
  EXPECT_NEAR(var(n, 0).item(), 1.0, 0.05);
  Tensor u = uniform({20000}, g, -1.0, 3.0, DType::float64);
  EXPECT_NEAR(mean(u).item(), 1.0, 0.05);
  EXPECT_GE(-max(neg(u)).item(), -1.0);
  EXPECT_LT(max(u).item(), 3.0);
  for (int i = 0; i < 1000; ++i) EXPECT_LT(g.next_below(7), 7u);
}

TEST(Storage, FreedLargeBlocksAreReusedBySimilarSizes) {
  const void* first;
  {
    Tensor a = empty({40000});  // 160 kB: a cached size
    first = a.storage()->data();
  }
  Tensor b = empty({30000});  // smaller, within 2x: takes the same block
  EXPECT_EQ(b.storage()->data(), first);
  Tensor c = zeros({30000});  // a fresh or reused block, zeroed all the same
  EXPECT_EQ(sum(c).item(), 0.0);
}

TEST(Tensor, StorageBytesAreCounted) {
  const std::size_t before = Storage::live_bytes();
  {
    Tensor t = zeros({1000}, DType::float64);
    EXPECT_EQ(Storage::live_bytes(), before + 8000);
  }
  EXPECT_EQ(Storage::live_bytes(), before);
}

}  // namespace
}  // namespace attnlab
