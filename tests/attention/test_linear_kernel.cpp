// The linear kernel against a naive quadratic implementation of the same formula, numerics on long
// sequences with large activations, the memory of causal training, and the fused op's gradients.
#include <gtest/gtest.h>

#include <cmath>

#include "framework/attention/kernel.hpp"
#include "framework/attention/linear/linear_attention.hpp"
#include "framework/io/config_node.hpp"
#include "tests/test_util.hpp"

namespace attnlab {
namespace {

// out_i = sum_j a_ij v_j / (sum_j a_ij + eps), a_ij = phi(q_i) . phi(k_j), j <= i when causal.
std::vector<double> naive_linear(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double eps) {
  const std::size_t bh = q.size(0) * q.size(1), t = q.size(2), d = q.size(3), dv = v.size(3);
  const auto phi = [](double x) { return x > 0 ? x + 1.0 : std::exp(x); };
  const auto vq = q.to_vector(), vk = k.to_vector(), vv = v.to_vector();
  std::vector<double> out(bh * t * dv, 0.0);
  for (std::size_t h = 0; h < bh; ++h)
    for (std::size_t i = 0; i < t; ++i) {
      double den = eps;
      std::vector<double> num(dv, 0.0);
      for (std::size_t j = 0; j < t; ++j) {
        if (causal && j > i) continue;
        double a = 0;
        for (std::size_t c = 0; c < d; ++c) a += phi(vq[(h * t + i) * d + c]) * phi(vk[(h * t + j) * d + c]);
        den += a;
        for (std::size_t c = 0; c < dv; ++c) num[c] += a * vv[(h * t + j) * dv + c];
      }
      for (std::size_t c = 0; c < dv; ++c) out[(h * t + i) * dv + c] = num[c] / den;
    }
  return out;
}

std::shared_ptr<AttentionKernel> linear_kernel(bool causal) {
  Generator gen(0);
  return make_kernel("linear", KernelSpec{2, 4, 64, causal}, YAML::Node(), gen);
}

TEST(LinearKernel, MatchesTheNaiveQuadraticFormula) {
  for (bool causal : {false, true}) {
    Generator gen(1);
    const Tensor q = randn({2, 2, 9, 4}, gen, DType::float64), k = randn({2, 2, 9, 4}, gen, DType::float64),
                 v = randn({2, 2, 9, 4}, gen, DType::float64);
    const auto got = linear_kernel(causal)->forward(q, k, v, AttentionContext{causal, Tensor(), false}).output.to_vector();
    const auto want = naive_linear(q, k, v, causal, 1e-6);
    for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-10) << "causal " << causal;
  }
}

TEST(LinearKernel, LongSequencesWithLargeActivationsStayFinite) {
  // 4096 tokens of activations around +-60 in float32: sums of products reach ~1e10 per state entry.
  for (bool causal : {false, true}) {
    Generator gen(2);
    const Tensor q = randn({1, 1, 4096, 8}, gen, {}, 0.0, 60.0), k = randn({1, 1, 4096, 8}, gen, {}, 0.0, 60.0),
                 v = randn({1, 1, 4096, 8}, gen, {}, 0.0, 60.0);
    const Tensor out = linear_kernel(causal)->forward(q, k, v, AttentionContext{causal, Tensor(), false}).output;
    double largest = 0;
    for (double x : out.to_vector()) {
      ASSERT_TRUE(std::isfinite(x)) << "causal " << causal;
      largest = std::max(largest, std::fabs(x));
    }
    EXPECT_LE(largest, 60.0 * 6);  // a convex combination of values stays within their range
  }
}

TEST(LinearKernel, CausalTrainingMemoryGrowsAsTD) {
  // A [Dk, Dv] state per position would need T * D * D values; the fused op keeps O(T D).
  const std::size_t t = 1024, d = 64;
  Generator gen(3);
  Tensor q = uniform({1, 1, t, d}, gen, 0.1, 1.0).set_requires_grad(true), k = uniform({1, 1, t, d}, gen, 0.1, 1.0).set_requires_grad(true),
         v = randn({1, 1, t, d}, gen).set_requires_grad(true);
  Storage::reset_peak_bytes();
  const std::size_t before = Storage::live_bytes();
  sum(causal_linear_attention(q, k, v, 1e-6)).backward();
  const std::size_t used = Storage::peak_bytes() - before;
  EXPECT_LT(used, 12 * t * d * sizeof(float)) << used << " bytes";
}

// causal_linear_attention's definition composed from the ops: the masked [T, T] weights, then their
// normalised product with v.
Tensor composed_causal_linear(const Tensor& fq, const Tensor& fk, const Tensor& v, double eps) {
  const std::size_t t = fq.size(-2);
  std::vector<double> lower(t * t, 0.0);
  for (std::size_t i = 0; i < t; ++i)
    for (std::size_t j = 0; j <= i; ++j) lower[i * t + j] = 1.0;
  const Tensor a = matmul(fq, fk, false, true) * from_vector(lower, {t, t}, DType::float64);
  return matmul(a, v) / add(sum(a, -1, true), eps);
}

TEST(CausalLinearAttention, EqualsTheComposedOpsAcrossChunks) {
  // 150 tokens: two whole chunks of 64 and a partial one; values and the gradients of a weighted sum.
  std::vector<Tensor> a{testing::param_uniform({2, 3, 150, 6}, 41, 0.1, 1.5), testing::param_uniform({2, 3, 150, 6}, 42, 0.1, 1.5),
                        testing::param({2, 3, 150, 5}, 43)};
  std::vector<Tensor> b;
  for (const Tensor& x : a) b.push_back(x.detach().clone().set_requires_grad(true));
  Generator gen(44);
  const Tensor r = randn({2, 3, 150, 5}, gen, DType::float64);
  const Tensor fused = causal_linear_attention(a[0], a[1], a[2], 1e-6);
  const Tensor composed = composed_causal_linear(b[0], b[1], b[2], 1e-6);
  testing::expect_values(fused, composed.to_vector(), 1e-12);
  sum(fused * r).backward();
  sum(composed * r).backward();
  for (std::size_t i = 0; i < 3; ++i) testing::expect_values(a[i].grad(), b[i].grad().to_vector(), 1e-11);
}

TEST(CausalLinearAttention, Float32AgreesWithFloat64) {
  // The chunk products run in float32 for float32 inputs (the running states in double): over 1000
  // tokens, outputs and gradients stay within float32 rounding of the float64 result.
  std::vector<Tensor> wide{testing::param_uniform({1, 2, 1000, 16}, 45, 0.0, 2.0), testing::param_uniform({1, 2, 1000, 16}, 46, 0.0, 2.0),
                           testing::param({1, 2, 1000, 8}, 47)};
  std::vector<Tensor> narrow;
  for (const Tensor& x : wide) narrow.push_back(x.detach().to(DType::float32).set_requires_grad(true));
  sum(causal_linear_attention(wide[0], wide[1], wide[2], 1e-6)).backward();
  const Tensor out32 = causal_linear_attention(narrow[0], narrow[1], narrow[2], 1e-6);
  sum(out32).backward();
  testing::expect_values(out32, causal_linear_attention(wide[0].detach(), wide[1].detach(), wide[2].detach(), 1e-6).to_vector(), 1e-4);
  for (std::size_t i = 0; i < 3; ++i) testing::expect_values(narrow[i].grad(), wide[i].grad().to_vector(), 1e-4);
}

TEST(LinearKernel, UnknownFeatureMapIsAConfigError) {
  Generator gen(0);
  EXPECT_THROW(make_kernel("linear", KernelSpec{1, 4, 8, false}, YAML::Load("feature_map: tanh"), gen), ConfigError);
}

TEST(FusedGradcheck, CausalLinearAttention) {
  EXPECT_TRUE(testing::gradcheck_passes([](const auto& in) { return causal_linear_attention(in[0], in[1], in[2], 1e-6); },
                                        {testing::param_uniform({2, 5, 3}, 1, 0.1, 1.5), testing::param_uniform({2, 5, 3}, 2, 0.1, 1.5),
                                         testing::param({2, 5, 4}, 3)}));
}

TEST(FusedGradcheck, BidirectionalLinearAttention) {
  // Cross shapes too: 4 queries over 6 keys, 3 features, 5 value dims.
  EXPECT_TRUE(testing::gradcheck_passes([](const auto& in) { return linear_attention(in[0], in[1], in[2], 1e-6); },
                                        {testing::param_uniform({2, 4, 3}, 4, 0.1, 1.5), testing::param_uniform({2, 6, 3}, 5, 0.1, 1.5),
                                         testing::param({2, 6, 5}, 6)}));
}

TEST(LinearAttentionOp, EqualsTheFormulaAndKeepsOnlyItsInputs) {
  Tensor fq = testing::param_uniform({1, 2, 5, 3}, 7, 0.1, 1.5), fk = testing::param_uniform({1, 2, 7, 3}, 8, 0.1, 1.5);
  Tensor v = testing::param({1, 2, 7, 4}, 9);
  const std::size_t before = Storage::live_bytes();
  const Tensor out = linear_attention(fq, fk, v, 1e-6);
  EXPECT_EQ(Storage::live_bytes() - before, out.numel() * sizeof(double));
  const std::vector<double> q = fq.to_vector(), k = fk.to_vector(), vv = v.to_vector(), o = out.to_vector();
  for (std::size_t h = 0; h < 2; ++h)
    for (std::size_t i = 0; i < 5; ++i) {
      std::vector<double> w(7);
      double total = 0;
      for (std::size_t j = 0; j < 7; ++j) {
        for (std::size_t f = 0; f < 3; ++f) w[j] += q[(h * 5 + i) * 3 + f] * k[(h * 7 + j) * 3 + f];
        total += w[j];
      }
      for (std::size_t d = 0; d < 4; ++d) {
        double want = 0;
        for (std::size_t j = 0; j < 7; ++j) want += w[j] * vv[(h * 7 + j) * 4 + d];
        EXPECT_NEAR(o[(h * 5 + i) * 4 + d], want / (total + 1e-6), 1e-12);
      }
    }
}

}  // namespace
}  // namespace attnlab
