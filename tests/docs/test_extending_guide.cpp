// The worked examples of docs/extending.md, built from the page (tests/CMakeLists.txt), used as a user
// would use them: each is found by its registry, its config keys are read and documented from its schema,
// and a config that names all four trains and is analysed; plus each example's own promise.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "datasets/toy_tasks.hpp"
#include "experiments/analysis/part.hpp"
#include "experiments/runner/config.hpp"
#include "experiments/runner/train.hpp"
#include "framework/optim/optimizer.hpp"

namespace attnlab {
namespace {

TEST(ExtendingGuide, EachExampleIsRegisteredAndDocumentedFromItsSchema) {
  EXPECT_TRUE(data::TaskRegistry::instance().contains("parity"));
  EXPECT_TRUE(ModelRegistry::instance().contains("last_token_classifier"));
  EXPECT_TRUE(OptimizerRegistry::instance().contains("lion"));
  EXPECT_TRUE(AnalysisRegistry::instance().contains("pattern_entropy"));
  std::map<std::string, std::string> tables;
  for (const auto& [section, table] : config_doc_tables()) tables[section] = table;
  EXPECT_NE(tables["task.parity"].find("`task.length` | 16 | integer [1, 62]"), std::string::npos) << tables["task.parity"];
  EXPECT_NE(tables["model.last_token_classifier"].find("`model.positional` | learned"), std::string::npos);
  EXPECT_NE(tables["train.optimizer.lion"].find("`train.optimizer.beta2` | 0.99"), std::string::npos);
  EXPECT_NE(tables["task"].find("parity"), std::string::npos);  // among task.name's values
}

TEST(ExtendingGuide, TheExamplesKeysAreCheckedAtTheirPositions) {
  const auto error = [](const std::string& yaml) {
    try {
      parse_config(yaml, "guide.yaml");
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error("task: {name: parity, length: 100}\nmodel: {kind: token_tagger}\n").find("guide.yaml:1:30: 'task.length' must be"), std::string::npos);
  EXPECT_NE(error("task: {name: parity}\nmodel: {kind: last_token_classifier, pooling: cls}\n")
                .find("model.pooling is read by model.kind sequence_classifier, vit, not by last_token_classifier"),
            std::string::npos);
  EXPECT_NE(error("task: {name: parity}\nmodel: {kind: causal_lm}\n").find("task 'parity' cannot train a causal_lm"), std::string::npos);
  EXPECT_NE(error("train: {optimizer: {name: lion, decay_kinds: [weight, bias]}}\n").find("is read by train.optimizer.name adamw, not by lion"),
            std::string::npos);
}

TEST(ExtendingGuide, ParityLabelsAreTheParityOfTheBitsSoFar) {
  const std::unique_ptr<data::SequenceTask> task = data::make_toy_task("parity", "{length: 12}");
  Generator gen(1);
  for (int n = 0; n < 100; ++n) {
    const data::SequenceTask::Problem p = task->problem(gen);
    ASSERT_EQ(p.source.size(), 12u);
    std::int64_t parity = 0;
    for (std::size_t i = 0; i < p.source.size(); ++i) {
      ASSERT_TRUE(p.source[i] == data::kFirstSymbol || p.source[i] == data::kFirstSymbol + 1);
      parity ^= p.source[i] - data::kFirstSymbol;
      EXPECT_EQ(p.answer[i], data::kFirstSymbol + parity);
    }
    EXPECT_EQ(p.label, parity);
  }
}

// Causal attention and a read at the last real token: the padding after it changes nothing.
TEST(ExtendingGuide, TheLastTokenClassifierReadsEachRowsLastRealToken) {
  ModelConfig config;
  config.kind.name = "last_token_classifier";
  config.encoder.d_model = 8, config.encoder.n_heads = 2, config.encoder.n_layers = 2;
  DataShape shape;
  shape.vocab_size = 6, shape.num_classes = 3, shape.max_len = 5, shape.padded = true;
  Generator gen(2);
  const std::shared_ptr<Model> model = make_model(config, shape, gen);
  EvalScope scope(*model);
  const Tensor padded = model->forward(Batch{from_indices({2, 3, 4, 0, 0}, {1, 5}), Tensor(), from_mask({false, false, false, true, true}, {1, 5})}).logits;
  const Tensor alone = model->forward(Batch{from_indices({2, 3, 4}, {1, 3}), Tensor(), Tensor()}).logits;
  ASSERT_EQ(padded.shape(), (Shape{1, 3}));
  const auto a = padded.to_vector(), b = alone.to_vector();
  for (std::size_t i = 0; i < 3; ++i) EXPECT_NEAR(a[i], b[i], 1e-5);
  const Tensor other = model->forward(Batch{from_indices({2, 3, 5}, {1, 3}), Tensor(), Tensor()}).logits;  // the last token read
  EXPECT_GT(std::fabs(other.to_vector()[0] - b[0]) + std::fabs(other.to_vector()[1] - b[1]), 1e-6);
}

TEST(ExtendingGuide, LionMovesEachWeightByTheSignOfItsInterpolatedMomentum) {
  Tensor w = from_vector({0.5, -0.2}, {2}, DType::float64);
  w.set_requires_grad(true);
  const ComponentOptions options(YAML::Load("{lr: 0.1, weight_decay: 0.5}"), "train.optimizer");
  const std::unique_ptr<Optimizer> lion = OptimizerRegistry::instance().find("lion").build({{"w", w, ParamKind::weight}}, options);
  const Tensor c = from_vector({1.0, -3.0}, {2}, DType::float64);
  for (int step = 0; step < 2; ++step) {
    lion->zero_grad();
    sum(w * c).backward();
    lion->step();
  }
  // Step 1: m = 0, so sign(c) = sign(g) = (+, -): p = p (1 - 0.05) -+ 0.1; m = 0.01 g.
  // Step 2: c = 0.9 (0.01 g) + 0.1 g, the same signs; m = 0.99 (0.01 g) + 0.01 g.
  const double p0 = (0.5 * 0.95 - 0.1) * 0.95 - 0.1, p1 = (-0.2 * 0.95 + 0.1) * 0.95 + 0.1;
  EXPECT_NEAR(w.to_vector()[0], p0, 1e-12);
  EXPECT_NEAR(w.to_vector()[1], p1, 1e-12);
  const Tensor m = lion->state_dict().at("w.exp_avg");
  EXPECT_NEAR(m.to_vector()[0], 0.99 * 0.01 + 0.01, 1e-12);
  EXPECT_NEAR(m.to_vector()[1], -3.0 * (0.99 * 0.01 + 0.01), 1e-12);
}

// The four together, from a config: trained, resumed from the checkpoint, analysed by the example part.
TEST(ExtendingGuide, AConfigOfAllFourTrainsAndIsAnalysed) {
  const std::string dir = testing::TempDir() + "/extending_guide";
  std::filesystem::remove_all(dir);
  const ExperimentConfig config = parse_config("name: parity\nseed: 3\ntask: {name: parity, length: 6}\n"
                                               "model: {kind: last_token_classifier, d_model: 16, n_heads: 2, n_layers: 1}\n"
                                               "train: {steps: 30, batch_size: 16, eval_interval: 15, optimizer: {name: lion, lr: 0.001}}\n"
                                               "log: {dir: " + dir + ", interval: 15}\n",
                                               "guide.yaml");
  const TrainResult trained = train_experiment(config, 1);
  ASSERT_EQ(trained.exit_status(), 0);
  EXPECT_TRUE(std::isfinite(trained.final_eval_loss));
  const TrainResult resumed = resume_experiment(trained.run_dir, {"train.steps=40"}, 1);
  ASSERT_EQ(resumed.exit_status(), 0);
  AnalyzeOptions o;
  o.only = {"pattern_entropy", "ablation"};
  o.examples = 32;
  o.part_options["pattern_entropy"] = ComponentOptions(YAML::Load("{normalize: true}"));
  const AnalysisResult r = analyze_run(trained.run_dir, o);
  const auto table = std::find_if(r.tables.begin(), r.tables.end(), [](const AnalysisTable& t) { return t.name == "pattern_entropy_heads"; });
  ASSERT_NE(table, r.tables.end());
  EXPECT_EQ(table->section, "pattern_entropy");
  EXPECT_EQ(table->values.size(), 2u);  // one layer, two heads
  for (double v : table->values) EXPECT_TRUE(v >= 0 && v <= 1 + 1e-9) << v;  // normalised: 1 is uniform
  EXPECT_TRUE(r.facts.count("pattern_entropy.min"));
  EXPECT_EQ(r.titles.at("pattern_entropy"), "Pattern entropy: how sharply each head attends");
}

}  // namespace
}  // namespace attnlab
