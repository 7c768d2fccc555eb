// matmul: values against a naive triple loop for plain, transposed, batched and broadcast operands;
// float64 gradchecks for each form.
#include <gtest/gtest.h>

#include <utility>

#include "framework/ops/parallel.hpp"
#include "tests/test_util.hpp"

namespace attnlab {
namespace {

using testing::gradcheck_passes;
using testing::param;

// Naive reference: a [..., M, K] (or stored transposed), b likewise; batch axes broadcast.
Tensor naive_matmul(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  const Tensor A = ta ? transpose(a, -1, -2) : a;
  const Tensor B = tb ? transpose(b, -1, -2) : b;
  // Broadcast both to the full batch, then loop.
  const std::size_t m = A.size(-2), k = A.size(-1), n = B.size(-1);
  Shape batch = broadcast_shapes(Shape(A.shape().begin(), A.shape().end() - 2),
                                 Shape(B.shape().begin(), B.shape().end() - 2), "naive");
  Shape sa = batch, sb = batch, so = batch;
  sa.insert(sa.end(), {m, k});
  sb.insert(sb.end(), {k, n});
  so.insert(so.end(), {m, n});
  const std::vector<double> va = broadcast_to(A.detach(), sa).to_vector(), vb = broadcast_to(B.detach(), sb).to_vector();
  std::vector<double> vo(shape_numel(so), 0.0);
  for (std::size_t p = 0; p < shape_numel(batch); ++p)
    for (std::size_t i = 0; i < m; ++i)
      for (std::size_t j = 0; j < n; ++j) {
        double acc = 0;
        for (std::size_t q = 0; q < k; ++q) acc += va[p * m * k + i * k + q] * vb[p * k * n + q * n + j];
        vo[p * m * n + i * n + j] = acc;
      }
  return from_vector(vo, so, DType::float64);
}

void expect_matches_naive(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  const Tensor got = matmul(a, b, ta, tb);
  const Tensor want = naive_matmul(a, b, ta, tb);
  ASSERT_EQ(got.shape(), want.shape());
  const auto g = got.to_vector(), w = want.to_vector();
  for (std::size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], w[i], 1e-4 * (1 + std::fabs(w[i])));
}

TEST(Matmul, TwoByTwoByHand) {
  Tensor a = from_vector({1, 2, 3, 4}, {2, 2});
  Tensor b = from_vector({5, 6, 7, 8}, {2, 2});
  testing::expect_values(matmul(a, b), {19, 22, 43, 50});
  testing::expect_values(matmul(a, b, true, false), {26, 30, 38, 44});
  testing::expect_values(matmul(a, b, false, true), {17, 23, 39, 53});
}

TEST(Matmul, AllFormsMatchANaiveLoop) {
  Generator gen(11);
  for (DType dt : {DType::float32, DType::float64}) {
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        const Tensor a2 = randn(ta ? Shape{5, 3} : Shape{3, 5}, gen, dt);
        const Tensor b2 = randn(tb ? Shape{4, 5} : Shape{5, 4}, gen, dt);
        expect_matches_naive(a2, b2, ta, tb);
        const Tensor a3 = randn(ta ? Shape{2, 5, 3} : Shape{2, 3, 5}, gen, dt);
        const Tensor b3 = randn(tb ? Shape{2, 4, 5} : Shape{2, 5, 4}, gen, dt);
        expect_matches_naive(a3, b3, ta, tb);
        expect_matches_naive(a3, b2, ta, tb);  // batched times plain (folded into one gemm when !ta)
        expect_matches_naive(a2, b3, ta, tb);
      }
    // 4-D with batch broadcasting: [2, 1, 3, 5] x [3, 5, 4] -> [2, 3, 3, 4]
    expect_matches_naive(randn({2, 1, 3, 5}, gen, dt), randn({3, 5, 4}, gen, dt), false, false);
    expect_matches_naive(randn({2, 3, 4, 6}, gen, dt), randn({2, 3, 5, 6}, gen, dt), false, true);
  }
}

