// Optimizers against torch.optim's formulas written out longhand in double, AdamW's decay groups,
// skipped parameters, state round trips, gradient clipping, lr schedules and option checks.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "framework/nn/module.hpp"
#include "framework/ops/ops.hpp"
#include "framework/optim/optimizer.hpp"
#include "framework/optim/schedule.hpp"
#include "tests/test_util.hpp"

namespace attnlab {
namespace {

using Values = std::vector<double>;

Tensor leaf(const Values& values, DType dtype = DType::float64) {
  return from_vector(values, {values.size()}, dtype).set_requires_grad(true);
}

void set_grad(Tensor& t, const Values& grad) { t.set_grad(from_vector(grad, t.shape(), t.dtype())); }

template <class F>
void expect_error(F&& f, const std::string& expected) {
  try {
    f();
    ADD_FAILURE() << "expected an error containing '" << expected << "'";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
  }
}

// Four steps' worth of gradients for a 3-element parameter, small enough that eps matters when it is 1e-3.
const std::vector<Values> kGrads = {
    {0.5, -1.0, 2.0e-3}, {0.25, 0.75, -1.5e-3}, {-0.3, 0.1, 0.9e-3}, {1.0, -2.0, 0.0}};
const Values kStart = {1.0, -2.0, 0.5};

// torch.optim.SGD, longhand.
struct SgdReference {
  SGDOptions o;
  Values p;
  Values buffer = Values(p.size(), 0.0);
  bool first = true;

  void step(const Values& grad, double lr) {
    for (std::size_t i = 0; i < p.size(); ++i) {
      double g = grad[i] + o.weight_decay * p[i];
      if (o.momentum != 0.0) {
        buffer[i] = first ? g : o.momentum * buffer[i] + (1.0 - o.dampening) * g;
        g = o.nesterov ? g + o.momentum * buffer[i] : buffer[i];
      }
      p[i] -= lr * g;
    }
    first = false;
  }
};

// Adam as in the paper, with torch's L2 (added to the gradient) or AdamW's decoupled decay.
struct AdamReference {
  double beta1, beta2, eps, l2, decoupled;
  Values p;
  Values m = Values(p.size(), 0.0), v = Values(p.size(), 0.0);
  int t = 0;

