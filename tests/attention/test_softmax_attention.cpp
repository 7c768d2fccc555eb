// The softmax kernel's fused op, softmax_attention: equal to the composed ops (softmax of the masked
// scores, times v) in values and gradients, in blocks of queries and not, causal and padded, with the
// training memory of O(T D) it exists for.
#include <gtest/gtest.h>

#include "framework/attention/softmax/softmax_attention.hpp"
#include "tests/test_util.hpp"

namespace attnlab {
namespace {

using testing::expect_values;
using testing::gradcheck_passes;
using testing::param;

TEST(SoftmaxAttentionGradcheck, CausalAndPadded) {
  // Key 3 of batch 1 is padding; with causal masking query 0 of batch 1 still sees key 0.
  Tensor mask = from_mask({false, false, false, false, false, false, false, true}, {2, 1, 1, 4});
  for (bool causal : {false, true}) {
    EXPECT_TRUE(gradcheck_passes(
        [mask, causal](const auto& in) { return softmax_attention(in[0], in[1], in[2], 0.7, mask, causal); },
        {param({2, 2, 4, 3}, 1), param({2, 2, 4, 3}, 2), param({2, 2, 4, 5}, 3)}))
        << "causal " << causal;
  }
  // Cross-attention shapes: 3 queries over 5 keys.
  EXPECT_TRUE(gradcheck_passes([](const auto& in) { return softmax_attention(in[0], in[1], in[2], 0.5, Tensor(), true); },
                               {param({1, 3, 2}, 4), param({1, 5, 2}, 5), param({1, 5, 2}, 6)}));
}
TEST(SoftmaxAttention, EqualsTheComposedOpsAndKeepsNoWeights) {
  const Tensor q = param({2, 3, 6, 4}, 7).detach(), k = param({2, 3, 6, 4}, 8).detach(), v = param({2, 3, 6, 4}, 9).detach();
  Tensor weights;
  const Tensor fused = softmax_attention(q, k, v, 0.5, Tensor(), true, &weights);
  const Tensor reference_weights = scaled_masked_softmax(matmul(q, k, false, true), 0.5, Tensor(), true);
  const std::vector<double> w = weights.to_vector(), rw = reference_weights.to_vector();
  for (std::size_t i = 0; i < w.size(); ++i) EXPECT_NEAR(w[i], rw[i], 1e-14);
  const std::vector<double> o = fused.to_vector(), ro = matmul(reference_weights, v).to_vector();
  for (std::size_t i = 0; i < o.size(); ++i) EXPECT_NEAR(o[i], ro[i], 1e-13);
  // In training q, k, v stay alive for the backward (the callers hold them anyway), with one
  // log-sum-exp per query row: nothing of size Tq x Tk, not even the output.
  Tensor qg = q.detach(), kg = k.detach(), vg = v.detach();
  qg.set_requires_grad(true), kg.set_requires_grad(true), vg.set_requires_grad(true);
  const std::size_t before = Storage::live_bytes();
  Tensor out = softmax_attention(qg, kg, vg, 0.5, Tensor(), true);
  EXPECT_EQ(Storage::live_bytes() - before, (out.numel() + 2 * 3 * 6) * sizeof(double));
}
TEST(SoftmaxAttention, BlockedEqualsTheComposedOps) {
  // 600 keys: several blocks of query rows and chunks of keys, the last of each partial. Causal and
  // not, a padded tail in batch 1, every key padded in batch 2 (zeros, zero gradients); values and
  // gradients.
  Tensor mask = zeros({3, 1, 1, 600}, DType::boolean);
  for (std::size_t j = 500; j < 600; ++j) mask.data<bool>()[600 + j] = true;
  for (std::size_t j = 0; j < 600; ++j) mask.data<bool>()[1200 + j] = true;
  Generator gen(12);
  const Tensor r = randn({3, 2, 600, 5}, gen, DType::float64);
  for (bool causal : {false, true}) {
    std::vector<Tensor> a{param({3, 2, 600, 4}, 13), param({3, 2, 600, 4}, 14), param({3, 2, 600, 5}, 15)};
    std::vector<Tensor> b;
    for (const Tensor& t : a) b.push_back(t.detach().clone().set_requires_grad(true));
    const Tensor blocked = softmax_attention(a[0], a[1], a[2], 0.4, mask, causal);
    const Tensor composed = matmul(scaled_masked_softmax(matmul(b[0], b[1], false, true), 0.4, mask, causal), b[2]);
    expect_values(blocked, composed.to_vector(), 1e-12);
    sum(blocked * r).backward();
    sum(composed * r).backward();
    for (std::size_t i = 0; i < 3; ++i) expect_values(a[i].grad(), b[i].grad().to_vector(), 1e-11);
    const std::vector<double> out = blocked.to_vector();
    for (std::size_t i = 2 * 2 * 600 * 5; i < out.size(); ++i) ASSERT_EQ(out[i], 0.0) << "every key padded";
  }
}
TEST(SoftmaxAttentionGradcheck, BlockedCrossShapes) {
  // Causal with fewer queries than keys (query i is key position i + 2), and with more queries than keys
  // (the first two queries see no key: zero output and gradient).
  for (const auto& [tq, tk] : {std::pair<std::size_t, std::size_t>{3, 5}, {5, 3}}) {
    EXPECT_TRUE(gradcheck_passes([](const auto& in) { return softmax_attention(in[0], in[1], in[2], 0.5, Tensor(), true); },
                                 {param({1, 2, tq, 3}, 16), param({1, 2, tk, 3}, 17), param({1, 2, tk, 2}, 18)}))
        << tq << " queries, " << tk << " keys";
  }
}
TEST(SoftmaxAttention, BlockedTrainingMemoryGrowsAsTD) {
  // Forward and backward at T = 1024, D = 32, 2 heads: one [T, T] float tensor per head would be 4 MB;
  // the blocked op keeps q, k, v, the output, their gradients and scratch of O(T D).
  const std::size_t t = 1024, d = 32;
  Generator gen(19);
  Tensor q = randn({1, 2, t, d}, gen).set_requires_grad(true), k = randn({1, 2, t, d}, gen).set_requires_grad(true),
         v = randn({1, 2, t, d}, gen).set_requires_grad(true);
  Storage::reset_peak_bytes();
  const std::size_t before = Storage::live_bytes();
  sum(softmax_attention(q, k, v, 0.2, Tensor(), true)).backward();
  EXPECT_LT(Storage::peak_bytes() - before, 2 * 10 * t * d * sizeof(float)) << Storage::peak_bytes() - before << " bytes";
}
}  // namespace
}  // namespace attnlab
