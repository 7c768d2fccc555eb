// The linformer kernel: equal to softmax when k = n and E = F = identity; length limits; no causal mode.
#include <gtest/gtest.h>

#include "framework/attention/kernel.hpp"
#include "framework/io/config_node.hpp"
#include "tests/test_util.hpp"

namespace attnlab {
namespace {

TEST(LinformerKernel, IdentityProjectionsEqualSoftmax) {
  Generator gen(0);
  auto lin = make_kernel("linformer", KernelSpec{2, 4, 6, false}, YAML::Load("{proj_dim: 6}"), gen);
  auto soft = make_kernel("softmax", KernelSpec{2, 4, 6, false}, YAML::Node(), gen);
  lin->to(DType::float64);
  std::vector<double> eye(36, 0.0);
  for (std::size_t i = 0; i < 6; ++i) eye[i * 6 + i] = 1.0;
  for (auto& p : lin->named_parameters()) p.tensor.set_data(from_vector(eye, {6, 6}, DType::float64));
  Generator data(1);
  const Tensor q = randn({2, 2, 6, 4}, data, DType::float64), k = randn({2, 2, 6, 4}, data, DType::float64),
               v = randn({2, 2, 6, 4}, data, DType::float64);
  const AttentionResult a = lin->forward(q, k, v, AttentionContext{false, Tensor(), true});
  const AttentionResult b = soft->forward(q, k, v, AttentionContext{false, Tensor(), true});
  const auto x = a.output.to_vector(), y = b.output.to_vector();
  for (std::size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(x[i], y[i], 1e-12);
  const auto px = a.pattern.to_vector(), py = b.pattern.to_vector();
  for (std::size_t i = 0; i < px.size(); ++i) EXPECT_NEAR(px[i], py[i], 1e-12);
}

TEST(LinformerKernel, ShorterSequencesUseLeadingColumnsLongerOnesAreAnError) {
  Generator gen(2);
  auto lin = make_kernel("linformer", KernelSpec{1, 4, 8, false}, YAML::Load("{proj_dim: 3}"), gen);
  Generator data(3);
  const Tensor x5 = randn({1, 1, 5, 4}, data);
  EXPECT_EQ(lin->forward(x5, x5, x5, {}).output.shape(), (Shape{1, 1, 5, 4}));
  const Tensor x9 = randn({1, 1, 9, 4}, data);
  EXPECT_THROW(lin->forward(x9, x9, x9, {}), std::invalid_argument);
  EXPECT_EQ(lin->parameter_count(), 2u * 3 * 8);
  auto shared = make_kernel("linformer", KernelSpec{1, 4, 8, false}, YAML::Load("{proj_dim: 3, share_kv: true}"), gen);
  EXPECT_EQ(shared->parameter_count(), 3u * 8);
}

TEST(LinformerKernel, CausalIsRejectedAtConfigTimeAndShortMaxLenIsAConfigError) {
  Generator gen(4);
  try {
    make_kernel("linformer", KernelSpec{1, 4, 8, true}, YAML::Node(), gen);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("linformer does not support causal attention"), std::string::npos) << e.what();
  }
  EXPECT_THROW(make_kernel("linformer", KernelSpec{1, 4, 16, false}, YAML::Load("max_len: 8"), gen), ConfigError);
}

}  // namespace
}  // namespace attnlab
