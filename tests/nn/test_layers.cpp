// Layers and positional encodings: values, initialisation ranges, errors, float64 gradchecks over inputs
// and parameters.
#include <gtest/gtest.h>

#include <cmath>

#include "framework/nn/layers.hpp"
#include "framework/nn/positional.hpp"
#include "tests/test_util.hpp"

namespace attnlab {
namespace {

using testing::gradcheck_passes;
using testing::param;

using testing::with_parameters;

TEST(Linear, ComputesXWTransposePlusBias) {
  Generator gen(0);
  Linear linear(3, 2, true, gen);
  linear.weight.set_data(from_vector({1, 2, 3, 4, 5, 6}, {2, 3}));
  linear.bias.set_data(from_vector({10, 20}, {2}));
  testing::expect_values(linear.forward(from_vector({1, 0, -1, 2, 2, 2}, {2, 3})), {8, 18, 22, 50});
  EXPECT_EQ(linear.forward(ones({4, 5, 3})).shape(), (Shape{4, 5, 2}));
  EXPECT_THROW(linear.forward(ones({2, 4})), std::invalid_argument);
}

TEST(Linear, InitialisesWithinPyTorchsBound) {
  Generator gen(0);
  Linear linear(64, 32, true, gen);
  const double bound = 1.0 / 8.0;
  for (double v : linear.weight.to_vector()) EXPECT_LE(std::fabs(v), bound);
  EXPECT_GT(max(linear.weight).item(), 0.9 * bound);  // the range is used
  EXPECT_EQ(linear.parameter_count(), 64u * 32 + 32);
  Linear no_bias(4, 4, false, gen);
  EXPECT_FALSE(no_bias.bias.defined());
  EXPECT_EQ(no_bias.parameter_count(), 16u);
}

TEST(LayersGradcheck, Linear) {
  Generator gen(0);
  Linear linear(4, 3, true, gen);
  linear.to(DType::float64);
  EXPECT_TRUE(gradcheck_passes([&](const auto& in) { return linear.forward(in[0]); },
                               with_parameters({param({2, 5, 4}, 1)}, linear)));
}

TEST(LayersGradcheck, Embedding) {
  Generator gen(0);
  Embedding emb(6, 3, gen);
  emb.to(DType::float64);
  const Tensor ids = from_indices({0, 5, 5, 2}, {2, 2});
  EXPECT_TRUE(gradcheck_passes([&](const auto&) { return emb.forward(ids); }, with_parameters({}, emb)));
}

TEST(LayersGradcheck, LayerNorm) {
  LayerNorm norm(5);
  norm.to(DType::float64);
  Generator gen(3);
  norm.weight.set_data(randn({5}, gen, DType::float64));  // not the identity init
  norm.weight.set_requires_grad(true);
  EXPECT_TRUE(gradcheck_passes([&](const auto& in) { return norm.forward(in[0]); },
                               with_parameters({param({3, 5}, 1)}, norm)));
}

TEST(LayersGradcheck, FeedForwardGeluAndRelu) {
  for (Activation act : {Activation::gelu, Activation::relu}) {
    Generator gen(0);
    FeedForward ff(4, 8, act, 0.0, gen);
    ff.to(DType::float64);
    EXPECT_TRUE(gradcheck_passes([&](const auto& in) { return ff.forward(in[0]); },
                                 with_parameters({param({2, 3, 4}, 1)}, ff)))
        << activation_name(act);
  }
}

TEST(LayersGradcheck, DropoutInTraining) {
  EXPECT_TRUE(gradcheck_passes(
      [](const auto& in) {
        Generator gen(5);
        Dropout drop(0.3, gen);
        return drop.forward(in[0]);
      },
      {param({4, 4}, 1)}));
}

TEST(Positional, SinusoidalTableMatchesTheFormula) {
  Generator gen(0);
  PositionalEncoding pe(PositionalKind::sinusoidal, 16, 8, 2, gen);
  EXPECT_NEAR(pe.table.at({3, 0}), std::sin(3.0), 1e-6);
  EXPECT_NEAR(pe.table.at({3, 1}), std::cos(3.0), 1e-6);
  EXPECT_NEAR(pe.table.at({5, 4}), std::sin(5.0 / std::pow(10000.0, 4.0 / 8.0)), 1e-6);
  EXPECT_NEAR(pe.table.at({5, 5}), std::cos(5.0 / std::pow(10000.0, 4.0 / 8.0)), 1e-6);
  EXPECT_EQ(pe.parameter_count(), 0u);
  Tensor x = zeros({2, 4, 8});
  EXPECT_EQ(pe.add_to(x).at({1, 3, 0}), pe.table.at({3, 0}));
  EXPECT_THROW(pe.add_to(zeros({1, 17, 8})), std::invalid_argument);
}

TEST(Positional, LearnedIsAParameterAndNoneChangesNothing) {
  Generator gen(0);
  PositionalEncoding learned(PositionalKind::learned, 8, 4, 2, gen);
  EXPECT_EQ(learned.parameter_count(), 32u);
  PositionalEncoding none(PositionalKind::none, 8, 4, 2, gen);
  Tensor x = ones({1, 3, 4});
  EXPECT_TRUE(none.add_to(x).same(x));
  EXPECT_THROW(parse_positional_kind("absolute"), std::invalid_argument);
}

TEST(Positional, RotaryPreservesNormsAndMakesScoresRelative) {
  Generator gen(0);
  PositionalEncoding rope(PositionalKind::rotary, 32, 8, 4, gen);
  // The same q and k vector at every position: after rotation, q_i . k_j depends only on i - j.
  Tensor base = randn({1, 1, 1, 4}, gen, DType::float64);
  Tensor seq = broadcast_to(base, {1, 1, 10, 4});
  rope.to(DType::float64);
  Tensor r = rope.rotate(seq);
  const Tensor scores = matmul(r, r, false, true);  // [1, 1, 10, 10]
  for (std::size_t i = 0; i + 2 < 10; ++i) EXPECT_NEAR(scores.at({0, 0, i + 2, i}), scores.at({0, 0, 2, 0}), 1e-6);  // tables are float32
  const Tensor norms = sum(r * r, -1);
  for (std::size_t i = 0; i < 10; ++i) EXPECT_NEAR(norms.at({0, 0, i}), sum(base * base).item(), 1e-6);
  EXPECT_EQ(rope.rotate(seq, 0).at({0, 0, 0, 1}), seq.at({0, 0, 0, 1}));  // position 0 is not rotated
  EXPECT_THROW(PositionalEncoding(PositionalKind::rotary, 8, 8, 3, gen), std::invalid_argument);
}

TEST(LayersGradcheck, PositionalEncodings) {
  for (PositionalKind kind : {PositionalKind::sinusoidal, PositionalKind::learned}) {
    Generator gen(0);
    PositionalEncoding pe(kind, 8, 4, 2, gen);
    pe.to(DType::float64);
    EXPECT_TRUE(gradcheck_passes([&](const auto& in) { return pe.add_to(in[0], 2); }, with_parameters({param({2, 5, 4}, 1)}, pe)))
        << positional_kind_name(kind);
  }
  Generator gen(0);
  PositionalEncoding rope(PositionalKind::rotary, 8, 4, 4, gen);
  rope.to(DType::float64);
  EXPECT_TRUE(gradcheck_passes([&](const auto& in) { return rope.rotate(in[0], 1); }, {param({1, 2, 5, 4}, 1)}));
}

}  // namespace
}  // namespace attnlab