  void step(const Values& grad, double lr) {
    ++t;
    for (std::size_t i = 0; i < p.size(); ++i) {
      p[i] = p[i] - lr * decoupled * p[i];
      const double g = grad[i] + l2 * p[i];
      m[i] = beta1 * m[i] + (1.0 - beta1) * g;
      v[i] = beta2 * v[i] + (1.0 - beta2) * g * g;
      const double m_hat = m[i] / (1.0 - std::pow(beta1, t));
      const double v_hat = v[i] / (1.0 - std::pow(beta2, t));
      p[i] -= lr * m_hat / (std::sqrt(v_hat) + eps);
    }
  }
};

// Runs `optimizer` and `reference` side by side over kGrads (lr halved before the third step).
template <class Reference>
void expect_matches(Optimizer& optimizer, Tensor& param, Reference& reference, double tol) {
  for (std::size_t k = 0; k < kGrads.size(); ++k) {
    if (k == 2) optimizer.set_lr(optimizer.lr() / 2);
    set_grad(param, kGrads[k]);
    optimizer.step();
    reference.step(kGrads[k], optimizer.lr());
    testing::expect_values(param, reference.p, tol);
  }
  EXPECT_EQ(optimizer.step_count(), kGrads.size());
}

// ---- SGD ----

TEST(SGD, HandComputedMomentumAndNesterov) {
  // p = 1, g = 1, lr 0.1, momentum 0.9. Heavy ball: buf 1 -> 1.9; p 0.9 -> 0.71.
  // Nesterov: g + 0.9 buf = 1.9 then 2.71; p 0.81 -> 0.539.
  for (bool nesterov : {false, true}) {
    Tensor w = leaf({1.0});
    SGDOptions o;
    o.lr = 0.1;
    o.momentum = 0.9;
    o.nesterov = nesterov;
    SGD sgd({{"w", w, ParamKind::weight}}, o);
    set_grad(w, {1.0});
    sgd.step();
    EXPECT_NEAR(w.item(), nesterov ? 0.81 : 0.9, 1e-12);
    sgd.step();  // the gradient is still 1
    EXPECT_NEAR(w.item(), nesterov ? 0.539 : 0.71, 1e-12);
  }
}

TEST(SGD, MatchesTorchFormulas) {
  struct Case { double momentum, dampening; bool nesterov; double weight_decay; };
  for (const Case& c : {Case{0.0, 0.0, false, 0.1}, Case{0.9, 0.1, false, 0.01}, Case{0.9, 0.0, true, 0.01},
                        Case{0.5, 0.5, false, 0.0}}) {
    for (DType dtype : {DType::float64, DType::float32}) {
      SCOPED_TRACE("momentum " + std::to_string(c.momentum) + " dampening " + std::to_string(c.dampening) +
                   (c.nesterov ? " nesterov " : " ") + dtype_name(dtype));
      SGDOptions o;
      o.lr = 0.1;
      o.momentum = c.momentum;
      o.dampening = c.dampening;
      o.nesterov = c.nesterov;
      o.weight_decay = c.weight_decay;
      Tensor w = leaf(kStart, dtype);
      SGD sgd({{"w", w, ParamKind::weight}}, o);
      SgdReference reference{o, kStart};
      expect_matches(sgd, w, reference, dtype == DType::float64 ? 1e-12 : 1e-6);
    }
  }
}

// ---- Adam and AdamW ----

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

// A module with every parameter kind and a dotted name.
class TinyBlock : public Module {
 public:
  explicit TinyBlock(Generator& gen) {
    weight = register_parameter("weight", randn({3, 2}, gen), ParamKind::weight);
    bias = register_parameter("bias", randn({2}, gen), ParamKind::bias);
  }
  Tensor weight, bias;
};

class TinyModel : public Module {
 public:
  explicit TinyModel(Generator& gen) {
    tok_emb = register_parameter("tok_emb", randn({5, 3}, gen), ParamKind::embedding);
    norm_gain = register_parameter("norm_gain", randn({2}, gen), ParamKind::norm);
    block = register_module("block", std::make_shared<TinyBlock>(gen));
  }
  Tensor tok_emb, norm_gain;
  std::shared_ptr<TinyBlock> block;
};

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

// ---- the base class ----

TEST(Optimizer, ParametersWithoutGradAreLeftUntouched) {
  Tensor w = leaf({1.0, 2.0});
  Tensor frozen = leaf({3.0, 4.0});
  AdamWOptions o;
  o.weight_decay = 0.5;  // would shrink `frozen` if it were visited
  AdamW adamw({{"w", w, ParamKind::weight}, {"frozen", frozen, ParamKind::weight}}, o);
  for (int k = 0; k < 3; ++k) {
    set_grad(w, {0.1, -0.2});
    adamw.step();
  }
  EXPECT_NE(w.to_vector(), (Values{1.0, 2.0}));
  EXPECT_EQ(frozen.to_vector(), (Values{3.0, 4.0}));
  const auto state = adamw.state_dict();
  EXPECT_EQ(state.at("frozen.step").item(), 0);
  EXPECT_EQ(state.at("frozen.exp_avg").to_vector(), (Values{0.0, 0.0}));
  EXPECT_EQ(adamw.step_count(), 3u);
}

TEST(Optimizer, ZeroGradDropsTheGradients) {
  Tensor w = leaf({1.0});
  SGD sgd({{"w", w, ParamKind::weight}});
  sum(w * w).backward();
  ASSERT_TRUE(w.grad().defined());
  sgd.zero_grad();
  EXPECT_FALSE(w.grad().defined());
}

TEST(Optimizer, TiedWeightIsUpdatedOnce) {
  Tensor w = leaf({1.0, 2.0});
  SGDOptions o;
  o.lr = 1.0;
  SGD sgd({{"tok_emb.weight", w, ParamKind::embedding}, {"lm_head.weight", w, ParamKind::weight}}, o);
  ASSERT_EQ(sgd.parameters().size(), 1u);
  EXPECT_EQ(sgd.parameters()[0].name, "tok_emb.weight");
  set_grad(w, {0.5, 0.5});
  sgd.step();
  testing::expect_values(w, {0.5, 1.5}, 0.0);
}

TEST(Optimizer, FollowsAModelConvertedToFloat64) {
  Generator gen(3);
  TinyModel model(gen);
  Adam adam(model.named_parameters());
  for (NamedParameter& p : model.named_parameters()) p.tensor.set_grad(ones_like(p.tensor));
  adam.step();
  model.to(DType::float64);
  for (NamedParameter& p : model.named_parameters()) p.tensor.set_grad(ones_like(p.tensor));
  adam.step();
  const auto state = adam.state_dict();
  EXPECT_EQ(state.at("block.weight.exp_avg").dtype(), DType::float64);
  // Both steps had gradient 1: m = 0.1, then 0.19.
  EXPECT_NEAR(state.at("block.weight.exp_avg").to_vector()[0], 0.19, 1e-7);
}

TEST(Optimizer, AdamMinimisesAQuadraticThroughBackward) {
  Tensor w = leaf({3.0, -2.0, 0.5});
  const Tensor target = from_vector({1.0, 1.0, -1.0}, {3}, DType::float64);
  AdamOptions o;
  o.lr = 0.05;
  Adam adam({{"w", w, ParamKind::weight}}, o);
  for (int k = 0; k < 500; ++k) {
    adam.zero_grad();
    sum((w - target) * (w - target)).backward();
    adam.step();
  }
  testing::expect_values(w, target.to_vector(), 1e-2);
}

// ---- state_dict ----

// Steps `optimizer` over two parameters w [3] and b [2] (b without a gradient at step 1) for gradients
// number first..last-1.
void run_steps(Optimizer& optimizer, Tensor& w, Tensor& b, std::size_t first, std::size_t last) {
  for (std::size_t k = first; k < last; ++k) {
    set_grad(w, kGrads[k % kGrads.size()]);
    if (k == 1) {
      b.zero_grad();
    } else {
      set_grad(b, {0.1 * static_cast<double>(k) - 0.2, 0.3});
    }
    optimizer.step();
  }
}

template <class Opt, class Options>
void expect_round_trip(const Options& options) {
  Tensor w1 = leaf(kStart), b1 = leaf({0.5, -0.5});
  Opt first({{"w", w1, ParamKind::weight}, {"b", b1, ParamKind::bias}}, options);
  run_steps(first, w1, b1, 0, 3);
  const std::map<std::string, Tensor> saved = first.state_dict();

  // Two more optimizers start from first's parameter values; only one gets its state.
  Tensor w2 = leaf(w1.to_vector()), b2 = leaf(b1.to_vector());
  Tensor w3 = leaf(w1.to_vector()), b3 = leaf(b1.to_vector());
  Opt second({{"w", w2, ParamKind::weight}, {"b", b2, ParamKind::bias}}, options);
  Opt fresh({{"w", w3, ParamKind::weight}, {"b", b3, ParamKind::bias}}, options);
  second.load_state_dict(saved);
  EXPECT_EQ(second.step_count(), 3u);

  const Values saved_first_slot = saved.at("w." + first.slot_names()[0]).to_vector();
  run_steps(first, w1, b1, 3, 6);
  run_steps(second, w2, b2, 3, 6);
  run_steps(fresh, w3, b3, 3, 6);
  EXPECT_EQ(w1.to_vector(), w2.to_vector());
  EXPECT_EQ(b1.to_vector(), b2.to_vector());
  EXPECT_NE(w1.to_vector(), w3.to_vector());  // the state mattered
  // state_dict() is a snapshot: later steps do not change it.
  EXPECT_EQ(saved.at("w." + first.slot_names()[0]).to_vector(), saved_first_slot);
  EXPECT_EQ(saved.at("step").item(), 3);
}

TEST(OptimizerState, RoundTripContinuesIdentically) {
  SGDOptions sgd;
  sgd.lr = 0.1;
  sgd.momentum = 0.9;
  sgd.dampening = 0.2;
  expect_round_trip<SGD>(sgd);
  AdamOptions adam;
  adam.lr = 0.1;
  adam.weight_decay = 0.1;
  expect_round_trip<Adam>(adam);
  AdamWOptions adamw;
  adamw.lr = 0.1;
  adamw.weight_decay = 0.3;
  expect_round_trip<AdamW>(adamw);
}

TEST(OptimizerState, KeysNameParameterAndSlot) {
  Tensor w = leaf(kStart), b = leaf({0.5, -0.5});
  AdamOptions o;
  Adam adam({{"blocks.0.attn.qkv.weight", w, ParamKind::weight}, {"b", b, ParamKind::bias}}, o);
  std::vector<std::string> keys;
  for (const auto& [key, tensor] : adam.state_dict()) keys.push_back(key);
  EXPECT_EQ(keys, (std::vector<std::string>{"b.exp_avg", "b.exp_avg_sq", "b.step", "blocks.0.attn.qkv.weight.exp_avg",
                                            "blocks.0.attn.qkv.weight.exp_avg_sq", "blocks.0.attn.qkv.weight.step",
                                            "step"}));
  EXPECT_EQ(adam.state_dict().at("step").dtype(), DType::int64);
}

TEST(OptimizerState, MismatchedStateIsAnErrorAndChangesNothing) {
  Tensor w = leaf(kStart), b = leaf({0.5, -0.5});
  AdamOptions o;
  Adam adam({{"w", w, ParamKind::weight}, {"b", b, ParamKind::bias}}, o);
  run_steps(adam, w, b, 0, 2);
  const std::map<std::string, Tensor> good = adam.state_dict();

  auto missing = good;
  missing.erase("w.exp_avg_sq");
  expect_error([&] { adam.load_state_dict(missing); }, "missing: w.exp_avg_sq");
  auto unexpected = good;
  unexpected["v.exp_avg"] = zeros({3}, DType::float64);
  expect_error([&] { adam.load_state_dict(unexpected); }, "unexpected: v.exp_avg");
  auto misshaped = good;
  misshaped["w.exp_avg"] = zeros({4}, DType::float64);
  expect_error([&] { adam.load_state_dict(misshaped); }, "shape mismatch: w.exp_avg is [4]");
  auto bad_step = good;
  bad_step["b.step"] = scalar(-1.0, DType::int64);
  expect_error([&] { adam.load_state_dict(bad_step); }, "bad step count: b.step");

  Tensor w2 = leaf(kStart), b2 = leaf({0.5, -0.5});
  SGDOptions so;
  so.momentum = 0.9;
  SGD sgd({{"w", w2, ParamKind::weight}, {"b", b2, ParamKind::bias}}, so);
  expect_error([&] { adam.load_state_dict(sgd.state_dict()); }, "unexpected: w.momentum_buffer");
  expect_error([&] { adam.load_state_dict(sgd.state_dict()); }, "missing: w.exp_avg");

  // None of the failed loads wrote anything.
  const auto after = adam.state_dict();
  ASSERT_EQ(after.size(), good.size());
  for (const auto& [key, tensor] : good) EXPECT_EQ(after.at(key).to_vector(), tensor.to_vector()) << key;
}

TEST(OptimizerState, LoadConvertsBuffersToTheParameterDtype) {
  Tensor w64 = leaf(kStart);
  Tensor w32 = leaf(kStart, DType::float32);
  Adam source({{"w", w64, ParamKind::weight}});
  Adam target({{"w", w32, ParamKind::weight}});
  set_grad(w64, kGrads[0]);
  source.step();
  target.load_state_dict(source.state_dict());
  const auto state = target.state_dict();
  EXPECT_EQ(state.at("w.exp_avg").dtype(), DType::float32);
  testing::expect_values(state.at("w.exp_avg"), source.state_dict().at("w.exp_avg").to_vector(), 1e-7);
}

// ---- clip_grad_norm ----

TEST(ClipGradNorm, ScalesAboveMaxNormAndReturnsTheNormBefore) {
  Tensor a = leaf({3.0, 4.0});
  Tensor b = leaf({12.0}, DType::float32);
  Tensor no_grad = leaf({100.0});
  set_grad(a, {3.0, 4.0});
  set_grad(b, {12.0});
  EXPECT_DOUBLE_EQ(clip_grad_norm({a, b, no_grad}, 6.5), 13.0);
  const double scale = 6.5 / (13.0 + 1e-6);
  testing::expect_values(a.grad(), {3.0 * scale, 4.0 * scale}, 1e-12);
  testing::expect_values(b.grad(), {12.0 * scale}, 1e-5);
  EXPECT_NEAR(clip_grad_norm({a, b}, 100.0), 6.5, 1e-5);  // the clipped norm is max_norm
  EXPECT_FALSE(no_grad.grad().defined());
}

TEST(ClipGradNorm, NormOfLongGradientsOfBothDtypes) {
  // 21 and 13 elements: whole blocks of the accumulation loop and a tail.
  Generator gen(5);
  Tensor a = randn({21}, gen).set_requires_grad(true);
  Tensor b = randn({13}, gen, DType::float64).set_requires_grad(true);
  a.set_grad(randn({21}, gen));
  b.set_grad(randn({13}, gen, DType::float64));
  double expected = 0.0;
  for (const Tensor& t : {a, b}) {
    for (double g : t.grad().to_vector()) expected += g * g;
  }
  expected = std::sqrt(expected);
  EXPECT_NEAR(clip_grad_norm({a, b}, 1.0), expected, 1e-12);
  double after = 0.0;
  for (const Tensor& t : {a, b}) {
    for (double g : t.grad().to_vector()) after += g * g;
  }
  EXPECT_NEAR(std::sqrt(after), 1.0, 1e-6);
}

TEST(ClipGradNorm, LeavesGradientsBelowMaxNorm) {
  Tensor a = leaf({1.0, 1.0});
  set_grad(a, {3.0, 4.0});
  EXPECT_DOUBLE_EQ(clip_grad_norm({a}, 5.5), 5.0);
  EXPECT_EQ(a.grad().to_vector(), (Values{3.0, 4.0}));
  EXPECT_DOUBLE_EQ(clip_grad_norm({a}, std::numeric_limits<double>::infinity()), 5.0);
}

TEST(ClipGradNorm, CountsATensorListedTwiceOnce) {
  Tensor a = leaf({1.0, 1.0});
  set_grad(a, {3.0, 4.0});
  EXPECT_DOUBLE_EQ(clip_grad_norm({a, a}, 2.5), 5.0);
  testing::expect_values(a.grad(), {1.5, 2.0}, 1e-6);  // scaled once, not twice
}

TEST(ClipGradNorm, NonFiniteNormIsReturnedWithoutScaling) {
  Tensor a = leaf({1.0, 1.0});
  set_grad(a, {std::numeric_limits<double>::infinity(), 4.0});
  EXPECT_TRUE(std::isinf(clip_grad_norm({a}, 1.0)));
  EXPECT_EQ(a.grad().to_vector()[1], 4.0);
  set_grad(a, {std::nan(""), 4.0});
  EXPECT_TRUE(std::isnan(clip_grad_norm({a}, 1.0)));
  EXPECT_EQ(a.grad().to_vector()[1], 4.0);
  expect_error([&] { clip_grad_norm({a}, 0.0); }, "max_norm must be > 0, got 0");
}

// ---- schedules ----

ScheduleOptions decaying(ScheduleKind kind) {
  ScheduleOptions o;
  o.kind = kind;
  o.lr = 1.0;
  o.min_lr = 0.1;
  o.warmup_steps = 10;
  o.decay_steps = 110;
  return o;
}

TEST(Schedule, WarmupCosineFollowsNanoGpt) {
  const LrSchedule s(decaying(ScheduleKind::warmup_cosine));
  const double pi = std::acos(-1.0);
  EXPECT_DOUBLE_EQ(s.lr_at(0), 1.0 / 11);     // (it + 1) / (warmup + 1)
  EXPECT_DOUBLE_EQ(s.lr_at(4), 5.0 / 11);     // mid-warmup
  EXPECT_DOUBLE_EQ(s.lr_at(9), 10.0 / 11);    // last warmup step
  EXPECT_DOUBLE_EQ(s.lr_at(10), 1.0);         // end of warmup: the peak
  EXPECT_DOUBLE_EQ(s.lr_at(35), 0.1 + 0.5 * (1 + std::cos(pi * 0.25)) * 0.9);
  EXPECT_NEAR(s.lr_at(60), 0.55, 1e-15);      // half way: half way between lr and min_lr
  EXPECT_DOUBLE_EQ(s.lr_at(110), 0.1);        // end
  EXPECT_DOUBLE_EQ(s.lr_at(100000), 0.1);     // after the end
}

TEST(Schedule, WarmupLinear) {
  const LrSchedule s(decaying(ScheduleKind::warmup_linear));
  EXPECT_DOUBLE_EQ(s.lr_at(0), 1.0 / 11);
  EXPECT_DOUBLE_EQ(s.lr_at(4), 5.0 / 11);
  EXPECT_DOUBLE_EQ(s.lr_at(10), 1.0);
  EXPECT_NEAR(s.lr_at(35), 0.1 + 0.75 * 0.9, 1e-15);
  EXPECT_NEAR(s.lr_at(109), 0.1 + 0.01 * 0.9, 1e-15);
  EXPECT_DOUBLE_EQ(s.lr_at(110), 0.1);
  EXPECT_DOUBLE_EQ(s.lr_at(5000), 0.1);
}

TEST(Schedule, ConstantWithAndWithoutWarmup) {
  ScheduleOptions o;
  o.lr = 3e-4;
  const LrSchedule flat(o);
  EXPECT_EQ(flat.lr_at(0), 3e-4);
  EXPECT_EQ(flat.lr_at(1000000), 3e-4);
  o.warmup_steps = 4;
  const LrSchedule warm(o);
  EXPECT_DOUBLE_EQ(warm.lr_at(0), 3e-4 / 5);
  EXPECT_DOUBLE_EQ(warm.lr_at(2), 3e-4 * 3 / 5);
  EXPECT_EQ(warm.lr_at(4), 3e-4);
  EXPECT_EQ(warm.lr_at(99), 3e-4);
}

TEST(Schedule, WarmupEndingWhereDecayEnds) {
  ScheduleOptions o = decaying(ScheduleKind::warmup_cosine);
  o.decay_steps = o.warmup_steps;
  const LrSchedule s(o);
  EXPECT_DOUBLE_EQ(s.lr_at(9), 10.0 / 11);
  EXPECT_DOUBLE_EQ(s.lr_at(10), 0.1);
}

TEST(Schedule, DrivesTheOptimizersLr) {
  Tensor w = leaf({1.0});
  SGD sgd({{"w", w, ParamKind::weight}});
  const LrSchedule s(decaying(ScheduleKind::warmup_cosine));
  for (std::size_t it = 0; it < 200; ++it) {
    sgd.set_lr(s.lr_at(sgd.step_count()));
    set_grad(w, {0.0});
    sgd.step();
  }
  EXPECT_DOUBLE_EQ(sgd.lr(), 0.1);
}

TEST(Schedule, OptionsAreChecked) {
  auto make = [](ScheduleOptions o) { return [o] { LrSchedule s(o); }; };
  ScheduleOptions o = decaying(ScheduleKind::warmup_cosine);
  o.warmup_steps = 200;
  expect_error(make(o), "warmup_steps (200) must be <= decay_steps (110)");
  o = decaying(ScheduleKind::warmup_linear);
  o.min_lr = 2.0;
  expect_error(make(o), "min_lr must be in [0, lr] = [0, 1], got 2");
  o = decaying(ScheduleKind::warmup_cosine);
  o.lr = 0.0;
  expect_error(make(o), "lr must be a finite number > 0, got 0");
  o = decaying(ScheduleKind::warmup_cosine);
  o.decay_steps = 0;
  o.warmup_steps = 0;
  expect_error(make(o), "decay_steps must be > 0");
  o = ScheduleOptions();
  o.decay_steps = 100;
  expect_error(make(o), "a constant schedule does not decay");
  EXPECT_EQ(parse_schedule_kind("warmup_cosine"), ScheduleKind::warmup_cosine);
  expect_error([] { parse_schedule_kind("cosine"); },
               "lr schedule 'cosine' is not among [constant, warmup_cosine, warmup_linear]");
}

// ---- option checks ----

TEST(OptimizerOptions, InvalidValuesAreRejectedWithTheRule) {
  auto params = [] { return std::vector<NamedParameter>{{"w", leaf({1.0}), ParamKind::weight}}; };
  {
    AdamWOptions o;
    o.lr = -1;
    expect_error([&] { AdamW(params(), o); }, "AdamW: lr must be > 0, got -1");
  }
  {
    AdamOptions o;
    o.beta1 = 1.0;
    expect_error([&] { Adam(params(), o); }, "Adam: beta1 must be in [0, 1), got 1");
    o.beta1 = 0.9;
    o.beta2 = -0.1;
    expect_error([&] { Adam(params(), o); }, "Adam: beta2 must be in [0, 1), got -0.1");
    o.beta2 = 0.999;
    o.eps = 0.0;
    expect_error([&] { Adam(params(), o); }, "Adam: eps must be > 0, got 0");
    o.eps = 1e-8;
    o.weight_decay = -0.01;
    expect_error([&] { Adam(params(), o); }, "Adam: weight_decay must be >= 0, got -0.01");
  }
  {
    SGDOptions o;
    o.momentum = -0.5;
    expect_error([&] { SGD(params(), o); }, "SGD: momentum must be >= 0, got -0.5");
    o.momentum = 0.0;
    o.nesterov = true;
    expect_error([&] { SGD(params(), o); }, "SGD: nesterov needs momentum > 0 and dampening 0");
    o.momentum = 0.9;
    o.dampening = 0.1;
    expect_error([&] { SGD(params(), o); }, "nesterov needs momentum > 0 and dampening 0");
    o.nesterov = false;
    o.dampening = 1.5;
    expect_error([&] { SGD(params(), o); }, "SGD: dampening must be in [0, 1], got 1.5");
    o.dampening = 0.0;
    o.lr = std::nan("");
    expect_error([&] { SGD(params(), o); }, "SGD: lr must be > 0, got nan");
  }
}

TEST(OptimizerOptions, ParametersAreChecked) {
  expect_error([] { SGD(std::vector<NamedParameter>{}); }, "SGD: the parameter list is empty");
  Tensor w = leaf({1.0});
  expect_error([&] { SGD({{"w", w, ParamKind::weight}, {"w", leaf({2.0}), ParamKind::weight}}); },
               "parameter 'w' is listed twice");
  expect_error([&] { SGD({{"ids", from_indices({1}, {1}), ParamKind::weight}}); },
               "parameter 'ids' is int64; only float32 and float64 tensors can be optimized");
  expect_error([&] { SGD({{"w2", w * 2.0, ParamKind::weight}}); }, "parameter 'w2' is not a leaf");
  expect_error([&] { SGD({{"u", Tensor(), ParamKind::weight}}); }, "parameter 'u' is undefined");
}

TEST(OptimizerOptions, SetLrAcceptsZeroButNotNegative) {
  Tensor w = leaf({1.0});
  SGD sgd({{"w", w, ParamKind::weight}});
  sgd.set_lr(0.0);
  EXPECT_EQ(sgd.lr(), 0.0);
  expect_error([&] { sgd.set_lr(-1e-3); }, "SGD: set_lr: lr must be finite and >= 0, got -0.001");
  expect_error([&] { sgd.set_lr(std::numeric_limits<double>::infinity()); }, "got inf");
}

}  // namespace
}  // namespace attnlab
