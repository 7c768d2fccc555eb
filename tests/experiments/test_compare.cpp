// Comparison files with a grid and a selection: what they plan (runs, folders, each run's config), and
// the errors a bad grid or selection gets, at the comparison file's line and column.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <ostream>
#include <string>

#include "experiments/runner/compare_plan.hpp"
#include "experiments/runner/config.hpp"
#include "framework/io/config_node.hpp"

namespace attnlab {
namespace {

namespace fs = std::filesystem;

// A comparison file beside a copy of configs/mqar.yaml in a fresh folder under the test process's own
// temporary folder (tests/private_temp_dir.hpp), which goes when the process ends; returns its path.
std::string write_comparison(const std::string& test, const std::string& text) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("attnlab_compare_" + test);
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy_file(std::string(ATTNLAB_SOURCE_DIR) + "/configs/mqar.yaml", dir / "base.yaml");
  std::ofstream(dir / "cmp.yaml") << text << "dir: " << (dir / "out").string() << "\n";
  return (dir / "cmp.yaml").string();
}

const char* const kSweep = R"(name: sweep
base: base.yaml
seeds: [0, 1]
variants:
  softmax: {}
  delta: {model.attention.name: delta}
grid:
  model.d_model: [32, 64]
  train.optimizer.lr: [1e-3, 3e-3, 1e-2]
select: {over: train.optimizer.lr, by: loss}
)";

TEST(CompareGrid, PlansEveryVariantGridPointAndSeedWithTheValuesApplied) {
  const CompareSpec spec = read_compare_spec(write_comparison("plan", kSweep));
  ASSERT_EQ(spec.grid.size(), 2u);
  EXPECT_EQ(spec.grid[0].label, "d_model");
  EXPECT_EQ(spec.grid[1].label, "lr");
  ASSERT_TRUE(spec.select.has_value());
  EXPECT_EQ(spec.select->axis, 1u);
  EXPECT_EQ(spec.select->by, "loss");
  const auto points = spec.points();
  ASSERT_EQ(points.size(), 6u);
  EXPECT_EQ(points[1], (std::vector<std::size_t>{0, 1}));  // the last axis varies fastest
  EXPECT_EQ(spec.point_folder(points[5]), "d_model-64/lr-1e-2");
  EXPECT_EQ(spec.point_label(points[5]), "d_model=64 lr=1e-2");
  EXPECT_EQ(spec.point_label(points[5], 1), "d_model=64");

  const std::vector<PlannedRun> plan = plan_comparison(spec, {}, false);
  ASSERT_EQ(plan.size(), 2u * 6u * 2u);
  const PlannedRun& run = plan[12 + 2 * 2 + 1];  // delta (after softmax's 12), d_model 32, lr 1e-2, seed 1
  EXPECT_EQ(run.rel, "runs/delta/d_model-32/lr-1e-2/seed_1");
  const ExperimentConfig config = parse_config(run.config_yaml, run.config_file);
  EXPECT_EQ(config.model.encoder.d_model, 32u);
  EXPECT_DOUBLE_EQ(config.train.optimizer.lr(), 1e-2);
  EXPECT_EQ(config.model.encoder.attention, "delta");
  EXPECT_EQ(config.seed, 1u);
}

TEST(CompareGrid, ACommandLineOverrideOfAGridKeyIsRefused) {
  const CompareSpec spec = read_compare_spec(write_comparison("override", kSweep));
  try {
    plan_comparison(spec, {"model.d_model=128"}, false);
    FAIL() << "a command-line value replaced the grid's";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("command-line override `model.d_model=128`: the grid of "), std::string::npos) << e.what();
  }
  // Nor through its section (found in review: it replaced the grid's value, and the run kept the grid's label).
  EXPECT_THROW(plan_comparison(spec, {"model={d_model: 128}"}, false), ConfigError);
  EXPECT_EQ(plan_comparison(spec, {"train.steps=2000"}, false).size(), 24u);
  EXPECT_THROW(plan_comparison(spec, {"train.steps=2000", "train.steps=3000"}, false), ConfigError);  // the same key twice
}

// A variant may set log: keys but dir, which the comparison sets for each run (found in review: log:
// {interval: 5} was refused as if it set log.dir).
TEST(CompareGrid, AVariantsLogSectionMaySetAllButItsDir) {
  const std::vector<PlannedRun> plan =
      plan_comparison(read_compare_spec(write_comparison("log", "name: log\nbase: base.yaml\nvariants:\n  v: {log: {interval: 5}}\n")), {}, false);
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(parse_config(plan[0].config_yaml, plan[0].config_file).log.interval, 5u);
  EXPECT_THROW(read_compare_spec(write_comparison("logdir", "name: log\nbase: base.yaml\nvariants:\n  v: {log: {dir: elsewhere}}\n")), ConfigError);
  EXPECT_THROW(plan_comparison(read_compare_spec(write_comparison("logcli", "name: log\nbase: base.yaml\nvariants:\n  v: {}\n")), {"log={dir: x}"}, false),
               ConfigError);
}

