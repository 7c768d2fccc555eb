// Circuits from the weights on models whose circuits are planted: a head that writes one subspace and a
// later head whose keys read only it (K-composition and nothing else), and heads whose OV circuit maps
// each token to itself (copying score 1) or to minus itself (-1).
#include <gtest/gtest.h>

#include <cmath>

#include "experiments/analysis/part.hpp"
#include "framework/models/model.hpp"

namespace attnlab {
namespace {

constexpr std::size_t kWidth = 32, kHeadDim = 16;

std::shared_ptr<Model> causal_lm(std::size_t layers, std::size_t vocab) {
  ModelConfig config;
  config.kind.name = "causal_lm";
  config.encoder.d_model = kWidth, config.encoder.n_heads = 2, config.encoder.n_layers = layers, config.encoder.bias = false;
  DataShape shape;
  shape.vocab_size = shape.num_classes = vocab, shape.max_len = 8;
  Generator gen(1);
  return make_model(config, shape, gen);
}

const AnalysisTable& table(const AnalysisResult& r, const std::string& name) {
  for (const AnalysisTable& t : r.tables)
    if (t.name == name) return t;
  throw std::runtime_error("no table " + name);
}

// Sets `name`'s weight from f(row, col) (the shape it has).
void set_weight(Model& model, const std::string& name, const std::function<double(std::size_t, std::size_t)>& f) {
  std::map<std::string, Tensor> state = model.state_dict();
  Tensor& t = state.at(name);
  std::vector<double> v(t.numel());
  for (std::size_t r = 0; r < t.size(0); ++r)
    for (std::size_t c = 0; c < t.size(1); ++c) v[r * t.size(1) + c] = f(r, c);
  t = from_vector(v, t.shape(), t.dtype());
  model.load_state_dict(state);
}

TEST(Circuits, APlantedKCompositionIsFoundAndNothingElse) {
  auto model = causal_lm(2, 6);
  Generator gen(3);
  const auto noise = [&](std::size_t, std::size_t) { return gen.next_normal(); };
  // Layer 0: head 0 writes dims [0, 4), head 1 dims [16, 24); their values read anything.
  set_weight(*model, "body.encoder.blocks.0.attn.qkv.weight", noise);
  set_weight(*model, "body.encoder.blocks.0.attn.proj.weight", [&](std::size_t out, std::size_t in) {
    const bool head0 = in < kHeadDim;
    return (head0 && out < 4) || (!head0 && out >= 16 && out < 24) ? gen.next_normal() : 0.0;
  });
  // Layer 1: head 0's keys read dims [0, 4) only; every query and value reads dims [24, 32) only; head 1's
  // keys read [24, 32) too.
  set_weight(*model, "body.encoder.blocks.1.attn.qkv.weight", [&](std::size_t row, std::size_t in) {
    const bool keys_of_head0 = row >= kWidth && row < kWidth + kHeadDim;
    return (keys_of_head0 ? in < 4 : in >= 24) ? gen.next_normal() : 0.0;
  });
  AnalysisResult r;
  weight_circuits(*model, r);
  const AnalysisTable& k = table(r, "circuits_composition_k");
  ASSERT_EQ(k.rows, (std::vector<std::string>{"0.0", "0.1"}));
  ASSERT_EQ(k.cols, (std::vector<std::string>{"1.0", "1.1"}));
  EXPECT_GT(k.at(0, 0), 2.5 * r.facts.at("circuits.composition_baseline"));  // 0.0 -> keys of 1.0: planted
  EXPECT_NEAR(k.at(1, 0), 0.0, 1e-12);                                     // 0.1 writes where 1.0's keys do not read
  EXPECT_NEAR(k.at(0, 1), 0.0, 1e-12);
  for (const char* mode : {"circuits_composition_q", "circuits_composition_v"})
    for (double v : table(r, mode).values) EXPECT_NEAR(v, 0.0, 1e-12) << mode;
  EXPECT_GT(r.facts.at("circuits.composition_baseline"), 0.0);
  EXPECT_LT(r.facts.at("circuits.composition_baseline"), 0.5);
}

TEST(Circuits, AHeadThatCopiesScoresOneAndOneThatSuppressesMinusOne) {
  const std::size_t vocab = 6;
  auto model = causal_lm(1, vocab);
  set_weight(*model, "body.tok.weight", [](std::size_t v, std::size_t c) { return v == c ? 1.0 : 0.0; });
  set_weight(*model, "head.weight", [](std::size_t v, std::size_t c) { return v == c ? 1.0 : 0.0; });
  // Values: head h's dims 0..5 read token dims 0..5; its output writes them back, +1 for head 0, -1 for head 1.
  set_weight(*model, "body.encoder.blocks.0.attn.qkv.weight", [&](std::size_t row, std::size_t in) {
    if (row < 2 * kWidth) return 0.0;
    const std::size_t i = (row - 2 * kWidth) % kHeadDim;
    return i < vocab && in == i ? 1.0 : 0.0;
  });
  set_weight(*model, "body.encoder.blocks.0.attn.proj.weight", [&](std::size_t out, std::size_t in) {
    const std::size_t h = in / kHeadDim, i = in % kHeadDim;
    return i < vocab && out == i ? (h == 0 ? 1.0 : -1.0) : 0.0;
  });
  AnalysisResult r;
  weight_circuits(*model, r);
  const AnalysisTable& copying = table(r, "circuits_copying");
  EXPECT_NEAR(copying.at(0, 0), 1.0, 1e-9);
  EXPECT_NEAR(copying.at(0, 1), -1.0, 1e-9);
  EXPECT_EQ(r.notes.size(), 1u);  // one layer: no composition, and it says so
}

// Head 0's queries and keys read the token (a duplicate-token QK circuit), head 1's query reads the
// position and its key the position after (a previous-position QK circuit).
TEST(Circuits, PlantedQkCircuitsAreNamed) {
  const std::size_t vocab = 6;
  auto model = causal_lm(1, vocab);
  set_weight(*model, "body.tok.weight", [](std::size_t v, std::size_t c) { return v == c ? 1.0 : 0.0; });
  set_weight(*model, "body.pos.table", [](std::size_t i, std::size_t c) { return c == 16 + i ? 1.0 : 0.0; });
  set_weight(*model, "body.encoder.blocks.0.attn.qkv.weight", [&](std::size_t row, std::size_t in) {
    if (row < vocab || (row >= kWidth && row < kWidth + vocab)) return in == row % kWidth ? 1.0 : 0.0;  // head 0: q and k = the token
    if (row >= kHeadDim && row < kWidth) return in == row ? 1.0 : 0.0;                                // head 1: q_i = position i
    if (row >= kWidth + kHeadDim + 1 && row < 2 * kWidth) return in == row - kWidth - 1 ? 1.0 : 0.0;  // k_j = position j + 1
    return 0.0;
  });
  AnalysisResult r;
  weight_circuits(*model, r);
  EXPECT_EQ(table(r, "circuits_qk_same_token").at(0, 0), 1.0);
  EXPECT_EQ(table(r, "circuits_qk_previous_position").at(0, 1), 1.0);
  EXPECT_LT(table(r, "circuits_qk_previous_position").at(0, 0), 0.5);
}

}  // namespace
}  // namespace attnlab
