// Experiment configs: defaults, overrides, the resolved config round trip, the documentation of every
// key, and a table of bad configs with the position and message each must give.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "experiments/runner/compare.hpp"
#include "experiments/runner/config.hpp"
#include "framework/io/config_node.hpp"

namespace attnlab {
namespace {

TEST(Config, DefaultsOverridesAndRoundTrip) {
  const ExperimentConfig c = parse_config("name: t\ntask:\n  name: sort\n", "t.yaml",
                                          {"model.attention.name=linear", "train.steps=7", "model.attention.options={eps: 0.001}"});
  EXPECT_EQ(c.task.name, "sort");
  EXPECT_EQ(c.model.encoder.attention, "linear");
  EXPECT_EQ(c.train.steps, 7u);
  EXPECT_EQ(c.model.encoder.d_model, 64u);
  EXPECT_EQ(c.model.encoder.max_len, 8u);  // the task's sequence length
  const ExperimentConfig again = parse_config(config_to_yaml(c), "resolved.yaml");
  EXPECT_EQ(config_to_yaml(again), config_to_yaml(c));
}

TEST(Config, NanoGptOptionsRoundTrip) {
  const ExperimentConfig c = parse_config(
      "task: {name: copy}\nmodel: {kind: causal_lm, bias: false, tie_embeddings: true}\n"
      "train: {optimizer: {name: adamw, decay_kinds: [weight, embedding]}}\n", "t.yaml");
  EXPECT_FALSE(c.model.encoder.bias);
  EXPECT_TRUE(c.model.tie_embeddings);
  EXPECT_EQ(c.train.optimizer.decay_kinds, (std::set<ParamKind>{ParamKind::weight, ParamKind::embedding}));
  EXPECT_TRUE(causal_lm_config(c.model, 10).tie_embeddings);
  const ExperimentConfig again = parse_config(config_to_yaml(c), "resolved.yaml");
  EXPECT_EQ(again.train.optimizer.decay_kinds, c.train.optimizer.decay_kinds);
  EXPECT_TRUE(again.model.tie_embeddings);
  EXPECT_EQ(config_to_yaml(again), config_to_yaml(c));
  // The defaults: untied, weight matrices only, and an empty list decays nothing.
  EXPECT_EQ(parse_config("name: x\n", "d.yaml").train.optimizer.decay_kinds, std::set<ParamKind>{ParamKind::weight});
  EXPECT_TRUE(parse_config("name: x\n", "d.yaml", {"train.optimizer.decay_kinds=[]"}).train.optimizer.decay_kinds.empty());
}

TEST(Config, MqarSequenceLengthSizesTheModel) {
  const ExperimentConfig c = parse_config("task:\n  name: mqar\n  pairs: 4\n  symbols: 32\n  sequence_length: 64\n"
                                          "model:\n  kind: causal_lm\n", "m.yaml");
  EXPECT_EQ(c.task.toy.sequence_length, 64u);
  EXPECT_EQ(c.model.encoder.max_len, 64u);
  EXPECT_EQ(parse_config(config_to_yaml(c), "resolved.yaml").task.toy.sequence_length, 64u);
  const ExperimentConfig compact = parse_config("task:\n  name: mqar\n  pairs: 4\nmodel:\n  kind: causal_lm\n", "m.yaml");
  EXPECT_EQ(compact.model.encoder.max_len, 16u);  // 4 pairs, SEP, 4 queries and values less the last
}

TEST(Config, EveryKeyIsDocumented) {
  std::ifstream in(std::string(ATTNLAB_SOURCE_DIR) + "/docs/configs.md");
  ASSERT_TRUE(in) << "docs/configs.md is missing";
  std::stringstream text;
  text << in.rdbuf();
  for (const std::string& key : config_keys())
    EXPECT_NE(text.str().find("`" + key + "`"), std::string::npos) << key << " is read by the config but not in docs/configs.md";
}

TEST(Config, EveryShippedConfigLoads) {
  // The README promises each config runs as it is: every experiment config, and every run of every
  // comparison (its base with each variant's overrides), resolves and passes validation.
  std::size_t experiments = 0, comparisons = 0;
  for (const auto& entry : std::filesystem::directory_iterator(std::string(ATTNLAB_SOURCE_DIR) + "/configs")) {
    if (entry.path().extension() != ".yaml") continue;
    const std::string path = entry.path().string();
    if (entry.path().filename().string().rfind("compare_", 0) == 0) {
      std::size_t runs = 0;
      EXPECT_NO_THROW(runs = check_comparison(path)) << path;
      EXPECT_GT(runs, 0u) << path;
      ++comparisons;
    } else {
      EXPECT_NO_THROW(load_config(path)) << path;
      ++experiments;
    }
  }
  EXPECT_GE(experiments, 9u);
  EXPECT_GE(comparisons, 2u);
}

struct BadConfig {
  const char* yaml;
  std::vector<std::string> overrides;
  const char* position;  // "line:column", or "" when the error has no position in the file
  const char* message;   // a fragment of the message
};

class BadConfigs : public ::testing::TestWithParam<BadConfig> {};

TEST_P(BadConfigs, FailWithPositionAndAdvice) {
  const BadConfig& b = GetParam();
  try {
    parse_config(b.yaml, "bad.yaml", b.overrides);
    FAIL() << "no error for:\n" << b.yaml;
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    if (*b.position) {
      EXPECT_NE(what.find(std::string("bad.yaml:") + b.position + ":"), std::string::npos) << what;
    }
    EXPECT_NE(what.find(b.message), std::string::npos) << what;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Table, BadConfigs,
    ::testing::Values(
        BadConfig{"name: x\nmodle:\n  d_model: 32\n", {}, "2:1", "unknown key 'modle'; did you mean 'model'?"},
        BadConfig{"model:\n  d_modl: 32\n", {}, "2:3", "unknown key 'model.d_modl'; did you mean 'model.d_model'?"},
        BadConfig{"seed: 1\nseed: 2\n", {}, "2:1", "duplicate key 'seed'"},
        BadConfig{"train:\n  steps: abc\n", {}, "2:10", "'train.steps' must be an integer, got 'abc'"},
        BadConfig{"model:\n  dropout: 1.5\n", {}, "2:12", "'model.dropout' must be [0, 1), got 1.5"},
        BadConfig{"model:\n  d_model: 64\n  n_heads: 3\n", {}, "3:12", "model.n_heads (3) must divide model.d_model (64)"},
        BadConfig{"model:\n  kind: causal_lm\n  attention:\n    name: linformer\n", {}, "4:11",
                  "linformer does not support causal attention"},
        BadConfig{"model:\n  attention:\n    name: sofmax\n", {}, "3:11", "did you mean 'softmax'?"},
        BadConfig{"model:\n  attention:\n    name: softmax\n    options:\n      dropot: 0.1\n", {}, "5:7",
                  "unknown key 'model.attention.options.dropot'; did you mean 'model.attention.options.dropout'?"},
        BadConfig{"task:\n  name: mqar\n", {}, "", "task 'mqar' cannot train a token_tagger; use model.kind causal_lm"},
        BadConfig{"task:\n\tname: copy\n", {}, "2:6", "YAML indents with spaces only"},
        BadConfig{"name: x\n", {"train.stesp=5"}, "", "unknown key 'train.stesp'; did you mean 'train.steps'?"},
        BadConfig{"name: x\n", {"train.steps"}, "", "must look like key=value"},
        BadConfig{"task:\n  name: char_text\n", {}, "", "task.path is required for char_text"},
        BadConfig{"task:\n  name: mqar\n  pairs: 12\n  symbols: 8\nmodel:\n  kind: causal_lm\n", {}, "3:10",
                  "task.pairs (12) must not exceed task.symbols (8)"},
        BadConfig{"task:\n  name: mqar\n  pairs: 8\n  sequence_length: 30\nmodel:\n  kind: causal_lm\n", {}, "4:20",
                  "task.sequence_length (30) is too short for 8 pairs and 8 queries: it needs at least 2 * pairs + 2 * queries = 32"},
        BadConfig{"task:\n  name: mqar\n  pairs: 4\n  queries: 6\n  sequence_length: 64\nmodel:\n  kind: causal_lm\n", {}, "4:12",
                  "task.queries (6) must not exceed task.pairs (4) when task.sequence_length is set"},
        BadConfig{"train:\n  schedule:\n    kind: cosine\n", {}, "3:11", "did you mean 'warmup_cosine'?"},
        BadConfig{"- a\n- b\n", {}, "1:1", "the config must be a mapping"},
        BadConfig{"task:\n  name: quadrants\n  image_size: 16\nmodel:\n  kind: vit\n  patch_size: 5\n", {}, "6:15",
                  "model.patch_size (5) must divide the image size (16x16)"},
        BadConfig{"model:\n  kind: vit\n", {}, "2:9", "model.kind vit needs an image task"},
        BadConfig{"train:\n  eval_batches: 0\n", {}, "2:17", "the whole held-out split, which task 'reverse' does not have"},
        BadConfig{"task: {name: quadrants}\nmodel: {kind: vit}\ntrain: {final_eval_batches: 0}\n", {}, "3:29",
                  "train.final_eval_batches 0 means the whole held-out split"},
        BadConfig{"task: {name: quadrants, flip: true}\nmodel: {kind: vit}\n", {}, "1:31",
                  "task.flip augments fashion_mnist's training images"},
        BadConfig{"model:\n  tie_embeddings: true\n", {}, "2:19", "model.kind token_tagger has no such layer"},
        BadConfig{"train:\n  optimizer: {name: sgd, decay_kinds: [weight, norm]}\n", {}, "2:39",
                  "sgd adds its L2 weight_decay to every parameter"},
        BadConfig{"train:\n  optimizer:\n    decay_kinds: [weight, embeddings]\n", {}, "3:27",
                  "lists 'embeddings', which is not among [weight, embedding, bias, norm]; did you mean 'embedding'?"}));

}  // namespace
}  // namespace attnlab
