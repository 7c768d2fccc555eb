// attnlab analyze on models whose answers are known: a one-layer model built by hand so that head 0
// copies the previous token and head 1 does nothing. Ablating head 0 must destroy the behaviour and
// ablating head 1 change nothing; patching head 0 (or the residual stream at the changed position) must
// restore the clean answer completely; the direct attributions must add up to the logit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <set>

#include "experiments/analysis/analysis.hpp"
#include "experiments/analysis/part.hpp"
#include "framework/attention/kernel.hpp"
#include "framework/models/model.hpp"

namespace attnlab {
namespace {

constexpr std::size_t kVocab = 6, kLength = 8, kWidth = 32;

// Random tokens; the target at each position is the previous token (none at position 0).
class PreviousTokenSource : public data::DataSource {
 public:
  DataShape shape() const override {
    DataShape s;
    s.vocab_size = kVocab;
    s.max_len = kLength;
    return s;
  }
  Batch sample(data::TaskSplit, std::size_t size, Generator& gen) const override {
    std::vector<std::int64_t> ids, target;
    for (std::size_t r = 0; r < size; ++r)
      for (std::size_t i = 0; i < kLength; ++i) ids.push_back(static_cast<std::int64_t>(gen.next_below(kVocab)));
    for (std::size_t r = 0; r < size; ++r)
      for (std::size_t i = 0; i < kLength; ++i) target.push_back(i ? ids[r * kLength + i - 1] : data::kIgnore);
    return Batch{from_indices(ids, {size, kLength}), from_indices(target, {size, kLength}), {}, {}, {}};
  }
};

// Residual dims: [0, 6) the token, [6, 12) the copied previous token, [16, 24) the position. Head 0.0
// copies the previous token there; `extra` sets more weights (of later layers); the output layer reads
// dims [readout, readout + 6). Every other weight is 0, every norm gain 1.
using Weights = std::map<std::string, std::vector<double>>;
std::shared_ptr<Model> hand_built(std::size_t layers, bool feed_forward, std::size_t readout, const std::function<void(Weights&)>& extra) {
  ModelConfig config;
  config.kind.name = "causal_lm";
  config.encoder.d_model = kWidth, config.encoder.n_heads = 2, config.encoder.n_layers = layers, config.encoder.bias = false;
  config.encoder.feed_forward = feed_forward;
  Generator gen(0);
  std::shared_ptr<Model> model = make_model(config, PreviousTokenSource().shape(), gen);
  std::map<std::string, Tensor> state = model->state_dict();
  Weights w;
  for (const auto& [name, t] : state)
    if (t.dtype() != DType::int64) w[name] = std::vector<double>(t.numel(), name.find("norm") != std::string::npos ? 1.0 : 0.0);  // not the dropout generators' states
  const std::size_t c = kWidth;
  for (std::size_t v = 0; v < kVocab; ++v) w["body.tok.weight"][v * c + v] = 1.0;
  for (std::size_t i = 0; i < kLength; ++i) w["body.pos.table"][i * c + 16 + i] = 1.0;
  auto& qkv = w["body.encoder.blocks.0.attn.qkv.weight"];  // [3C, C]: q rows, k rows, v rows; head 0 is dims [0, 16)
  for (std::size_t d = 0; d < kLength; ++d) qkv[d * c + 16 + d] = 3.0;                     // q_i: position i
  for (std::size_t d = 1; d < kLength; ++d) qkv[(c + d) * c + 16 + d - 1] = 3.0;           // k_j: position j + 1
  for (std::size_t d = 0; d < kVocab; ++d) qkv[(2 * c + d) * c + d] = 1.0;                 // v: the token
  for (std::size_t d = 0; d < kVocab; ++d) w["body.encoder.blocks.0.attn.proj.weight"][(6 + d) * c + d] = 1.0;
  for (std::size_t v = 0; v < kVocab; ++v) w["head.weight"][v * c + readout + v] = 5.0;
  if (extra) extra(w);
  for (auto& [name, t] : state)
    if (w.count(name)) t = from_vector(w[name], t.shape(), t.dtype());
  model->load_state_dict(state);
  return model;
}

std::shared_ptr<Model> previous_token_model() { return hand_built(1, true, 6, {}); }

double cell(const AnalysisResult& r, const std::string& table, std::size_t row, std::size_t col) {
  for (const AnalysisTable& t : r.tables)
    if (t.name == table) return t.at(row, col);
  ADD_FAILURE() << "no table " << table;
  return NAN;
}

struct HandBuilt : ::testing::Test {
  PreviousTokenSource data;
  std::shared_ptr<Model> model = previous_token_model();
  AnalysisInputs inputs() { return AnalysisInputs{*model, data, held_out_examples(data, 256, 64, 1)}; }
};

TEST_F(HandBuilt, TheModelCopiesThePreviousToken) {
  EvalScope scope(*model);
  const Evaluation e = evaluate_with(inputs(), {});
  EXPECT_GT(e.metrics.token_accuracy, 0.99);
}

TEST_F(HandBuilt, AblatingTheCopyingHeadDestroysTheBehaviourAndTheIdleHeadChangesNothing) {
  AnalysisResult r;
  head_ablation(inputs(), 1, r);
  EXPECT_LT(cell(r, "ablation_zero_accuracy", 0, 0), -0.6);  // to about chance (1/6)
  EXPECT_GT(cell(r, "ablation_zero_loss", 0, 0), 0.5);
  EXPECT_LT(cell(r, "ablation_mean_accuracy", 0, 0), -0.6);
  EXPECT_NEAR(cell(r, "ablation_zero_accuracy", 0, 1), 0.0, 1e-12);
  EXPECT_NEAR(cell(r, "ablation_zero_loss", 0, 1), 0.0, 1e-6);
  EXPECT_NEAR(cell(r, "ablation_mean_loss", 0, 1), 0.0, 1e-6);
  EXPECT_LT(cell(r, "ablation_resample_accuracy", 0, 0), -0.6);  // another example's previous token: about chance
  EXPECT_NEAR(cell(r, "ablation_resample_loss", 0, 1), 0.0, 1e-6);
  // The intervals: the copying head's change is far from 0 and inside its interval; the idle head's is 0.
  for (const AnalysisTable& t : r.tables) {
    ASSERT_EQ(t.low.size(), t.values.size()) << t.name;
    for (std::size_t i = 0; i < t.values.size(); ++i) {
      EXPECT_LE(t.low[i], t.values[i] + 1e-12) << t.name << " " << i;
      EXPECT_GE(t.high[i], t.values[i] - 1e-12) << t.name << " " << i;
    }
  }
  const AnalysisTable& accuracy = *std::find_if(r.tables.begin(), r.tables.end(), [](const AnalysisTable& t) { return t.name == "ablation_zero_accuracy"; });
  EXPECT_LT(accuracy.high[0], -0.5);
  EXPECT_NEAR(accuracy.low[1], 0.0, 1e-12);
  EXPECT_NEAR(accuracy.high[1], 0.0, 1e-12);
  layer_ablation(inputs(), 1, r);
  EXPECT_LT(cell(r, "ablation_layers_zero_accuracy", 0, 0), -0.6);   // attention
  EXPECT_NEAR(cell(r, "ablation_layers_zero_loss", 0, 1), 0.0, 1e-6);  // the MLP writes nothing
}

// Clean and corrupted inputs that differ at position 3; the answer at position 4 is the token there.
data::PatchingPairs changed_at_three(const data::DataSource& data) {
  Generator gen(7);
  data::PatchingPairs pairs;
  pairs.clean = data.sample(data::TaskSplit::held_out, 32, gen);
  std::vector<std::int64_t> ids(pairs.clean.input.data<std::int64_t>(), pairs.clean.input.data<std::int64_t>() + 32 * kLength);
  for (std::size_t r = 0; r < 32; ++r) {
    const std::int64_t was = ids[r * kLength + 3], now = (was + 1 + static_cast<std::int64_t>(r % (kVocab - 1))) % kVocab;
    ids[r * kLength + 3] = now;
    pairs.position.push_back(4);
    pairs.clean_answer.push_back(was);
    pairs.corrupted_answer.push_back(now);
  }
  pairs.corrupted = pairs.clean;
  pairs.corrupted.input = from_indices(ids, {32, kLength});
  pairs.corruption = "position 3 changed";
  return pairs;
}

TEST_F(HandBuilt, PatchingTheCopyingHeadOrTheChangedPositionRestoresTheAnswer) {
  AnalysisResult r;
  activation_patching(*model, data, changed_at_three(data), 1, r);
  EXPECT_GT(r.facts.at("patching.clean_logit_diff"), 5.0);
  EXPECT_NEAR(cell(r, "patching_heads", 0, 0), 1.0, 1e-4);
  EXPECT_NEAR(cell(r, "patching_heads", 0, 1), 0.0, 1e-4);
  EXPECT_NEAR(cell(r, "patching_residual", 0, 3), 1.0, 1e-4);
  for (std::size_t i : {0, 1, 2, 4, 5, 6, 7}) EXPECT_NEAR(cell(r, "patching_residual", 0, i), 0.0, 1e-4) << "position " << i;
  // Finer: the copying head at the answer's position (4) carries it all, at any other none; of its layer's
  // activations the values (what it copies) and its output restore the answer, the queries and keys (the
  // positions, the same in both runs) nothing.
  EXPECT_NEAR(cell(r, "patching_head_positions", 0, 4), 1.0, 1e-4);
  for (std::size_t i : {0, 1, 2, 3, 5, 6, 7}) EXPECT_NEAR(cell(r, "patching_head_positions", 0, i), 0.0, 1e-4) << "position " << i;
  const std::vector<std::string> points = {"q", "k", "v", "pattern", "z", "attn_out", "mlp_out"};
  const std::vector<double> expected = {0, 0, 1, 0, 1, 1, 0};
  for (std::size_t c = 0; c < points.size(); ++c) EXPECT_NEAR(cell(r, "patching_layers", 0, c), expected[c], 1e-4) << points[c];
  // Every pair's corruption switches the answer: no warning; every share has its interval over the pairs.
  EXPECT_EQ(r.facts.at("patching.corrupted_flipped_share"), 1.0);
  EXPECT_LT(r.facts.at("patching.corrupted_logit_diff_high"), 0.0);
  for (const std::string& note : r.notes) EXPECT_EQ(note.find("warning"), std::string::npos) << note;
  for (const AnalysisTable& t : r.tables) {
    ASSERT_EQ(t.low.size(), t.values.size()) << t.name;
    for (std::size_t i = 0; i < t.values.size(); ++i) EXPECT_TRUE(t.low[i] <= t.values[i] + 1e-9 && t.values[i] <= t.high[i] + 1e-9) << t.name << i;
  }
}

// Two layers where the previous token reaches the logits only through a path: head 0.0 copies it into
// dims [6, 12), head 1.0 attends to its own position and its values read those dims into [24, 30), which
// alone the output layer reads. Path patching finds the path through 1.0's values, none through its
// queries or keys, and nothing from the idle head 0.1.
TEST(PathPatching, ThePlantedPathGoesThroughTheReceiversValues) {
  PreviousTokenSource data;
  const std::size_t c = kWidth;
  const auto model = hand_built(2, false, 24, [&](Weights& w) {
    auto& qkv1 = w["body.encoder.blocks.1.attn.qkv.weight"];  // head 1.0: its own position; values from dims [6, 12)
    for (std::size_t d = 0; d < kLength; ++d) qkv1[d * c + 16 + d] = 12.0, qkv1[(c + d) * c + 16 + d] = 12.0;
    for (std::size_t d = 0; d < kVocab; ++d) qkv1[(2 * c + d) * c + 6 + d] = 1.0;
    for (std::size_t d = 0; d < kVocab; ++d) w["body.encoder.blocks.1.attn.proj.weight"][(24 + d) * c + d] = 1.0;
  });
  AnalysisResult r;
  activation_patching(*model, data, changed_at_three(data), 1, r);
  EXPECT_NEAR(cell(r, "patching_heads", 0, 0), 1.0, 1e-3);
  EXPECT_NEAR(cell(r, "patching_path_v", 1, 0), 1.0, 1e-3);  // sender 0.0 (row 1, after the embedding) -> receiver 1.0's values
  for (const char* table : {"patching_path_q", "patching_path_k"}) EXPECT_NEAR(cell(r, table, 1, 0), 0.0, 1e-3) << table;
  for (const char* table : {"patching_path_q", "patching_path_k", "patching_path_v"}) {
    EXPECT_NEAR(cell(r, table, 0, 0), 0.0, 1e-3) << table;  // the embedding: 1.0 reads nothing of it directly
    EXPECT_NEAR(cell(r, table, 2, 0), 0.0, 1e-3) << table;  // the idle sender 0.1
    EXPECT_NEAR(cell(r, table, 1, 1), 0.0, 1e-3) << table;  // the idle receiver 1.1
  }
}

// A corruption away from what the answer reads (position 5, the answer read from 3) switches nothing:
// the analysis says so beside the corrupted baseline instead of printing shares as if it had.
TEST_F(HandBuilt, PatchingWarnsWhenTheCorruptionDoesNotSwitchTheAnswer) {
  data::PatchingPairs pairs = changed_at_three(data);
  std::vector<std::int64_t> ids(pairs.clean.input.data<std::int64_t>(), pairs.clean.input.data<std::int64_t>() + 32 * kLength);
  for (std::size_t r = 0; r < 32; ++r) {
    ids[r * kLength + 5] = pairs.corrupted_answer[r];
    ids[r * kLength + 3] = pairs.clean_answer[r];  // what the answer at 4 copies stays as it was
  }
  pairs.corrupted.input = from_indices(ids, {32, kLength});
  AnalysisResult r;
  activation_patching(*model, data, pairs, 1, r);
  EXPECT_GT(r.facts.at("patching.corrupted_logit_diff"), 5.0);
  EXPECT_EQ(r.facts.at("patching.corrupted_flipped_share"), 0.0);
  bool warned = false;
  for (const std::string& note : r.notes) warned = warned || note.find("patching: warning: the corrupted inputs do not switch the answer") == 0;
  EXPECT_TRUE(warned);
}

TEST_F(HandBuilt, DirectAttributionsAddUpToTheLogitAndTheIdleHeadHasNone) {
  AnalysisResult r;
  logit_attribution(inputs(), 1, r);
  EXPECT_NEAR(r.facts.at("attribution.unexplained"), 0.0, 1e-4 * std::fabs(r.facts.at("attribution.answer_logit")));
  EXPECT_GT(cell(r, "attribution_heads", 0, 0), 1.0);
  EXPECT_NEAR(cell(r, "attribution_heads", 0, 1), 0.0, 1e-6);
  const AnalysisTable& heads = r.tables[0];  // attribution_heads, with an interval per head
  ASSERT_EQ(heads.name, "attribution_heads");
  EXPECT_GT(heads.low[0], 1.0);
  EXPECT_TRUE(heads.low[0] <= heads.values[0] && heads.values[0] <= heads.high[0]);
  EXPECT_NEAR(heads.high[1] - heads.low[1], 0.0, 1e-6);
  // Per position and per example: the copying head at every scored position and in every example, the
  // idle head nowhere; position 0 has no answer.
  const AnalysisTable& positions = *std::find_if(r.tables.begin(), r.tables.end(), [](const AnalysisTable& t) { return t.name == "attribution_positions"; });
  const std::size_t copying = static_cast<std::size_t>(std::find(positions.rows.begin(), positions.rows.end(), "0.attn.0") - positions.rows.begin());
  ASSERT_LT(copying + 1, positions.rows.size());
  EXPECT_TRUE(std::isnan(positions.at(copying, 0)));
  for (std::size_t i = 1; i < kLength; ++i) {
    EXPECT_GT(positions.at(copying, i), 1.0) << i;
    EXPECT_NEAR(positions.at(copying + 1, i), 0.0, 1e-6) << i;  // "0.attn.1"
  }
  const AnalysisTable& examples = *std::find_if(r.tables.begin(), r.tables.end(), [](const AnalysisTable& t) { return t.name == "attribution_examples"; });
  ASSERT_EQ(examples.rows.size(), 64u);
  for (std::size_t e = 0; e < 64; ++e) EXPECT_GT(examples.at(e, copying), 1.0) << e;
  logit_lens(inputs(), r);
  EvalScope scope(*model);
  const Evaluation e = evaluate_with(inputs(), {});
  EXPECT_NEAR(cell(r, "logit_lens_loss", 1, 0), e.loss, 1e-5);  // the last stream read out is the model's output
  EXPECT_GT(cell(r, "logit_lens_loss", 0, 0), e.loss);           // the embedding alone knows no previous token
}

// The hand-built model predicts the previous token, confidently: on repeated random tokens it is far
// worse than a uniform guess, so the test is outside what it does and the analysis says so. The same
// model with its output layer zeroed guesses uniformly: the test applies, no warning.
TEST_F(HandBuilt, RepeatedTokensOutsideTheTrainingDistributionAreFlagged) {
  AnalysisResult flagged;
  repeated_tokens_test(inputs(), 3, flagged);
  EXPECT_EQ(flagged.facts.at("detectors.repeated_tokens.out_of_distribution"), 1.0);
  EXPECT_NEAR(flagged.facts.at("detectors.repeated_tokens.loss_uniform"), std::log(6.0), 1e-12);
  ASSERT_EQ(flagged.notes.size(), 1u);
  EXPECT_EQ(flagged.notes[0].find("detectors: warning: repeated random tokens are outside this model's training distribution"), 0u);
  std::map<std::string, Tensor> state = model->state_dict();
  state["head.weight"] = zeros(state["head.weight"].shape(), state["head.weight"].dtype());
  model->load_state_dict(state);
  AnalysisResult plain;
  repeated_tokens_test(inputs(), 3, plain);
  EXPECT_EQ(plain.facts.at("detectors.repeated_tokens.out_of_distribution"), 0.0);
  EXPECT_TRUE(plain.notes.empty());
}

TEST(Analysis, TheReadoutOfTheLastStreamIsTheModelsOutputForEveryKind) {
  struct Case {
    std::string kind;
    NormPlacement norm;
    DataShape shape;
  };
  DataShape tokens;
  tokens.vocab_size = 9, tokens.num_classes = 3, tokens.max_len = 6, tokens.padded = true;
  DataShape images;
  images.channels = 1, images.height = images.width = 8, images.num_classes = 3;
  DataShape pairs = tokens;
  pairs.num_classes = 10, pairs.target_max_len = 5, pairs.bos = 1, pairs.eos = 9, pairs.shared_vocabulary = true;
  const std::vector<Case> cases = {{"causal_lm", NormPlacement::pre, tokens},  {"causal_lm", NormPlacement::post, tokens},
                                   {"token_tagger", NormPlacement::pre, tokens}, {"sequence_classifier", NormPlacement::pre, tokens},
                                   {"vit", NormPlacement::pre, images},         {"seq2seq", NormPlacement::pre, pairs}};
  for (const Case& c : cases) {
    ModelConfig config;
    config.kind.name = c.kind;
    config.encoder.d_model = 16, config.encoder.n_heads = 2, config.encoder.n_layers = 2, config.encoder.norm = c.norm;
    Generator gen(3);
    std::shared_ptr<Model> model = make_model(config, c.shape, gen);
    EvalScope scope(*model);
    Batch b;
    if (c.shape.images()) {
      b.input = uniform({2, 1, 8, 8}, gen);
    } else {
      b.input = from_indices({2, 3, 4, 5, 6, 0, 3, 3, 4, 0, 0, 0}, {2, 6});
      b.key_padding_mask = from_mask({false, false, false, false, false, true, false, false, false, true, true, true}, {2, 6});
      b.decoder_input = from_indices({1, 4, 5, 1, 6, 6}, {2, 3});
    }
    const std::string last = model->readout_blocks() + "1.hook_resid_post";
    ForwardOptions o;
    o.hooks.cache = {last};
    const ModelOutput out = model->forward(b, o);
    const Tensor read = model->readout(out.cache.at(last), b, true, true);
    ASSERT_EQ(read.shape(), out.logits.shape()) << c.kind;
    const std::vector<double> x = read.to_vector(), y = out.logits.to_vector();
    for (std::size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(x[i], y[i], 1e-5) << c.kind << " " << norm_placement_name(c.norm) << " at " << i;
  }
}

// Heads are heads whatever the mixing: every registered kernel goes through ablation, patching,
// attribution, detectors and probes (a causal LM where the kernel can be causal, else a tagger).
TEST(Analysis, EveryKernelIsAnalysed) {
  PreviousTokenSource data;
  for (const std::string& name : KernelRegistry::instance().names()) {
    const KernelInfo& info = KernelRegistry::instance().find(name);
    ModelConfig config;
    config.kind.name = info.capabilities.causal ? "causal_lm" : "token_tagger";
    config.encoder.d_model = 16, config.encoder.n_heads = 2, config.encoder.n_layers = 2, config.encoder.attention = name;
    DataShape shape = data.shape();
    shape.num_classes = kVocab;
    Generator gen(4);
    std::shared_ptr<Model> model;
    try {
      model = make_model(config, shape, gen);
    } catch (const std::invalid_argument& e) {
      ADD_FAILURE() << name << ": " << e.what();
      continue;
    }
    AnalysisInputs in{*model, data, held_out_examples(data, 32, 16, 1)};
    AnalysisResult r;
    head_ablation(in, 1, r);
    activation_patching(*model, data, changed_at_three(data), 1, r);
    logit_attribution(in, 1, r);
    head_detectors(in, {}, {}, r);
    residual_probes(in, 0, r);
    weight_circuits(*model, r);
    for (const char* table : {"ablation_zero_accuracy", "ablation_resample_accuracy", "patching_heads", "patching_residual", "patching_layers",
                              "patching_head_positions", "patching_path_k", "attribution_heads", "attribution_positions", "probes_accuracy",
                              "circuits_composition_k"})
      EXPECT_TRUE(std::any_of(r.tables.begin(), r.tables.end(), [&](const AnalysisTable& t) { return t.name == table; })) << name << ": " << table;
    if (info.capabilities.pattern) {
      EXPECT_TRUE(std::any_of(r.tables.begin(), r.tables.end(), [](const AnalysisTable& t) { return t.name == "detector_induction_head"; })) << name;
    }
    EXPECT_NEAR(r.facts.at("attribution.unexplained"), 0.0, 1e-3) << name;
  }
}

// Without any norm (model.norm: none, the grokking model) the logits are the components' sum read out:
// the attributions add up to the logit; a post-norm model's do not, and the analysis says so.
TEST(Analysis, ANormlessModelIsAttributedAndAPostNormOneIsNot) {
  PreviousTokenSource data;
  for (NormPlacement norm : {NormPlacement::none, NormPlacement::post}) {
    ModelConfig config;
    config.kind.name = "causal_lm";
    config.encoder.d_model = 16, config.encoder.n_heads = 2, config.encoder.n_layers = 2, config.encoder.norm = norm;
    DataShape shape = data.shape();
    shape.num_classes = kVocab;
    Generator gen(5);
    std::shared_ptr<Model> model = make_model(config, shape, gen);
    AnalysisResult r;
    logit_attribution(AnalysisInputs{*model, data, held_out_examples(data, 32, 16, 1)}, 1, r);
    if (norm == NormPlacement::none) {
      EXPECT_NEAR(r.facts.at("attribution.unexplained"), 0.0, 1e-4 * std::max(1.0, std::fabs(r.facts.at("attribution.answer_logit"))));
    } else {
      EXPECT_EQ(r.facts.count("attribution.unexplained"), 0u);
      ASSERT_EQ(r.notes.size(), 1u);
    }
  }
}

// Blocks of attention alone (model.feed_forward: false) have no MLP to ablate or attribute: the layer
// table has only the attention column, and the attributions still add up to the logit.
TEST(Analysis, AttentionOnlyModelsHaveNoMlpComponents) {
  PreviousTokenSource data;
  ModelConfig config;
  config.kind.name = "causal_lm";
  config.encoder.d_model = 16, config.encoder.n_heads = 2, config.encoder.n_layers = 2, config.encoder.feed_forward = false;
  DataShape shape = data.shape();
  shape.num_classes = kVocab;
  Generator gen(5);
  const std::shared_ptr<Model> model = make_model(config, shape, gen);
  AnalysisInputs in{*model, data, held_out_examples(data, 32, 16, 1)};
  AnalysisResult r;
  layer_ablation(in, 1, r);
  logit_attribution(in, 1, r);
  const auto table = std::find_if(r.tables.begin(), r.tables.end(), [](const AnalysisTable& t) { return t.name == "ablation_layers_zero_loss"; });
  ASSERT_NE(table, r.tables.end());
  EXPECT_EQ(table->cols, (std::vector<std::string>{"attn_out"}));
  for (const AnalysisTable& t : r.tables)
    for (const auto* labels : {&t.rows, &t.cols})
      for (const std::string& label : *labels) EXPECT_EQ(label.find("mlp"), std::string::npos) << t.name;
  EXPECT_NEAR(r.facts.at("attribution.unexplained"), 0.0, 1e-3);
}

// The parts as the registry holds them: each declared once, in a place of its own, its options flags of
// the command that no other part's options share; run through the registry, every fact and note it
// writes begins with its name (what --only relies on to replace exactly its own), and a part that does not
// apply to a model says what it needs.
TEST(AnalysisRegistry, EveryPartDeclaresItselfAndOwnsWhatItWrites) {
  std::set<int> orders;
  std::set<std::string> keys;
  for (const AnalysisPartInfo* part : analysis_parts_in_order()) {
    EXPECT_TRUE(orders.insert(part->order).second) << part->name << " shares its place";
    EXPECT_FALSE(part->title.empty() || part->description.empty()) << part->name;
    for (const KeyDoc& d : part->options.docs) EXPECT_TRUE(keys.insert(d.key).second) << part->name << "'s " << d.key << " is another part's flag";
  }
  PreviousTokenSource data;
  ModelConfig config;
  config.kind.name = "causal_lm";
  config.encoder.d_model = 16, config.encoder.n_heads = 2, config.encoder.n_layers = 2;
  DataShape shape = data.shape();
  shape.num_classes = kVocab;
  Generator gen(6);
  const std::shared_ptr<Model> model = make_model(config, shape, gen);
  AnalysisInputs in{*model, data, held_out_examples(data, 32, 16, 1)};
  LoadedRun run;
  run.dir = testing::TempDir() + "/registry_run";  // no patterns: emergence says so in a note
  std::filesystem::create_directories(run.dir);
  const std::string folder = run.dir + "/analysis";
  std::size_t ran = 0;
  for (const AnalysisPartInfo* part : analysis_parts_in_order()) {
    const std::string needs = part->needs(*model, data);
    if (!needs.empty()) {
      EXPECT_TRUE(part->name == "rollout" || part->name == "fourier") << part->name << " does not apply to a causal LM of tokens: " << needs;
      continue;
    }
    AnalysisResult r;
    part->run({in, run, folder, r}, ComponentOptions());
    ++ran;
    EXPECT_FALSE(r.tables.empty() && r.facts.empty() && r.notes.empty()) << part->name << " wrote nothing";
    for (const auto& [fact, value] : r.facts) EXPECT_EQ(fact.rfind(part->name + ".", 0), 0u) << part->name << " wrote the fact " << fact;
    for (const std::string& note : r.notes) EXPECT_EQ(note.rfind(part->name + ":", 0), 0u) << part->name << " wrote the note " << note;
  }
  EXPECT_EQ(ran, 7u);  // patching too: this source has no pairs, and says so in a note
}

TEST(Analysis, SummaryRoundTripsWithItsUndefinedCells) {
  const std::string dir = testing::TempDir() + "/analysis_round_trip/analysis";
  std::filesystem::create_directories(dir);
  AnalysisResult r;
  r.add({"t", "ablation", "a table", "layer", "head", {"0", "1"}, {"0", "1", "2"}, {1, -2, NAN, 0.5, 0, 3}, true});
  r.facts["ablation.baseline.loss"] = 1.25;
  r.notes.push_back("a note");
  write_analysis(dir, r);
  for (const char* file : {"t.csv", "t.npy", "t.png", "summary.json"}) EXPECT_TRUE(std::filesystem::exists(dir + "/" + file)) << file;
  const AnalysisResult back = read_analysis(testing::TempDir() + "/analysis_round_trip");
  ASSERT_EQ(back.tables.size(), 1u);
  EXPECT_EQ(back.tables[0].cols, r.tables[0].cols);
  EXPECT_TRUE(std::isnan(back.tables[0].at(0, 2)));
  EXPECT_EQ(back.tables[0].at(1, 2), 3.0);
  EXPECT_EQ(back.facts.at("ablation.baseline.loss"), 1.25);
  EXPECT_EQ(back.notes, r.notes);
  EXPECT_THROW(read_analysis(testing::TempDir() + "/no_such_run"), std::runtime_error);
}

// `attnlab analyze` on a folder that is not a run says so and leaves the folder as it was (it took the
// run's lock first, and the lock's file stayed).
TEST(Analysis, AFolderThatIsNotARunIsRefusedAndLeftAsItWas) {
  const std::string dir = testing::TempDir() + "/not_a_run";
  std::filesystem::create_directories(dir);
  try {
    analyze_run(dir, AnalyzeOptions());
    ADD_FAILURE() << "analysed a folder that is not a run";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("is not a run folder"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir));
}

}  // namespace
}  // namespace attnlab
