// Adam and AdamW against torch.optim's formulas written out longhand (AdamReference): L2 against
// decoupled decay, past the SIMD width, per-parameter bias correction; AdamW's decay groups by parameter kind.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tests/optim/optim_testing.hpp"

namespace attnlab::optim_testing {
namespace {

TEST(Adam, FirstStepIsLrTimesTheSignOfTheGradient) {
  // m_hat = g and v_hat = g^2 after one step, so p -= lr * g / (|g| + eps).
  Tensor w = leaf({1.0, 1.0});
  AdamOptions o;
  o.lr = 0.1;
  Adam adam({{"w", w, ParamKind::weight}}, o);
  set_grad(w, {0.5, -3.0});
  adam.step();
  testing::expect_values(w, {1.0 - 0.1 * 0.5 / (0.5 + 1e-8), 1.0 + 0.1 * 3.0 / (3.0 + 1e-8)}, 1e-14);
}

TEST(Adam, MatchesTorchFormulasWithL2) {
  for (DType dtype : {DType::float64, DType::float32}) {
    SCOPED_TRACE(dtype_name(dtype));
    AdamOptions o;
    o.lr = 0.01;
    o.beta1 = 0.8;
    o.beta2 = 0.9;
    o.eps = 1e-3;  // comparable to the third gradient: the reference catches eps in the wrong place
    o.weight_decay = 0.1;
    Tensor w = leaf(kStart, dtype);
    Adam adam({{"w", w, ParamKind::weight}}, o);
    AdamReference reference{o.beta1, o.beta2, o.eps, o.weight_decay, 0.0, kStart};
    expect_matches(adam, w, reference, dtype == DType::float64 ? 1e-12 : 1e-6);
    EXPECT_EQ(adam.state_dict().at("w.exp_avg").dtype(), dtype);
  }
}

TEST(AdamW, MatchesTorchFormulasWithDecoupledDecay) {
  for (DType dtype : {DType::float64, DType::float32}) {
    SCOPED_TRACE(dtype_name(dtype));
    AdamWOptions o;
    o.lr = 0.01;
    o.eps = 1e-3;
    o.weight_decay = 0.5;
    Tensor w = leaf(kStart, dtype);
    AdamW adamw({{"w", w, ParamKind::weight}}, o);
    AdamReference reference{o.beta1, o.beta2, o.eps, 0.0, o.weight_decay, kStart};
    expect_matches(adamw, w, reference, dtype == DType::float64 ? 1e-12 : 1e-6);
  }
}

TEST(Adam, MatchesTorchFormulasPastTheSimdWidth) {
  // 37 elements: whole xsimd batches (8 or 16 lanes) and a scalar tail.
  Generator gen(11);
  const std::size_t n = 37;
  const Values start = randn({n}, gen, DType::float64).to_vector();
  std::vector<Values> grads;
  for (int k = 0; k < 4; ++k) grads.push_back(randn({n}, gen, DType::float64, 0.0, 1e-3).to_vector());
  for (DType dtype : {DType::float64, DType::float32}) {
    for (bool decoupled : {false, true}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + (decoupled ? " AdamW" : " Adam"));
      const double lr = 0.01, eps = 1e-3, weight_decay = 0.2;
      Tensor w = leaf(start, dtype);
      std::unique_ptr<Optimizer> optimizer;
      if (decoupled) {
        AdamWOptions o;
        o.lr = lr, o.eps = eps, o.weight_decay = weight_decay;
        optimizer = std::make_unique<AdamW>(std::vector<NamedParameter>{{"w", w, ParamKind::weight}}, o);
      } else {
        AdamOptions o;
        o.lr = lr, o.eps = eps, o.weight_decay = weight_decay;
        optimizer = std::make_unique<Adam>(std::vector<NamedParameter>{{"w", w, ParamKind::weight}}, o);
      }
      AdamReference reference{0.9, 0.999, eps, decoupled ? 0.0 : weight_decay, decoupled ? weight_decay : 0.0, start};
      for (const Values& g : grads) {
        set_grad(w, g);
        optimizer->step();
        reference.step(g, lr);
      }
      testing::expect_values(w, reference.p, dtype == DType::float64 ? 1e-12 : 1e-6);
      testing::expect_values(optimizer->state_dict().at("w.exp_avg_sq"), reference.v,
                             dtype == DType::float64 ? 1e-18 : 1e-9);  // v is about 3e-4 here
    }
  }
}

TEST(AdamW, UndecayedKindIsPlainAdam) {
  AdamWOptions o;
  o.lr = 0.01;
  o.weight_decay = 0.5;
  Tensor b = leaf(kStart);
  AdamW adamw({{"b", b, ParamKind::bias}}, o);
  AdamReference reference{o.beta1, o.beta2, o.eps, 0.0, 0.0, kStart};
  expect_matches(adamw, b, reference, 1e-12);
}

TEST(Adam, BiasCorrectionCountsEachParametersOwnUpdates) {
  // As torch: a parameter without a gradient at some step keeps its own, smaller step count.
  AdamOptions o;
  o.lr = 0.1;
  Tensor a = leaf(kStart);
  Tensor b = leaf(kStart);
  Adam adam({{"a", a, ParamKind::weight}, {"b", b, ParamKind::weight}}, o);
  AdamReference ref_a{o.beta1, o.beta2, o.eps, 0.0, 0.0, kStart};
  AdamReference ref_b = ref_a;
  for (std::size_t k = 0; k < 3; ++k) {
    set_grad(a, kGrads[k]);
    ref_a.step(kGrads[k], o.lr);
    if (k == 1) {
      b.zero_grad();
    } else {
      set_grad(b, kGrads[k]);
      ref_b.step(kGrads[k], o.lr);
    }
    adam.step();
  }
  testing::expect_values(a, ref_a.p, 1e-12);
  testing::expect_values(b, ref_b.p, 1e-12);
  const auto state = adam.state_dict();
  EXPECT_EQ(state.at("step").item(), 3);
  EXPECT_EQ(state.at("a.step").item(), 3);
  EXPECT_EQ(state.at("b.step").item(), 2);
}

// One AdamW step with zero gradients (Adam's part is then exactly 0): returns, per parameter name,
// whether its values changed, after checking that changed ones were scaled by 1 - lr * weight_decay.
std::map<std::string, bool> decayed_after_one_step(TinyModel& model, const AdamWOptions& o) {
  AdamW adamw(model.named_parameters(), o);
  std::map<std::string, Values> before;
  for (NamedParameter& p : model.named_parameters()) {
    before[p.name] = p.tensor.to_vector();
    p.tensor.set_grad(zeros_like(p.tensor));
  }
  adamw.step();
  std::map<std::string, bool> changed;
  for (const NamedParameter& p : model.named_parameters()) {
    const Values after = p.tensor.to_vector();
    changed[p.name] = after != before[p.name];
    if (!changed[p.name]) continue;
    Values expected;
    for (double v : before[p.name]) expected.push_back(v * (1.0 - o.lr * o.weight_decay));
    testing::expect_values(p.tensor, expected, 1e-6);
  }
  return changed;
}

TEST(AdamW, DecaysOnlyWeightMatricesByDefault) {
  Generator gen(7);
  TinyModel model(gen);
  AdamWOptions o;
  o.lr = 0.1;
  o.weight_decay = 0.5;
  AdamW adamw(model.named_parameters(), o);
  EXPECT_EQ(adamw.decayed_names(), std::vector<std::string>{"block.weight"});
  const auto changed = decayed_after_one_step(model, o);
  EXPECT_TRUE(changed.at("block.weight"));
  EXPECT_FALSE(changed.at("block.bias"));
  EXPECT_FALSE(changed.at("norm_gain"));
  EXPECT_FALSE(changed.at("tok_emb"));
}

TEST(AdamW, DecaysEmbeddingsWhenConfigured) {
  Generator gen(7);
  TinyModel model(gen);
  AdamWOptions o;
  o.lr = 0.1;
  o.weight_decay = 0.5;
  o.decay_kinds = {ParamKind::weight, ParamKind::embedding};
  AdamW adamw(model.named_parameters(), o);
  EXPECT_EQ(adamw.decayed_names(), (std::vector<std::string>{"tok_emb", "block.weight"}));
  const auto changed = decayed_after_one_step(model, o);
  EXPECT_TRUE(changed.at("tok_emb"));
  EXPECT_TRUE(changed.at("block.weight"));
  EXPECT_FALSE(changed.at("block.bias"));
  EXPECT_FALSE(changed.at("norm_gain"));
}

}  // namespace
}  // namespace attnlab::optim_testing
