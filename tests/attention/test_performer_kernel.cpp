// The performer kernel: its estimate of softmax attention improves as the number of features grows,
// features are seeded and redrawn on schedule.
#include <gtest/gtest.h>

#include <cmath>

#include "framework/attention/kernel.hpp"
#include "tests/test_util.hpp"

namespace attnlab {
namespace {

double mean_error_against_softmax(std::size_t features, bool causal) {
  Generator data(11);
  const Tensor q = randn({2, 2, 32, 16}, data, DType::float64, 0.0, 0.5), k = randn({2, 2, 32, 16}, data, DType::float64, 0.0, 0.5),
               v = randn({2, 2, 32, 16}, data, DType::float64);
  Generator gen(5);
  auto exact = make_kernel("softmax", KernelSpec{2, 16, 32, causal}, YAML::Node(), gen);
  YAML::Node options;
  options["features"] = features;
  auto approx = make_kernel("performer", KernelSpec{2, 16, 32, causal}, options, gen);
  approx->to(DType::float64);
  const auto a = exact->forward(q, k, v, AttentionContext{causal, Tensor(), false}).output.to_vector();
  const auto b = approx->forward(q, k, v, AttentionContext{causal, Tensor(), false}).output.to_vector();
  double error = 0;
  for (std::size_t i = 0; i < a.size(); ++i) error += std::fabs(a[i] - b[i]);
  return error / static_cast<double>(a.size());
}

TEST(PerformerKernel, ErrorAgainstSoftmaxFallsAsFeaturesGrow) {
  for (bool causal : {false, true}) {
    const double e16 = mean_error_against_softmax(16, causal), e64 = mean_error_against_softmax(64, causal),
                 e256 = mean_error_against_softmax(256, causal);
    EXPECT_LT(e64, e16) << "causal " << causal;
    EXPECT_LT(e256, e64) << "causal " << causal;
    EXPECT_LT(e256, 0.1) << "causal " << causal;
  }
}

TEST(PerformerKernel, FeaturesAreSeededAndRedrawnOnSchedule) {
  Generator g1(3), g2(3);
  YAML::Node options = YAML::Load("{features: 8, redraw_interval: 2}");
  auto a = make_kernel("performer", KernelSpec{1, 4, 8, false}, options, g1);
  auto b = make_kernel("performer", KernelSpec{1, 4, 8, false}, options, g2);
  const auto projection = [](const std::shared_ptr<AttentionKernel>& k) { return k->named_buffers()[0].second.to_vector(); };
  EXPECT_EQ(projection(a), projection(b));
  Generator data(4);
  const Tensor x = randn({1, 1, 5, 4}, data);
  const auto initial = projection(a);
  a->forward(x, x, x, {});
  EXPECT_EQ(projection(a), initial);  // first call
  a->forward(x, x, x, {});
  EXPECT_EQ(projection(a), initial);
  a->forward(x, x, x, {});
  EXPECT_NE(projection(a), initial);  // third call: redrawn
  a->eval();
  const auto frozen = projection(a);
  for (int i = 0; i < 4; ++i) a->forward(x, x, x, {});
  EXPECT_EQ(projection(a), frozen);  // never in eval
}

}  // namespace
}  // namespace attnlab
