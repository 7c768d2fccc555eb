// Experiment configs: every key round-trips through the resolved config, the docs tables are the ones the
// schema generates, every shipped config loads, and tables of bad inputs with the position (file:line:
// column, or the override) and the message each must give.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include <unistd.h>

#include "experiments/runner/compare.hpp"
#include "experiments/runner/config.hpp"
#include "framework/io/atomic_file.hpp"
#include "framework/io/config_node.hpp"

namespace attnlab {
namespace {

TEST(Config, DefaultsAndOverrides) {
  const ExperimentConfig c = parse_config("name: t\ntask:\n  name: sort\n", "t.yaml",
                                          {"model.attention.name=linear", "train.steps=7", "model.attention.options={eps: 0.001}"});
  EXPECT_EQ(c.task.name, "sort");
  EXPECT_EQ(c.model.encoder.attention, "linear");
  EXPECT_EQ(c.train.steps, 7u);
  EXPECT_EQ(c.model.encoder.d_model, 64u);
  EXPECT_EQ(attention_length(c), 8u);  // the default source length
  EXPECT_EQ(c.train.final_eval_batches, c.train.eval_batches);  // a derived default
  EXPECT_EQ(c.train.schedule.decay_steps, 0u);                    // constant: no decay
  EXPECT_EQ(parse_config("train: {steps: 50, schedule: {kind: warmup_cosine}}\n", "t.yaml").train.schedule.decay_steps, 50u);
}

// The kernels a run uses, and whether and why not it captures patterns: one place for the report, analyze
// and the trainer. An encoder-decoder's parts each name theirs; a part left unnamed uses model.attention.
TEST(Config, KernelNamesAndWhyARunHasNoPatterns) {
  const std::string yaml = "task: {name: reverse}\nmodel: {kind: seq2seq}\ntrain: {steps: 40, eval_interval: 15}\n";
  EXPECT_EQ(kernel_names(parse_config("task: {name: sort}\n", "t.yaml")), "softmax");
  EXPECT_EQ(kernel_names(parse_config(yaml, "t.yaml")), "softmax");
  const ExperimentConfig mixed = parse_config(yaml, "t.yaml", std::vector<std::string>{"model.encoder_attention.name=linformer", "model.decoder_attention.name=gated_delta"});
  EXPECT_EQ(kernel_names(mixed), "encoder linformer, decoder gated_delta, cross softmax");
  // Every shipped kernel forms a pattern (a kernel of one's own may not: capabilities.pattern).
  EXPECT_TRUE(captures_patterns(mixed));
  EXPECT_EQ(why_no_patterns(mixed), "the run ended before its first capture, at step 15 (every train.eval_interval)");
  const ExperimentConfig off = parse_config(yaml, "t.yaml", std::vector<std::string>{"log.patterns=false", "log.pattern_interval=5"});
  EXPECT_FALSE(captures_patterns(off));
  EXPECT_EQ(why_no_patterns(off), "log.patterns is false");
  EXPECT_EQ(why_no_patterns(parse_config(yaml, "t.yaml", {"log.pattern_interval=50"})),
            "the run ended before its first capture, at step 40 (every log.pattern_interval)");
}

// A config file that is not there is said so, not guessed at ("does it exist?").
TEST(Config, AMissingFileIsSaidSo) {
  try {
    load_config(::testing::TempDir() + "no_such_config.yaml");
    ADD_FAILURE() << "loaded a file that is not there";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("no_such_config.yaml: no such config file"), std::string::npos) << e.what();
  }
}

// Integers are base 10 whatever their leading zeros, in a file and in an override (yaml-cpp alone read
// `010` as octal 8 and refused `08`), as the command line's own numbers are.
// An override sets the key it names and no other: not a key that aliases it (a value or a whole section),
// which yaml-cpp hands out as the anchored node itself. Found in review.
TEST(Config, AnOverrideLeavesTheKeysThatAliasItAlone) {
  const ExperimentConfig c = parse_config("train: {steps: &ten 10, eval_interval: *ten}\n", "t.yaml", {"train.steps=20"});
  EXPECT_EQ(c.train.steps, 20u);
  EXPECT_EQ(c.train.eval_interval, 10u);
  const ExperimentConfig s = parse_config("task: {name: reverse}\nmodel: {kind: seq2seq, encoder_attention: &att {name: softmax}, "
                                          "decoder_attention: *att}\n", "t.yaml", {"model.decoder_attention.name=linear"});
  EXPECT_EQ(kernel_names(s), "encoder softmax, decoder linear, cross softmax");
}

TEST(Config, IntegersWithLeadingZerosAreBaseTen) {
  const ExperimentConfig c = parse_config("seed: 010\ntrain: {steps: +08}\n", "t.yaml", {"model.d_model=064"});
  EXPECT_EQ(c.seed, 10u);
  EXPECT_EQ(c.train.steps, 8u);
  EXPECT_EQ(c.model.encoder.d_model, 64u);
}

// Configs that together set every key away from its default (each key only where its task and model
// kind read it).
const char* const kEveryKey[] = {
    "name: recall\nseed: 7\n"
    "task: {name: mqar, symbols: 20, pairs: 5, queries: 3, sequence_length: 40, random_filler: false, held_out_fraction: 0.2}\n"
    "model: {kind: causal_lm, d_model: 32, n_heads: 8, n_layers: 3, ff_hidden: 48, norm: post, activation: relu, dropout: 0.1,\n"
    "        bias: false, positional: rotary, init_from: weights, tie_embeddings: true,\n"
    "        attention: {name: performer, options: {features: 32}, short_conv: 4}}\n"
    "train: {steps: 77, batch_size: 6, grad_clip: 0.5, eval_interval: 7, eval_batches: 3, final_eval_batches: 5,\n"
    "        checkpoint_interval: 11,\n"
    "        optimizer: {name: adamw, lr: 0.003, beta1: 0.8, beta2: 0.99, eps: 1.0e-7, weight_decay: 0.1,\n"
    "                    decay_kinds: [weight, embedding, norm]},\n"
    "        schedule: {kind: warmup_linear, warmup_steps: 5, decay_steps: 70, min_lr: 1.0e-5}}\n"
    "log: {dir: elsewhere, interval: 9, patterns: false, pattern_interval: 13, probes: 2}\n",
    "task: {name: induction, length: 12, symbols: 15, gap: 3}\nmodel: {kind: causal_lm}\n",
    "task: {name: majority, length: 5, symbols: 3}\nmodel: {kind: sequence_classifier, pooling: cls, feed_forward: false}\n",
    "task: {name: quadrants, image_size: 8}\nmodel: {kind: vit, patch_size: 2}\n",
    "task: {name: char_text, path: text.txt, block_size: 16, train_fraction: 0.8}\nmodel: {kind: causal_lm}\n",
    "train: {optimizer: {name: adam}, label_smoothing: 0.1}\n",
    "train: {optimizer: {name: sgd, momentum: 0.5, nesterov: true, weight_decay: 0.2}}\n",
    "train: {optimizer: {name: sgd, momentum: 0.9, dampening: 0.1}}\n",
    "task: {name: scan, split: length, split_seed: 3}\n"
    "model: {kind: seq2seq, decoder_layers: 3, encoder_attention: {name: linear, options: {eps: 0.001}},\n"
    "        decoder_attention: {name: cosine}, cross_attention: {name: performer, options: {features: 16}}}\n",
    "task: {name: modular, p: 11, op: mul, train_fraction: 0.5, split_seed: 2}\nmodel: {kind: causal_lm, norm: none, init: fan_in}\n"
    "train: {eval_train: true, keep_checkpoints: true}\n",
    "task: {name: reverse, min_length: 3}\nmodel: {kind: seq2seq, share_embeddings: true, tie_embeddings: true,\n"
    "        decoder_attention: {options: {dropout: 0.1}}}\n",
};

// A scan config reading its pairs from files (written here: the config reads them to size the model).
std::string scan_files_dir() { return ::testing::TempDir() + "attnlab_scan_config_" + std::to_string(::getpid()); }  // one per process
std::string scan_files_config() {
  const std::string dir = scan_files_dir();
  std::filesystem::create_directories(dir);
  write_file_atomically(dir + "/train.txt", "IN: jump twice OUT: I_JUMP I_JUMP\nIN: walk OUT: I_WALK\n");
  write_file_atomically(dir + "/test.txt", "IN: walk twice OUT: I_WALK I_WALK\n");
  return "task: {name: scan, path: " + dir + "/train.txt, test_path: " + dir + "/test.txt}\nmodel: {kind: seq2seq}\n";
}

// A fashion_mnist config whose task.path is a folder of the four IDX files' names (the config check looks
// for them and reads the images' headers, one 28x28 image each; nothing reads the rest here).
std::string idx_folder_config() {
  const std::string dir = scan_files_dir() + "/fmnist";
  std::filesystem::create_directories(dir);
  const std::string header("\0\0\x08\x03\0\0\0\x01\0\0\0\x1c\0\0\0\x1c", 16);
  for (const char* f : {"train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"})
    write_file_atomically(dir + "/" + f, std::string(f).find("images") != std::string::npos ? header : "");
  return "task: {name: fashion_mnist, path: " + dir + ", flip: true, shift: 2}\nmodel: {kind: vit, patch_size: 7}\n";
}

TEST(Config, EveryKeyRoundTripsThroughTheResolvedConfig) {
  std::set<std::string> changed;
  std::vector<std::string> texts(std::begin(kEveryKey), std::end(kEveryKey));
  texts.push_back(scan_files_config());
  texts.push_back(idx_folder_config());
  for (const std::string& text : texts) {
    const ExperimentConfig c = parse_config(text, "t.yaml");
    for (const KeyDifference& d : config_differences(c, ExperimentConfig{}, true)) changed.insert(d.key);
    const std::string resolved = config_to_yaml(c);
    const ExperimentConfig again = parse_config(resolved, "resolved.yaml");
    for (const KeyDifference& d : config_differences(c, again, true))
      ADD_FAILURE() << d.key << " is " << d.first << " but reads back as " << d.second << " from:\n" << resolved;
    EXPECT_EQ(config_to_yaml(again), resolved);
  }
  for (const std::string& key : config_keys())
    EXPECT_TRUE(changed.count(key)) << key << " keeps its default in every config of this test: set it in one of kEveryKey";
  std::filesystem::remove_all(scan_files_dir());
}

// Resolved configs of older versions list every optimizer's keys (momentum: 0 under adamw): a key of
// another component at that component's default is let pass; at another value it is an error naming who
// reads it (a table row above).
TEST(Config, AnotherComponentsKeyAtItsDefaultIsLetPass) {
  const ExperimentConfig c = parse_config("train: {optimizer: {name: adamw, lr: 0.002, momentum: 0, weight_decay: 0.01}}\n", "old.yaml");
  EXPECT_EQ(c.train.optimizer.name, "adamw");
  EXPECT_DOUBLE_EQ(c.train.optimizer.lr(), 0.002);
  EXPECT_EQ(config_to_yaml(c).find("momentum"), std::string::npos);  // the resolved config lists adamw's keys alone
  EXPECT_THROW(parse_config("train: {optimizer: {name: adamw, momentum: 0.5}}\n", "new.yaml"), ConfigError);
}

TEST(Config, ResumableKeysAreTheOnlyOnesARunMayChange) {
  const ExperimentConfig a = parse_config("task: {name: copy}\n", "a.yaml");
  const ExperimentConfig b = parse_config("task: {name: copy}\n", "b.yaml", {"train.steps=2000", "log.interval=5", "model.n_heads=8"});
  const std::vector<KeyDifference> fixed = config_differences(a, b, false);
  ASSERT_EQ(fixed.size(), 1u);
  EXPECT_EQ(fixed[0].key, "model.n_heads");
  EXPECT_EQ(config_differences(a, b, true).size(), 3u);
}

TEST(Config, DocsHoldTheTablesTheSchemaGenerates) {
  const std::string docs = read_file(std::string(ATTNLAB_SOURCE_DIR) + "/docs/configs.md", "config docs");
  ASSERT_FALSE(docs.empty()) << "docs/configs.md is missing";
  for (const auto& [marker, table] : config_doc_tables()) {
    EXPECT_NE(docs.find("<!-- config-keys: " + marker + " -->\n" + table), std::string::npos)
        << "docs/configs.md does not hold the table of '" << marker << "' after its marker as the schema describes it; "
        << "regenerate the tables with `build/attnlab list --config-keys` (scripts/update_config_docs.sh). Expected:\n" << table;
  }
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
  std::string yaml;
  std::vector<std::string> overrides;
  const char* where;    // "line:column" in bad.yaml, "file" (bad.yaml without a position), or "override"
  const char* message;  // a fragment of the message
};

void PrintTo(const BadConfig& b, std::ostream* os) { *os << b.yaml.substr(0, 60) << "... " << b.message; }

void expect_error(const BadConfig& b) {
  try {
    parse_config(b.yaml, "bad.yaml", b.overrides);
    ADD_FAILURE() << "no error for:\n" << b.yaml;
  } catch (const ConfigError& e) {
    const std::string what = e.what(), where = b.where;
    if (where == "override") {
      EXPECT_EQ(what.rfind("command-line override `" + b.overrides.back() + "`: ", 0), 0u) << what;
    } else if (where == "file") {
      EXPECT_EQ(what.rfind("bad.yaml: ", 0), 0u) << what;
    } else {
      EXPECT_EQ(what.rfind("bad.yaml:" + where + ": ", 0), 0u) << what;
    }
    EXPECT_NE(what.find(b.message), std::string::npos) << what;
  }
}

// Typos, types, ranges and impossible combinations.
class BadConfigs : public ::testing::TestWithParam<BadConfig> {};
TEST_P(BadConfigs, FailWithPositionAndAdvice) { expect_error(GetParam()); }
INSTANTIATE_TEST_SUITE_P(
    Table, BadConfigs,
    ::testing::Values(
        BadConfig{"name: x\nmodle:\n  d_model: 32\n", {}, "2:1", "unknown key 'modle'; did you mean 'model'?"},
        BadConfig{"model:\n  d_modl: 32\n", {}, "2:3", "unknown key 'model.d_modl'; did you mean 'model.d_model'?"},
        BadConfig{"seed: 1\nseed: 2\n", {}, "2:1", "duplicate key 'seed'"},
        BadConfig{"train:\n  steps: abc\n", {}, "2:10", "'train.steps' must be an integer, got 'abc'"},
        // A section whose keys were commented out trained the defaults without a word (found in review).
        BadConfig{"name: x\ntask:\nmodel: {d_model: 32}\n", {}, "2:1", "'task' has no value; give its keys (or {} for the defaults)"},
        BadConfig{"train:\n  optimizer:\n  steps: 5\n", {}, "2:3", "'train.optimizer' has no value"},
        BadConfig{"log: {dir: ''}\n", {}, "1:12", "'log.dir' is empty; give the folder runs go to"},
        // Numbers beyond a double (found in review: 1e-400 read as 0, which turns clipping off).
        BadConfig{"train: {grad_clip: 1e-400}\n", {}, "1:20", "'train.grad_clip' is 1e-400, beyond what a double holds (it would read as 0)"},
        BadConfig{"train: {optimizer: {lr: 1e400}}\n", {}, "1:25", "'train.optimizer.lr' is 1e400, beyond what a double holds (it would read as infinity)"},
        BadConfig{"model:\n  dropout: 1.5\n", {}, "2:12", "'model.dropout' must be [0, 1), got 1.5"},
        BadConfig{"model:\n  kind: causal_lm\n  attention: {name: delta, options: {chunk: -4}}\n", {}, "3:45",
                  "'model.attention.options.chunk' must be >= 1, got -4"},
        BadConfig{"train:\n  steps: -3\n", {}, "2:10", "'train.steps' must be >= 1, got -3"},
        // The modular task's keys: a modulus below 2 or beyond what it keeps in memory, a train share outside
        // (0, 1), an operation it does not know.
        BadConfig{"task:\n  name: modular\n  p: 1\nmodel: {kind: causal_lm}\n", {}, "3:6", "'task.p' must be [2, 4096], got 1"},
        BadConfig{"task:\n  name: modular\n  p: 5000\nmodel: {kind: causal_lm}\n", {}, "3:6", "'task.p' must be [2, 4096], got 5000"},
        BadConfig{"task: {name: modular, train_fraction: 1.0}\nmodel: {kind: causal_lm}\n", {}, "1:39", "'task.train_fraction' must be"},
        BadConfig{"task: {name: modular, op: div}\nmodel: {kind: causal_lm}\n", {}, "1:27", "add, sub, mul"},
        BadConfig{"name: x\n---\n# more\n\nseed: 1\n", {}, "2:1", "a second YAML document starts here"},
        BadConfig{"task: {name: fashion_mnist, path: /proc/self/status}\nmodel: {kind: vit}\n", {}, "1:35",
                  "task.path: /proc/self/status is a file; give the folder that holds the four IDX files"},
        BadConfig{"name: x\n---\n", {}, "2:1", "a second YAML document starts here"},
        BadConfig{"task: {name: copy}\nmodel:\n  kind: causal_lm\n  cross_attention:\n    name: linear\n", {}, "5:5",
                  "model.cross_attention is read by model.kind seq2seq, not by causal_lm (which reads model.positional, model.tie_embeddings); remove it"},
        BadConfig{"model:\n  d_model: 64\n  n_heads: 3\n", {}, "3:12", "model.n_heads (3) must divide model.d_model (64)"},
        BadConfig{"model:\n  kind: causal_lm\n  attention:\n    name: linformer\n", {}, "4:11", "linformer does not support causal attention"},
        BadConfig{"model:\n  attention:\n    name: sofmax\n", {}, "3:11", "did you mean 'softmax'?"},
        BadConfig{"model:\n  attention:\n    name: softmax\n    options:\n      dropot: 0.1\n", {}, "5:7",
                  "unknown key 'model.attention.options.dropot'; did you mean 'model.attention.options.dropout'?"},
        BadConfig{"task:\n  name: mqar\n", {}, "file", "task 'mqar' cannot train a token_tagger; use model.kind causal_lm"},
        BadConfig{"task:\n\tname: copy\n", {}, "2:6", "YAML indents with spaces only"},
        BadConfig{"task:\n  name: char_text\nmodel: {kind: causal_lm}\n", {}, "2:9", "task.path is required for char_text"},
        BadConfig{"task:\n  name: mqar\n  pairs: 12\n  symbols: 8\nmodel:\n  kind: causal_lm\n", {}, "3:10",
                  "task.pairs (12) must be between 1 and task.symbols (8)"},
        BadConfig{"task:\n  name: mqar\n  pairs: 8\n  sequence_length: 30\nmodel:\n  kind: causal_lm\n", {}, "4:20",
                  "task.sequence_length (30) is too short for 8 pairs and 8 queries: it needs at least 2 * pairs + 2 * queries = 32"},
        BadConfig{"task:\n  name: mqar\n  pairs: 4\n  queries: 6\n  sequence_length: 64\nmodel:\n  kind: causal_lm\n", {}, "4:12",
                  "task.queries (6) must not exceed task.pairs (4) when task.sequence_length is set"},
        BadConfig{"train:\n  schedule:\n    kind: cosine\n", {}, "3:11", "did you mean 'warmup_cosine'?"},
        BadConfig{"- a\n- b\n", {}, "1:1", "the config must be a mapping"},
        BadConfig{"task:\n  name: quadrants\n  image_size: 16\nmodel:\n  kind: vit\n  patch_size: 5\n", {}, "6:15",
                  "model.patch_size (5) must divide the image size (16x16)"},
        BadConfig{"model:\n  kind: vit\n", {}, "2:9", "task 'reverse' cannot train a vit; use model.kind causal_lm or seq2seq or token_tagger"},
        BadConfig{"train:\n  eval_batches: 0\n", {}, "2:17", "the whole held-out split, which task 'reverse' does not have"},
        BadConfig{"task: {name: quadrants}\nmodel: {kind: vit}\ntrain: {final_eval_batches: 0}\n", {}, "3:29",
                  "train.final_eval_batches 0 means the whole held-out split"},
        BadConfig{"task: {name: quadrants, flip: true}\nmodel: {kind: vit}\n", {}, "1:31",
                  "task.flip is read by task.name fashion_mnist, not by quadrants (which reads task.image_size)"},
        BadConfig{"model:\n  tie_embeddings: true\n", {}, "2:19", "model.tie_embeddings is read by model.kind causal_lm, seq2seq, not by token_tagger (which reads model.positional)"},
        BadConfig{"task: {name: copy, gap: 2}\n", {}, "1:25", "task.gap is read by task.name induction, not by copy (which reads task.length, task.min_length, task.symbols, task.held_out_fraction)"},
        BadConfig{"model: {kind: vit, positional: rotary}\ntask: {name: quadrants}\n", {}, "1:32",
                  "not by vit (which reads model.patch_size, model.pooling); remove it"},
        BadConfig{"train:\n  optimizer: {name: sgd, nesterov: true}\n", {}, "2:36", "SGD: nesterov needs momentum > 0 and dampening 0"},
        BadConfig{"train:\n  optimizer: {name: sgd, decay_kinds: [weight, norm]}\n", {}, "2:39",
                  "train.optimizer.decay_kinds is read by train.optimizer.name adamw, not by sgd"},
        BadConfig{"train:\n  optimizer:\n    decay_kinds: [weight, embeddings]\n", {}, "3:27",
                  "lists 'embeddings', which is not among [weight, embedding, bias, norm]; did you mean 'embedding'?"},
        // The encoder-decoder: each part's kernel checked for what the part does, at the key that chose it.
        BadConfig{"model:\n  kind: seq2seq\n  cross_attention:\n    name: sparse\n", {}, "4:11",
                  "sparse does not support cross-attention (queries and keys from different sequences); use one of [cosine, linear, "
                  "linformer, performer, softmax] (model.kind seq2seq uses model.cross_attention for cross-attention)"},
        BadConfig{"model:\n  kind: seq2seq\n  attention:\n    name: sparse\n", {}, "4:11",
                  "(model.kind seq2seq uses model.attention for cross-attention)"},
        BadConfig{"model:\n  kind: seq2seq\n  decoder_attention:\n    name: linformer\n", {}, "4:11",
                  "linformer does not support causal attention"},
        BadConfig{"model:\n  kind: seq2seq\n  cross_attention:\n    name: sofmax\n", {}, "4:11", "did you mean 'softmax'?"},
        BadConfig{"model:\n  kind: seq2seq\n  cross_attention:\n    name: linear\n    options: {eps: -1}\n", {}, "5:20",
                  "model.cross_attention.options.eps"},
        BadConfig{"task: {name: scan}\nmodel: {kind: seq2seq, share_embeddings: true}\n", {}, "2:42",
                  "model.share_embeddings needs one vocabulary for source and target"},
        BadConfig{"task: {name: scan}\n", {}, "file", "task 'scan' cannot train a token_tagger; use model.kind seq2seq"},
        BadConfig{"task: {name: mqar}\nmodel: {kind: seq2seq}\n", {}, "2:15", "task 'mqar' cannot train a seq2seq"},
        BadConfig{"task: {name: scan, split: lenght}\nmodel: {kind: seq2seq}\n", {}, "1:27", "did you mean 'length'?"},
        BadConfig{"task: {name: scan, path: a.txt}\nmodel: {kind: seq2seq}\n", {}, "1:26",
                  "task.path (training pairs) and task.test_path (held-out pairs) are SCAN-format files given together"},
        BadConfig{"model: {decoder_layers: 2}\n", {}, "1:25", "model.decoder_layers is read by model.kind seq2seq, not by token_tagger"},
        BadConfig{"task: {name: copy, min_length: 9}\n", {}, "1:32", "task.min_length (9) must not exceed task.length (8)"},
        BadConfig{"train: {label_smoothing: 1}\n", {}, "1:26", "'train.label_smoothing' must be [0, 1)"},
        // A kernel's check about the model: at its options when there are any, else at its name.
        BadConfig{"model:\n  d_model: 320\n  n_heads: 2\n  attention:\n    name: performer\n", {}, "5:11",
                  "performer needs a head dim of at most 128 (model.d_model / model.n_heads is 160)"},
        BadConfig{"model:\n  d_model: 320\n  n_heads: 2\n  attention:\n    name: performer\n    options: {features: 64}\n", {}, "6:25",
                  "performer needs a head dim of at most 128"},
        BadConfig{"model: {d_model: 320, n_heads: 2}\n", {"model.attention.name=performer"}, "override",
                  "performer needs a head dim of at most 128"}));

// Inputs that were once accepted silently (they trained the defaults, or dropped a part of the file).
class SilentlyAccepted : public ::testing::TestWithParam<BadConfig> {};
TEST_P(SilentlyAccepted, AreNowErrors) { expect_error(GetParam()); }
INSTANTIATE_TEST_SUITE_P(
    Table, SilentlyAccepted,
    ::testing::Values(
        BadConfig{"", {}, "file", "the config is empty"},
        BadConfig{"# only a comment\n", {}, "file", "the config is empty"},
        BadConfig{"---\n", {}, "file", "the config is empty"},
        BadConfig{"name: a\n---\nname: b\n", {}, "2:1", "a second YAML document starts here"},
        BadConfig{std::string("name: a\ntrain:\n  steps: 1\0" "2\n", 28), {}, "3:11", "NUL byte"},
        BadConfig{"name: x\n", {"train.steps.=5"}, "override", "'train.steps.' is not a dotted key: it has an empty part"},
        BadConfig{"name: x\n", {"train..steps=5"}, "override", "it has an empty part"},
        BadConfig{"name: x\n", {"train.st eps=5"}, "override", "'st eps' is not a key name"},
        BadConfig{"name: ../x\n", {}, "1:7", "it holds '/', which would put the run outside log.dir"},
        BadConfig{"name: /tmp/x\n", {}, "1:7", "it holds '/'"},
        BadConfig{"name: .\n", {}, "1:7", "'.' is not a folder of its own"},
        BadConfig{"name: ..\n", {}, "1:7", "'..' is not a folder of its own"},
        BadConfig{"name: ''\n", {}, "1:7", "it is empty"},
        BadConfig{"name: \"a\\nb\"\n", {}, "1:7", "control character"},
        BadConfig{"name: \"a\\tb\"\n", {}, "1:7", "control character"},
        BadConfig{"log: {dir: \"runs\\nx\"}\n", {}, "1:12", "'log.dir' holds a control character"},
        // The same key twice on the command line: the last one won.
        BadConfig{"name: x\n", {"train.steps=3", "train.steps=5"}, "override", "`train.steps=3` sets 'train.steps' too; give each key once"},
        BadConfig{"name: x\n", {"train.steps=3", "model.d_model=32", "train={steps: 4}"}, "override",
                  "`train.steps=3` sets 'train.steps', which is inside 'train'; give each key once"},
        // Read as octal or hex (`steps: 0x10` trained 16 steps).
        BadConfig{"train:\n  steps: 0x10\n", {}, "2:10", "'train.steps' must be an integer, got '0x10'"},
        BadConfig{"name: x\n", {"seed=0o17"}, "override", "'seed' must be an integer, got '0o17'"},
        BadConfig{"train:\n  steps: 99999999999999999999\n", {}, "2:10", "'train.steps' must be >= 1, got 99999999999999999999, which does not even fit in 64 bits"},
        BadConfig{"train:\n  steps: +-5\n", {}, "2:10", "'train.steps' must be an integer, got '+-5'"}));

// Errors that used to be unclear: raw library texts, the wrong line, or no key named.
class UnclearErrors : public ::testing::TestWithParam<BadConfig> {};
TEST_P(UnclearErrors, NameTheKeyAndThePlace) { expect_error(GetParam()); }
INSTANTIATE_TEST_SUITE_P(
    Table, UnclearErrors,
    ::testing::Values(
        BadConfig{"train:\n  steps:\n  batch_size: 4\n", {}, "2:3", "'train.steps' has no value"},
        BadConfig{"train:\n  optimizer: {lr: .inf}\n", {}, "2:19", "'train.optimizer.lr' must be a finite number, got .inf"},
        BadConfig{"train:\n  optimizer: {lr: .nan}\n", {}, "2:19", "must be a finite number"},
        BadConfig{"train:\n  schedule: {kind: warmup_cosine, min_lr: 5}\n", {}, "2:43", "min_lr must be in [0, lr]"},
        BadConfig{"train:\n  steps: 100\n  schedule: {kind: warmup_cosine, warmup_steps: 500}\n", {}, "3:49",
                  "warmup_steps (500) must be <= decay_steps (100)"},
        BadConfig{"train:\n  schedule: {kind: constant, decay_steps: 10}\n", {}, "2:43", "a constant schedule does not decay"},
        BadConfig{"task: {name: induction, length: 20, symbols: 10, gap: 4}\nmodel: {kind: causal_lm}\n", {}, "1:55",
                  "task.symbols (10) must be at least task.length"},
        BadConfig{"name: x\n", {"model.d_model=abc"}, "override", "'model.d_model' must be an integer, got 'abc'"},
        BadConfig{"name: x\n", {"train.stesp=5"}, "override", "unknown key 'train.stesp'; did you mean 'train.steps'?"},
        BadConfig{"name: x\n", {"name.first=5"}, "override", "'name' is a value, not a section with keys under it"},
        BadConfig{"name: x\n", {"train.steps"}, "override", "an override looks like key=value"},
        BadConfig{"name: x\n", {"train.steps="}, "override", "the override has no value"},
        BadConfig{"name: x\n", {"model.attention={name: sparse, options: {windw: 2}}"}, "override",
                  "unknown key 'model.attention.options.windw'; did you mean 'model.attention.options.window'?"},
        BadConfig{"name: \"abc\ntrain: {steps: 3}\n", {}, "1:7", "runs over several lines; is its closing quote missing?"},
        BadConfig{"a: " + std::string(3000, '[') + std::string(3000, ']') + "\n", {}, "1:6004", "nests lists or mappings deeper"},
        BadConfig{std::string(2000, 'k') + ": 1\n", {}, "1:1", "a key of 2000 characters"},
        BadConfig{"{a: 1}: 2\n", {}, "1:1", "a key must be a name, not a list or mapping"},
        BadConfig{"train: [1, 2]\n", {}, "1:8", "'train' must be a mapping of keys to values"},
        BadConfig{"hello\n", {"train.steps=3"}, "1:1", "the config must be a mapping"}));

// Sizes no machine holds: the key that asks for them is named, before anything is allocated.
class HugeSizes : public ::testing::TestWithParam<BadConfig> {};
TEST_P(HugeSizes, NameTheKeyBeforeAllocating) { expect_error(GetParam()); }
INSTANTIATE_TEST_SUITE_P(
    Table, HugeSizes,
    ::testing::Values(BadConfig{"name: x\n", {"train.batch_size=100000000000"}, "override", "train.batch_size (100000000000) makes this experiment need about"},
                      BadConfig{"name: x\n", {"model.d_model=100000000"}, "override", "model.d_model (100000000) makes"},
                      BadConfig{"name: x\n", {"model.n_layers=100000000"}, "override", "model.n_layers (100000000) makes"},
                      BadConfig{"name: x\n", {"model.ff_hidden=100000000000"}, "override", "model.ff_hidden (100000000000) makes"},
                      BadConfig{"name: x\n", {"task.symbols=100000000000"}, "override", "task.symbols (100000000000) makes"},
                      BadConfig{"name: x\n", {"task.length=1000000000"}, "override", "task.length (1000000000) makes"},
                      BadConfig{"task: {name: induction, length: 8, symbols: 10}\nmodel: {kind: causal_lm}\n", {"task.gap=10000000000"},
                                "override", "task.gap (10000000000) makes"},
                      BadConfig{"name: x\n", {"log.probes=1000000000"}, "override", "log.probes (1000000000) makes"},
                      BadConfig{"task: {name: char_text, path: t.txt}\nmodel: {kind: causal_lm}\n", {"task.block_size=10000000000"},
                                "override", "task.block_size (10000000000) makes"},
                      BadConfig{"task: {name: quadrants}\nmodel: {kind: vit}\n", {"task.image_size=10000000"}, "override",
                                "task.image_size (10000000) makes"},
                      BadConfig{"model: {attention: {name: performer}}\n", {"model.attention.options.features=1000000"}, "override",
                                "model.attention.options ({features: 1000000}) makes"},
                      BadConfig{"model:\n  attention: {name: performer, options: {features: 100000000}}\n", {}, "2:52",
                                "'model.attention.options.features' must be [1, 1048576]"}));

TEST(Config, OverridesOfAComparisonNameTheirOwnOrigin) {
  try {
    parse_config("name: x\n", "base.yaml", std::vector<std::pair<std::string, std::string>>{{"model.d_model=abc", "cmp.yaml:9:13: variant 'v'"}});
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), "cmp.yaml:9:13: variant 'v': 'model.d_model' must be an integer, got 'abc'");
  }
}

}  // namespace
}  // namespace attnlab