TEST(Matmul, ShapeErrorsNameTheShapes) {
  try {
    matmul(zeros({2, 3}), zeros({4, 5}));
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("[2, 3]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(matmul(zeros({3}), zeros({3, 2})), std::invalid_argument);
  EXPECT_THROW(matmul(zeros({2, 2, 3}), zeros({3, 3, 2})), std::invalid_argument);  // batch 2 vs 3
}

TEST(MatmulGradcheck, Plain) {
  EXPECT_TRUE(gradcheck_passes([](const auto& in) { return matmul(in[0], in[1]); }, {param({3, 4}, 1), param({4, 2}, 2)}));
}
TEST(MatmulGradcheck, Transposes) {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const Tensor a = param(ta ? Shape{4, 3} : Shape{3, 4}, 1);
      const Tensor b = param(tb ? Shape{2, 4} : Shape{4, 2}, 2);
      EXPECT_TRUE(gradcheck_passes([=](const auto& in) { return matmul(in[0], in[1], ta, tb); }, {a, b}))
          << "ta " << ta << " tb " << tb;
    }
}
TEST(MatmulGradcheck, BatchedWithTransposes) {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const Tensor a = param(ta ? Shape{2, 2, 4, 3} : Shape{2, 2, 3, 4}, 1);
      const Tensor b = param(tb ? Shape{2, 2, 5, 4} : Shape{2, 2, 4, 5}, 2);
      EXPECT_TRUE(gradcheck_passes([=](const auto& in) { return matmul(in[0], in[1], ta, tb); }, {a, b}))
          << "ta " << ta << " tb " << tb;
    }
}
TEST(MatmulGradcheck, BatchedTimesPlainMatrix) {
  for (bool tb : {false, true}) {
    const Tensor b = param(tb ? Shape{2, 4} : Shape{4, 2}, 2);
    EXPECT_TRUE(gradcheck_passes([=](const auto& in) { return matmul(in[0], in[1], false, tb); }, {param({2, 3, 4}, 1), b}));
  }
  EXPECT_TRUE(gradcheck_passes([](const auto& in) { return matmul(in[0], in[1], true, false); },
                               {param({2, 4, 3}, 1), param({4, 2}, 2)}));
}
TEST(MatmulGradcheck, BatchBroadcast) {
  EXPECT_TRUE(gradcheck_passes([](const auto& in) { return matmul(in[0], in[1]); },
                               {param({2, 1, 3, 4}, 1), param({3, 4, 2}, 2)}));
  EXPECT_TRUE(gradcheck_passes([](const auto& in) { return matmul(in[0], in[1]); }, {param({3, 4}, 3), param({2, 4, 2}, 4)}));
}
TEST(MatmulGradcheck, PlainMatrixAgainstABatchWithTransposes) {
  // The gradient of the plain matrix is accumulated over the batch in place.
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const Tensor a = param(ta ? Shape{4, 3} : Shape{3, 4}, 1);
      const Tensor b = param(tb ? Shape{2, 2, 5, 4} : Shape{2, 2, 4, 5}, 2);
      EXPECT_TRUE(gradcheck_passes([=](const auto& in) { return matmul(in[0], in[1], ta, tb); }, {a, b}))
          << "ta " << ta << " tb " << tb;
    }
}

// linear(x, W, b) is x W^T + b: the bias added to the rounded product gives the composed values bit for
// bit in float32, and float64 gradients pass gradcheck with and without a bias.
TEST(Linear, EqualsTheComposedFormAndPassesGradcheck) {
  Generator gen(11);
  const Tensor x = randn({3, 5, 7}, gen), w = randn({4, 7}, gen), b = randn({4}, gen);
  EXPECT_EQ(linear(x, w, b).to_vector(), (matmul(x, w, false, true) + b).to_vector());
  EXPECT_EQ(linear(x, w, Tensor()).to_vector(), matmul(x, w, false, true).to_vector());
  EXPECT_TRUE(gradcheck_passes([](const auto& in) { return linear(in[0], in[1], in[2]); },
                               {param({2, 3, 5}, 1), param({4, 5}, 2), param({4}, 3)}));
  EXPECT_TRUE(gradcheck_passes([](const auto& in) { return linear(in[0], in[1], Tensor()); }, {param({6, 5}, 4), param({3, 5}, 5)}));
  EXPECT_THROW(linear(x, randn({4, 6}, gen), b), std::invalid_argument);
  EXPECT_THROW(linear(x, w, randn({5}, gen)), std::invalid_argument);
}

// The same bits on one thread and two, where the product is split by rows (768 rows) or by columns (2
// rows, 4096 outputs), and where the inner dimension is long enough (512) for oneDNN to split it: the
// bias is added once the product is whole, never as its starting value.
TEST(Linear, TheBiasIsAddedToTheWholeProductOnEveryThreadCount) {
  Generator gen(12);
  for (const auto& [rows, out] : {std::pair<std::size_t, std::size_t>{768, 128}, {2, 4096}}) {
    const Tensor x = randn({rows, 512}, gen), w = randn({out, 512}, gen), b = randn({out}, gen);
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      EXPECT_EQ(linear(x, w, b).to_vector(), (matmul(x, w, false, true) + b).to_vector()) << rows << " rows, " << threads << " threads";
    }
    set_num_threads(1);
  }
}

}  // namespace
}  // namespace attnlab