TEST(CompareGrid, AxesWithTheSameLastComponentAreNamedWhole) {
  const CompareSpec spec = read_compare_spec(write_comparison("leaves", R"(name: leaves
base: base.yaml
variants: {sliding: {model.attention.name: sliding_window}}
grid:
  model.attention.short_conv: [0, 4]
  model.attention.options.dropout: [0.0]
  model.dropout: [0.0, 0.1]
)"));
  EXPECT_EQ(spec.grid[0].label, "short_conv");
  EXPECT_EQ(spec.grid[1].label, "model.attention.options.dropout");
  EXPECT_EQ(spec.grid[2].label, "model.dropout");
  const std::vector<PlannedRun> plan = plan_comparison(spec, {}, false);
  ASSERT_EQ(plan.size(), 4u);
  EXPECT_EQ(plan[3].rel, "runs/sliding/short_conv-4/model.attention.options.dropout-0.0/model.dropout-0.1/seed_0");
}

struct BadSweep {
  std::string text;
  const char* where;    // line:column in cmp.yaml
  const char* message;  // a fragment of the message
};

// ctest lists each case by this, not by the struct's bytes.
void PrintTo(const BadSweep& b, std::ostream* os) { *os << "error at " << b.where; }

class BadSweeps : public ::testing::TestWithParam<BadSweep> {};

TEST_P(BadSweeps, FailAtTheirPlaceWithoutPlanningAnything) {
  const BadSweep& b = GetParam();
  const std::string path = write_comparison("bad", b.text);
  try {
    plan_comparison(read_compare_spec(path), {}, false);
    FAIL() << "accepted:\n" << b.text;
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(path + ":" + b.where + ": "), std::string::npos) << what;
    EXPECT_NE(what.find(b.message), std::string::npos) << what;
  }
  EXPECT_FALSE(fs::exists(fs::path(path).parent_path() / "out"));
}

const std::string kHead = "name: bad\nbase: base.yaml\nvariants:\n  softmax: {}\n  delta: {model.attention.name: delta}\n";

INSTANTIATE_TEST_SUITE_P(
    Compare, BadSweeps,
    ::testing::Values(
        BadSweep{kHead + "grid: {model.d_model: []}\n", "6:23", "'model.d_model' must list the values it takes"},
        BadSweep{kHead + "grid: [model.d_model]\n", "6:7", "'grid' must map config keys to lists of values"},
        BadSweep{kHead + "grid: {model.d_model: [32, 32]}\n", "6:28", "lists 32 twice"},
        // A key given twice in one mapping: the last one won without a word.
        BadSweep{"name: bad\nbase: base.yaml\nvariants:\n  a: {train.steps: 3, train.steps: 4}\n", "4:23",
                 "variant 'a': 'train.steps' and 'train.steps' (line 4) set the same key; give each key once"},
        BadSweep{kHead + "set: {train.steps: 3, train: {steps: 4}}\n", "6:23",
                 "'set': 'train' and 'train.steps' (line 6) set the same key; give each key once"},
        BadSweep{kHead + "grid: {model.attention: [{name: linear}]}\n", "6:26", "must be single values"},
        BadSweep{kHead + "grid: {model.attention.name: [soft/max]}\n", "6:31", "holds '/'"},
        BadSweep{kHead + "grid: {seed: [1, 2]}\n", "6:8", "'seed' is set by the comparison for each run"},
        // Found in review: a key listed twice under grid:, or a variant or set: giving the grid's key through
        // its section, was taken without a word (the runs labelled with values they did not train with).
        BadSweep{kHead + "grid:\n  train.steps: [10, 12]\n  train.steps: [14]\n", "8:3", "grid: 'train.steps' and 'train.steps' vary the same key"},
        BadSweep{kHead + "grid: {[a]: [1]}\n", "6:8", "grid: a key must be a dotted config key"},
        BadSweep{"name: bad\nbase: base.yaml\nvariants:\n  lin: {model.attention: {name: linear}}\ngrid: {model.attention.name: [softmax, delta]}\n",
                 "4:9", "the grid varies 'model.attention.name' too"},
        BadSweep{kHead + "set: {train: {steps: 12}}\ngrid: {train.steps: [10, 14]}\n", "6:7", "the grid varies 'train.steps' too"},
        BadSweep{"name: bad\nbase: base.yaml\nvariants:\n  wide: {model.d_model: 128}\ngrid: {model.d_model: [32, 64]}\n", "4:10",
                 "variant 'wide' sets `model.d_model: 128`: the grid varies 'model.d_model' too"},
        BadSweep{kHead + "grid: {model.d_model: [32, 64]}\nselect: {over: train.optimizer.lr}\n", "7:16",
                 "'over' must name one of the grid's axes (model.d_model), not 'train.optimizer.lr'"},
        BadSweep{kHead + "select: {over: train.optimizer.lr}\n", "6:9", "'select' picks a value of a grid axis for each variant, but there is no grid"},
        BadSweep{kHead + "grid: {model.d_model: [32]}\nselect: {over: model.d_model, by: accuracy}\n", "7:35", "'select.by' is 'accuracy', which is not among [token_accuracy, exact_match, loss]"},
        BadSweep{kHead + "grid: {model.d_model: [32]}\nselect: {over: model.d_model, by: loss, how: max}\n", "7:41", "unknown key"},
        BadSweep{kHead + "grid: {model.d_model: [31]}\n", "4:3", "variant 'softmax' (base) at d_model=31: "},
        BadSweep{kHead + "grid: {model.d_model: [32]}\nselect: {over: model.d_model, seeds: 2}\n", "7:38", "'select.seeds' must be [1, 1], got 2"}));

}  // namespace
}  // namespace attnlab
