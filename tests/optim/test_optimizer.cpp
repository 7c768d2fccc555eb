// What every optimizer does through the base class: parameters without gradients left untouched, tied
// weights updated once, following a model to float64; state_dict round trips and their errors; option and
// parameter checks.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "framework/ops/parallel.hpp"
#include "tests/optim/optim_testing.hpp"

namespace attnlab::optim_testing {
namespace {

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

// SGD, Adam and AdamW update different parameters on different threads at once: on two threads the
// parameters, the skipped one and the state are bit for bit what one thread makes, over steps in which
// the parameters with gradients change.
TEST(Optimizer, UpdatesOnTwoThreadsAreThoseOfOne) {
  const auto run = [](int threads, const std::string& which) {
    set_num_threads(threads);
    Generator gen(11);
    std::vector<NamedParameter> params;
    const std::size_t sizes[] = {40000, 3, 17, 9000, 25001, 64, 0};
    for (std::size_t n : sizes)
      params.push_back({"p" + std::to_string(params.size()), randn({n}, gen, DType::float32).set_requires_grad(true), ParamKind::weight});
    std::unique_ptr<Optimizer> opt;
    if (which == "sgd") {
      SGDOptions o;
      o.momentum = 0.9, o.weight_decay = 0.01;
      opt = std::make_unique<SGD>(params, o);
    } else if (which == "adam") {
      opt = std::make_unique<Adam>(params);
    } else {
      opt = std::make_unique<AdamW>(params);
    }
    for (int step = 0; step < 4; ++step) {
      for (std::size_t j = 0; j < params.size(); ++j) {
        if ((j + step) % 5 == 4) continue;  // no gradient: this parameter is skipped at this step
        params[j].tensor.set_grad(randn(params[j].tensor.shape(), gen, DType::float32));
      }
      opt->step();
      for (NamedParameter& p : params) p.tensor.zero_grad();
    }
    std::vector<Values> out;
    for (const NamedParameter& p : params) out.push_back(p.tensor.to_vector());
    for (const auto& [name, t] : opt->state_dict()) out.push_back(t.to_vector());
    set_num_threads(1);
    return out;
  };
  for (const std::string which : {"sgd", "adam", "adamw"}) EXPECT_EQ(run(1, which), run(2, which)) << which;
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
}  // namespace attnlab::optim_testing
