// The training loop: the same seed and thread count give the same run bit for bit, and a run resumed
// from its checkpoint matches one that never stopped (dropout on, so every generator must come back).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "experiments/runner/train.hpp"
#include "framework/io/checkpoint.hpp"

namespace attnlab {
namespace {

namespace fs = std::filesystem;

ExperimentConfig small(const std::string& dir, const std::string& name, std::size_t steps) {
  return parse_config("task: {name: sort, length: 5, symbols: 4}\n"
                      "model: {d_model: 16, n_heads: 2, n_layers: 2, dropout: 0.1,\n"
                      "        attention: {name: softmax, options: {dropout: 0.1}}}\n"
                      "train: {batch_size: 8, eval_interval: 10, eval_batches: 2,\n"
                      "        schedule: {kind: warmup_cosine, warmup_steps: 5, decay_steps: 40}}\n"
                      "log: {interval: 5}\n",
                      "test.yaml", {"log.dir=" + dir, "name=" + name, "train.steps=" + std::to_string(steps)});
}

// Loss and metric columns of metrics.csv (without speed and time).
std::vector<std::string> metric_rows(const std::string& run) {
  std::ifstream in(run + "/metrics.csv");
  std::vector<std::string> rows;
  for (std::string line; std::getline(in, line);) {
    std::stringstream ss(line);
    std::string field, kept;
    for (int i = 0; i < 6 && std::getline(ss, field, ','); ++i) kept += field + ",";
    rows.push_back(kept);
  }
  return rows;
}

void expect_same_state(const std::string& a, const std::string& b) {
  const Checkpoint x = load_checkpoint(a + "/last.ckpt"), y = load_checkpoint(b + "/last.ckpt");
  std::size_t compared = 0;
  for (const auto& [name, t] : x.tensors) {
    if (name.rfind("model.", 0) != 0 && name.rfind("optim.", 0) != 0 && name != "rng.data") continue;
    ASSERT_TRUE(y.tensors.count(name)) << name;
    EXPECT_EQ(t.to_vector(), y.tensors.at(name).to_vector()) << name;
    ++compared;
  }
  EXPECT_GT(compared, 20u);
}

class Training : public ::testing::Test {
 protected:
  void SetUp() override {
    // One folder per test: ctest runs the tests of this file in parallel processes.
    dir_ = ::testing::TempDir() + "attnlab_train_" + ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir_;
};

TEST_F(Training, SameSeedSameRunBitForBit) {
  const TrainResult a = train_experiment(small(dir_, "a", 30), 1);
  const TrainResult b = train_experiment(small(dir_, "b", 30), 1);
  EXPECT_EQ(metric_rows(a.run_dir), metric_rows(b.run_dir));
  expect_same_state(a.run_dir, b.run_dir);
}

TEST_F(Training, ResumedRunMatchesAnUninterruptedOne) {
  const TrainResult whole = train_experiment(small(dir_, "whole", 40), 1);
  const TrainResult half = train_experiment(small(dir_, "half", 20), 1);
  ExperimentConfig rest = load_config(half.run_dir + "/config.yaml", {"train.steps=40"});
  const TrainResult resumed = train_experiment(rest, 1, half.run_dir);
  EXPECT_EQ(resumed.run_dir, half.run_dir);
  EXPECT_EQ(metric_rows(whole.run_dir), metric_rows(half.run_dir));
  expect_same_state(whole.run_dir, half.run_dir);
  EXPECT_TRUE(fs::exists(half.run_dir + "/best.ckpt"));
}

TEST_F(Training, ResumingWithoutACheckpointIsAClearError) {
  fs::create_directories(dir_ + "/empty");
  try {
    train_experiment(small(dir_, "x", 10), 1, dir_ + "/empty");
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("last.ckpt"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace attnlab
