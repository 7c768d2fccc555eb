// Edge cases found in review: empty dimensions, shapes too large to exist, causal masks with more
// queries than keys, pow(x, 0) at 0, exceptions inside parallel regions, the storage cache's budget.
#include <gtest/gtest.h>

#include "framework/attention/linear/linear_attention.hpp"
#include "framework/ops/parallel.hpp"
#include "tests/test_util.hpp"

namespace attnlab {
namespace {

TEST(Edges, EmptyMatricesHaveEmptyOrZeroGradients) {
  Tensor a = zeros({2, 0}).set_requires_grad(true), b = zeros({3, 0, 4}).set_requires_grad(true);
  sum(matmul(a, b)).backward();
  EXPECT_EQ(a.grad().shape(), (Shape{2, 0}));
  EXPECT_EQ(b.grad().shape(), (Shape{3, 0, 4}));
  Tensor c = zeros({3, 2, 0}).set_requires_grad(true), d = zeros({0, 4}).set_requires_grad(true);
  Tensor y = matmul(c, d);
  EXPECT_EQ(y.shape(), (Shape{3, 2, 4}));
  EXPECT_EQ(sum(y).item(), 0.0);
  sum(y).backward();
  EXPECT_EQ(d.grad().shape(), (Shape{0, 4}));
  Tensor q = zeros({1, 2, 0}).set_requires_grad(true), v = zeros({1, 2, 3}).set_requires_grad(true);
  sum(causal_linear_attention(q, q, v, 1e-6)).backward();
  EXPECT_EQ(v.grad().shape(), (Shape{1, 2, 3}));
  Tensor h = zeros({2, 0}).set_requires_grad(true), w = zeros({3, 0}).set_requires_grad(true);
  sum(gelu_linear(h, w, Tensor())).backward();
  EXPECT_EQ(w.grad().shape(), (Shape{3, 0}));
}

TEST(Edges, ShapesTooLargeToExistAreAnError) {
  EXPECT_THROW(zeros({std::size_t{1} << 32, std::size_t{1} << 32}), std::length_error);
  EXPECT_EQ(shape_numel({std::size_t{1} << 40, 0, std::size_t{1} << 40}), 0u);
}

TEST(Edges, CausalMaskWithMoreQueriesThanKeys) {
  // Query i sees keys j <= i + (Tk - Tq) = i - 1: the first query sees none.
  const Tensor y = scaled_masked_softmax(zeros({3, 2}), 1.0, Tensor(), true);
  testing::expect_values(y, {0, 0, 1, 0, 0.5, 0.5});
  EXPECT_THROW(scaled_masked_softmax(zeros({3, 2}), 1.0, from_mask({true}, {}), false), std::invalid_argument);
}

TEST(Edges, PowZeroHasZeroGradientEverywhere) {
  Tensor x = from_vector({0.0, 2.0}, {2}, DType::float64).set_requires_grad(true);
  sum(pow(x, 0.0)).backward();
  testing::expect_values(x.grad(), {0, 0});
}

TEST(Edges, ExceptionsInsideParallelRegionsReachTheCaller) {
  set_num_threads(2);
  EXPECT_THROW(parallel_for(100000, 1000,
                            [](std::size_t b, std::size_t) {
                              if (b > 0) throw std::runtime_error("from a worker");
                            }),
               std::runtime_error);
  set_num_threads(1);
}

TEST(Edges, TheStorageCacheGivesBackBeyondItsBudgetOnAMiss) {
  {
    std::vector<Tensor> big;
    for (int i = 0; i < 10; ++i) big.push_back(empty({std::size_t{4} << 20}));  // 16 MiB each
  }
  EXPECT_GE(Storage::cached_bytes(), std::size_t{160} << 20);  // kept while the sizes may come back
  Tensor other = empty({std::size_t{10} << 20});                // 40 MiB: no cached block fits, a miss
  EXPECT_LE(Storage::cached_bytes(), std::size_t{64} << 20);
}

// Blocks of up to 4 MiB are cut from shared 32 MiB regions (storage.cpp). Giving some back to the OS, and
// unmapping a region all of whose blocks were given back, never touches a block still held.
TEST(Edges, TheStorageCacheGivesBackBlocksCutFromRegionsAndKeepsTheHeldOnes) {
  std::vector<Tensor> held, freed;
  for (int i = 0; i < 65; ++i) {  // 2 MiB each, 16 to a region: four full regions and one more block
    Tensor t = full({std::size_t{1} << 19}, static_cast<double>(i));
    (i % 7 == 0 && i < 32 ? held : freed).push_back(t);
  }
  held.push_back(freed.back());  // the last block, in the fifth region
  freed.pop_back();
  for (Tensor& t : freed) t = Tensor();  // released in order: the cache gives back the last released first
  EXPECT_GE(Storage::cached_bytes(), std::size_t{118} << 20);  // 59 blocks of 2 MiB kept for reuse
  // A miss: the cache gives blocks back until it holds 64 MiB, the fourth region's 16 first, and that
  // region, emptied, is unmapped; the third gives back 11 of its 16.
  Tensor other = empty({std::size_t{10} << 20});
  EXPECT_LE(Storage::cached_bytes(), std::size_t{64} << 20);
  for (Tensor& t : held) {
    const double value = t.to_vector().back();
    EXPECT_EQ(t.to_vector().front(), value);
    t.data<float>()[0] = 1.0f;  // still mapped and writable
  }
  // New storages, from the cache and cut from the regions again, start zeroed.
  std::vector<Tensor> again;
  for (int i = 0; i < 40; ++i) again.push_back(zeros({std::size_t{1} << 19}));
  for (const Tensor& t : again) EXPECT_EQ(t.to_vector().back(), 0.0);
}

}  // namespace
}  // namespace attnlab
