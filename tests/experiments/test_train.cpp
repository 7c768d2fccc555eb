// The training loop: the same seed and thread count give the same run bit for bit, and a run resumed
// from its checkpoint matches one that never stopped (dropout on, so every generator must come back).
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <cmath>
#include <set>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include <unistd.h>

#include "framework/io/atomic_file.hpp"
#include "experiments/runner/metrics_log.hpp"
#include "experiments/runner/run_folder.hpp"
#include "experiments/runner/train.hpp"
#include "framework/ops/blas.hpp"
#include "framework/io/checkpoint.hpp"
#include "framework/io/npy.hpp"
#include "framework/models/vit.hpp"

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

// What decides a run's bits, as summary.json records it for the scripts that compare runs (golden.py,
// readme_tour.py): OpenBLAS's kernel set, the compiler that built attnlab (its version as this file's
// compiler spells it in __VERSION__) and the CPU's vendor, the latter from cpuid, here against the
// kernel's own reading in /proc/cpuinfo.
TEST_F(Training, TheSummaryRecordsTheKernelsCompilerAndCpuVendor) {
  const TrainResult r = train_experiment(small(dir_, "machine", 2), 1);
  const std::optional<RunSummary> s = read_summary(r.run_dir);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->openblas_core, blas_core_name());
#if defined(__clang__)
  EXPECT_EQ(s->compiler.rfind("clang ", 0), 0u) << s->compiler;
#else
  EXPECT_EQ(s->compiler.rfind("GCC ", 0), 0u) << s->compiler;
#endif
  EXPECT_NE(std::string(__VERSION__).find(s->compiler.substr(s->compiler.find(' ') + 1)), std::string::npos)
      << s->compiler << " against " << __VERSION__;
  EXPECT_EQ(s->cpu_vendor, cpu_vendor());
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("vendor_id", 0) != 0) continue;
    EXPECT_EQ(s->cpu_vendor, line.substr(line.find(':') + 2)) << line;
    return;
  }
  GTEST_SKIP() << "/proc/cpuinfo names no vendor_id to compare with";
}

TEST_F(Training, ResumedRunMatchesAnUninterruptedOne) {
  const TrainResult whole = train_experiment(small(dir_, "whole", 40), 1);
  const TrainResult half = train_experiment(small(dir_, "half", 20), 1);
  const TrainResult resumed = resume_experiment(half.run_dir, {"train.steps=40"}, 1);
  EXPECT_EQ(resumed.run_dir, half.run_dir);
  // The first leg ended with its own final evaluation at step 20; apart from it, the rows are the same.
  std::vector<std::string> continued = metric_rows(half.run_dir);
  const auto first_final = std::find_if(continued.begin(), continued.end(), [](const std::string& row) { return row.rfind("20,final,", 0) == 0; });
  ASSERT_NE(first_final, continued.end());
  continued.erase(first_final);
  EXPECT_EQ(metric_rows(whole.run_dir), continued);
  EXPECT_EQ(continued.back().rfind("40,final,", 0), 0u);
  expect_same_state(whole.run_dir, half.run_dir);
  EXPECT_TRUE(fs::exists(half.run_dir + "/best.ckpt"));
}

TEST_F(Training, FinalEvaluationCanCoverTheWholeHeldOutSplit) {
  fs::create_directories(dir_);
  std::string text;
  for (int i = 0; i < 1000; ++i) text.push_back("to be or not to be, "[i % 20]);
  std::ofstream(dir_ + "/text.txt") << text;
  const ExperimentConfig c = parse_config(
      "task: {name: char_text, block_size: 16, train_fraction: 0.9}\n"
      "model: {kind: causal_lm, d_model: 16, n_heads: 2, n_layers: 1, bias: false, tie_embeddings: true}\n"
      "train: {steps: 4, batch_size: 4, eval_interval: 2, eval_batches: 1, final_eval_batches: 0}\n"
      "log: {patterns: false}\n",
      "test.yaml", {"log.dir=" + dir_, "task.path=" + dir_ + "/text.txt"});
  const TrainResult r = train_experiment(c, 1);
  // 100 validation characters: 99 predicted, in 6 windows of 16 and a last one of 3.
  EXPECT_EQ(r.final_scored_tokens, 99u);
  const std::vector<std::string> rows = metric_rows(r.run_dir);
  EXPECT_EQ(rows[rows.size() - 2].rfind("4,eval,", 0), 0u);
  EXPECT_EQ(rows.back().rfind("4,final,", 0), 0u);
  EXPECT_NE(rows.back(), "4,final," + rows[rows.size() - 2].substr(7));  // a different evaluation than the sampled one
}

TEST_F(Training, ResumingWithoutACheckpointIsAClearError) {
  const TrainResult run = train_experiment(small(dir_, "x", 10), 1);
  fs::remove(run.run_dir + "/last.ckpt");
  fs::remove(run.run_dir + "/best.ckpt");
  try {
    resume_experiment(run.run_dir, {"train.steps=20"}, 1);
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("has no last.ckpt"), std::string::npos) << e.what();
  }
}

// A run folder has one writer: while its lock is held (here by this process, through another descriptor,
// as flock counts them), a second is refused, naming the holder; released, the folder is free again.
TEST_F(Training, ARunFolderRefusesASecondWriter) {
  const TrainResult run = train_experiment(small(dir_, "x", 10), 1);
  std::optional<RunFolderLock> held(std::in_place, run.run_dir, "attnlab analyze");
  const std::string expected = run.run_dir + " is in use by attnlab analyze (pid " + std::to_string(getpid()) +
                               "), so attnlab train cannot write it; wait for it to end or stop it (kill " + std::to_string(getpid()) + ")";
  try {
    resume_experiment(run.run_dir, {"train.steps=20"}, 1);
    FAIL() << "a second writer was let in";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(e.what(), expected);
  }
  held.reset();
  EXPECT_EQ(resume_experiment(run.run_dir, {"train.steps=20"}, 1).exit_status(), 0);
  EXPECT_NO_THROW(RunFolderLock(run.run_dir, "a test"));  // the training released it
}

// Faults halfway through: a kill during start-up or after a checkpoint, leftovers of an interrupted
// write, an edited config, a run that diverged.
TEST_F(Training, ResumeRestoresAnEmptiedConfigFromTheCheckpoint) {
  const TrainResult half = train_experiment(small(dir_, "half", 20), 1);
  const std::string config = read_file(half.run_dir + "/config.yaml", "test file");
  std::ofstream(half.run_dir + "/config.yaml", std::ios::trunc).flush();  // a kill while it was rewritten
  const TrainResult resumed = resume_experiment(half.run_dir, {"train.steps=30"}, 1);
  EXPECT_EQ(resumed.exit_status(), 0);
  EXPECT_EQ(load_config(half.run_dir + "/config.yaml").train.steps, 30u);
  EXPECT_NE(read_file(half.run_dir + "/config.yaml", "test file").find("batch_size: 8"), std::string::npos);
}

TEST_F(Training, AnEditedConfigIsRefusedNamingTheKeysAndBothFiles) {
  const TrainResult run = train_experiment(small(dir_, "run", 20), 1);
  std::string config = read_file(run.run_dir + "/config.yaml", "test file");
  config.replace(config.find("n_heads: 2"), 10, "n_heads: 4");  // keeps every parameter's shape
  std::ofstream(run.run_dir + "/config.yaml") << config;
  for (auto resume : {true, false}) {
    try {
      if (resume) {
        resume_experiment(run.run_dir, {"train.steps=30"}, 1);
      } else {
        load_run(run.run_dir, "best");
      }
      FAIL() << "an edited n_heads was accepted";
    } catch (const std::invalid_argument& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find(run.run_dir + "/config.yaml"), std::string::npos) << m;
      EXPECT_NE(m.find(".ckpt"), std::string::npos) << m;
      EXPECT_NE(m.find("model.n_heads: 4 here, 2 in the checkpoint"), std::string::npos) << m;
    }
  }
}

// The lines of `path` that `keep` accepts.
std::string filtered(const std::string& path, const std::function<bool(const std::string&)>& keep) {
  std::istringstream in(read_file(path, "test file"));
  std::string out;
  for (std::string line; std::getline(in, line);)
    if (keep(line)) out += line + "\n";
  return out;
}

std::size_t leading_step(const std::string& line) {
  const std::size_t at = line.find("\"step\":");
  return at == std::string::npos ? std::stoul(line) : std::stoul(line.substr(at + 7));
}

TEST_F(Training, AResumeAfterAKillLogsEveryStepOnceAndRemovesLeftovers) {
  const TrainResult whole = train_experiment(small(dir_, "whole", 40), 1);
  // As if killed at step 35 with last.ckpt from step 20: rows up to 35 logged, no final row, no summary,
  // and a half-written checkpoint and config beside the real ones.
  const TrainResult killed = train_experiment(small(dir_, "killed", 20), 1);
  for (const std::string file : {"/metrics.jsonl", "/metrics.csv"}) {
    const bool csv = file == "/metrics.csv";
    const std::string head = filtered(killed.run_dir + file, [&](const std::string& l) {
      return (csv && l.rfind("step", 0) == 0) || (l.find("final") == std::string::npos && l.rfind("step", 0) != 0);
    });
    const std::string later = filtered(whole.run_dir + file, [&](const std::string& l) {
      return l.rfind("step", 0) != 0 && leading_step(l) > 20 && leading_step(l) <= 35;
    });
    std::ofstream(killed.run_dir + file, std::ios::trunc) << head << later;
  }
  fs::remove(killed.run_dir + "/summary.json");
  std::ofstream(killed.run_dir + "/last.ckpt.tmp") << "half";
  std::ofstream(killed.run_dir + "/config.yaml.tmp") << "half";
  const TrainResult resumed = resume_experiment(killed.run_dir, {"train.steps=40"}, 1);
  EXPECT_FALSE(fs::exists(killed.run_dir + "/last.ckpt.tmp"));
  EXPECT_FALSE(fs::exists(killed.run_dir + "/config.yaml.tmp"));
  EXPECT_EQ(metric_rows(resumed.run_dir), metric_rows(whole.run_dir));
  // The pattern rows too: each capture step once.
  const std::string captures = filtered(resumed.run_dir + "/metrics.jsonl", [](const std::string& l) { return l.find("\"patterns\"") != std::string::npos; });
  EXPECT_EQ(captures, filtered(whole.run_dir + "/metrics.jsonl", [](const std::string& l) { return l.find("\"patterns\"") != std::string::npos; }));
}

// A line of the log that is no row is the user's to restore: the resume refuses it (file and line) and
// rewrites nothing; only a last line cut short (a kill while writing it) is dropped.
TEST_F(Training, AResumeRefusesADamagedMetricsRowAndDropsOnlyALastLineCutShort) {
  const TrainResult whole = train_experiment(small(dir_, "whole", 40), 1);
  const TrainResult damaged = train_experiment(small(dir_, "damaged", 20), 1);
  std::string jsonl = read_file(damaged.run_dir + "/metrics.jsonl", "test file");
  const std::string csv = read_file(damaged.run_dir + "/metrics.csv", "test file");
  const std::string config = read_file(damaged.run_dir + "/config.yaml", "test file");
  const std::size_t second = jsonl.find('\n') + 1;
  jsonl.replace(jsonl.find("\"loss\":", second), 7, "\"loss\";");
  std::ofstream(damaged.run_dir + "/metrics.jsonl", std::ios::trunc) << jsonl;
  try {
    resume_experiment(damaged.run_dir, {"train.steps=40"}, 1);
    ADD_FAILURE() << "a damaged row was dropped unseen";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("metrics.jsonl:2: not a metrics row"), std::string::npos) << e.what();
  }
  EXPECT_EQ(read_file(damaged.run_dir + "/metrics.jsonl", "test file"), jsonl);
  EXPECT_EQ(read_file(damaged.run_dir + "/metrics.csv", "test file"), csv);
  EXPECT_EQ(read_file(damaged.run_dir + "/config.yaml", "test file"), config);  // not train.steps 40 yet (found in review)
  EXPECT_TRUE(fs::exists(damaged.run_dir + "/summary.json"));                   // still a finished run
  // Blank lines, CRLF's too, are no rows to refuse.
  std::string blank = csv;
  blank.insert(blank.find('\n') + 1, " \r\n");
  std::ofstream(damaged.run_dir + "/metrics.csv", std::ios::trunc) << blank;
  // Restored, with a last line cut short after it: the resume drops that line and logs as the whole run.
  jsonl.replace(jsonl.find("\"loss\";"), 7, "\"loss\":");
  std::ofstream(damaged.run_dir + "/metrics.jsonl", std::ios::trunc) << jsonl << "{\"step\":21,\"spl";
  fs::remove(damaged.run_dir + "/summary.json");
  const TrainResult resumed = resume_experiment(damaged.run_dir, {"train.steps=40"}, 1);
  std::vector<std::string> rows = metric_rows(resumed.run_dir);  // less the final row of the run's end at 20
  rows.erase(std::remove_if(rows.begin(), rows.end(), [](const std::string& r) { return r.rfind("20,final,", 0) == 0; }), rows.end());
  EXPECT_EQ(rows, metric_rows(whole.run_dir));
}

TEST_F(Training, ADivergedRunKeepsTheLastFiniteStateAndSaysSo) {
  ExperimentConfig c = small(dir_, "diverge", 30);
  c.train.optimizer.name = "sgd";
  c.train.optimizer.options = ComponentOptions(YAML::Load("{lr: 1.0e+30}"), "train.optimizer");
  c.train.grad_clip = 0;
  c.model.encoder.attention_options = YamlTree();
  const TrainResult r = train_experiment(c, 1);
  EXPECT_TRUE(r.diverged);
  EXPECT_EQ(r.exit_status(), 1);
  ASSERT_TRUE(fs::exists(r.run_dir + "/last.ckpt"));
  const LoadedRun run = load_run(r.run_dir, "best");  // no best.ckpt: falls back to last.ckpt, saying so
  EXPECT_EQ(run.checkpoint_file, "last.ckpt");
  for (const auto& [name, t] : checkpoint_part(run.checkpoint, "model."))
    for (double v : t.to_vector()) ASSERT_TRUE(std::isfinite(v)) << name;
  EXPECT_NE(read_file(r.run_dir + "/summary.json", "test file").find("\"status\": \"diverged\""), std::string::npos);
  EXPECT_NE(read_file(r.run_dir + "/metrics.jsonl", "test file").find("\"split\":\"diverged\""), std::string::npos);
}

TEST_F(Training, BadDataFailsBeforeTheRunFolderExists) {
  fs::create_directories(dir_);
  std::ofstream(dir_ + "/short.txt") << "to be or not";
  const ExperimentConfig c = parse_config("task: {name: char_text, block_size: 16}\nmodel: {kind: causal_lm}\n", "t.yaml",
                                          {"log.dir=" + dir_ + "/runs", "task.path=" + dir_ + "/short.txt"});
  EXPECT_THROW(train_experiment(c, 1), std::invalid_argument);
  EXPECT_FALSE(fs::exists(dir_ + "/runs"));
}

// A toy task with too few distinct sources for a held-out split (4 of length 2 over 2 symbols) failed at
// its first probe, after the run folder had been made and had taken the run's name.
TEST_F(Training, ATaskWithoutHeldOutSourcesFailsBeforeTheRunFolderExists) {
  const ExperimentConfig c = parse_config("task: {name: copy, length: 2, symbols: 2}\n", "t.yaml", {"log.dir=" + dir_ + "/runs"});
  try {
    train_experiment(c, 1);
    ADD_FAILURE() << "trained a task without held-out sources";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("task 'copy': no held-out example found"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(dir_ + "/runs"));
}

// An encoder-decoder run captures its three attention parts, logs their metrics by part, and its report
// shows each under its title with the target tokens down the side of the cross-attention.
TEST_F(Training, AnEncoderDecoderRunCapturesItsThreeAttentionParts) {
  const ExperimentConfig c = parse_config("task: {name: reverse, length: 6, min_length: 3, symbols: 5}\n"
                                          "model: {kind: seq2seq, d_model: 16, n_heads: 2, n_layers: 1, share_embeddings: true}\n"
                                          "train: {steps: 12, batch_size: 8, eval_interval: 6, eval_batches: 1, label_smoothing: 0.1}\n"
                                          "log: {interval: 6, probes: 2}\n",
                                          "test.yaml", {"log.dir=" + dir_, "name=s2s"});
  const TrainResult r = train_experiment(c, 1);
  for (const char* part : {"encoder", "decoder", "cross"})
    for (std::size_t probe = 0; probe < 2; ++probe) {
      const std::string file = r.run_dir + "/patterns/step_12_probe_" + std::to_string(probe) + "_" + part + ".npy";
      EXPECT_TRUE(fs::exists(file)) << file;
    }
  EXPECT_TRUE(fs::exists(r.run_dir + "/patterns/probe_0_target_labels.txt"));
  const std::string labels = read_file(r.run_dir + "/patterns/probe_0_target_labels.txt", "test file");
  EXPECT_EQ(labels.rfind("bos\n", 0), 0u) << labels;
  // Each probe's patterns are cut to its own lengths: the batch's padding is not part of the example.
  std::set<std::size_t> source_lengths;
  for (std::size_t probe = 0; probe < 2; ++probe) {
    const std::string base = r.run_dir + "/patterns/probe_" + std::to_string(probe);
    std::vector<std::string> rows, columns;
    std::istringstream target_labels(read_file(base + "_target_labels.txt", "test file")), source_labels(read_file(base + "_labels.txt", "test file"));
    for (std::string l; std::getline(target_labels, l);) rows.push_back(l);
    for (std::string l; std::getline(source_labels, l);) columns.push_back(l);
    EXPECT_EQ(rows.size(), columns.size() + 1);  // BOS and the reversed source
    EXPECT_EQ(std::count(columns.begin(), columns.end(), "pad"), 0);
    const auto shape = [&](const char* part) { return read_npy(r.run_dir + "/patterns/step_12_probe_" + std::to_string(probe) + "_" + part + ".npy").shape(); };
    EXPECT_EQ(shape("cross"), (Shape{1, 2, rows.size(), columns.size()}));
    EXPECT_EQ(shape("decoder"), (Shape{1, 2, rows.size(), rows.size()}));
    EXPECT_EQ(shape("encoder"), (Shape{1, 2, columns.size(), columns.size()}));
    EXPECT_EQ(read_npy(base + "_tokens.npy").numel(), columns.size());
    source_lengths.insert(columns.size());
  }
  EXPECT_EQ(source_lengths.size(), 2u);  // the two probes differ in length, so one of them was padded in the batch
  const RunRecord run = read_run(r.run_dir);
  ASSERT_FALSE(run.captures.empty());
  std::set<std::string> parts;
  for (const HeadMetricRow& h : run.captures.back().heads) {
    parts.insert(h.part);
    if (h.part == "cross") {
      EXPECT_TRUE(std::isnan(h.metrics.induction));
    }
  }
  EXPECT_EQ(parts, (std::set<std::string>{"encoder", "decoder", "cross"}));
  const std::string report = read_file(r.run_dir + "/report.html", "test file");
  for (const char* title : {"Encoder self-attention", "Decoder self-attention", "Decoder cross-attention: target down, source across"})
    EXPECT_NE(report.find(title), std::string::npos) << title;
  EXPECT_NE(report.find(">bos</text>"), std::string::npos);  // the decoder's tokens label the cross-attention's rows
}

// A ViT saved before ViTs read model.pooling had a CLS token while its config said `pooling: mean`:
// loading its weights into the model its config now builds fails, and the error names the fix.
TEST(RunFolder, AnOldClassTokenViTSaysHowToLoadIt) {
  DataShape shape;
  shape.channels = 1, shape.height = 8, shape.width = 8, shape.num_classes = 4;
  ModelConfig old_kind;
  old_kind.kind.name = "vit", old_kind.kind.options.set("patch_size", "4"), old_kind.kind.options.set("pooling", "cls");
  old_kind.encoder.d_model = 8, old_kind.encoder.n_heads = 2, old_kind.encoder.n_layers = 1;
  Generator gen(0);
  const ViT saved(old_kind, shape, gen);
  LoadedRun run;
  run.dir = "runs/old-vit", run.checkpoint_file = "last.ckpt";
  for (const auto& [name, t] : saved.state_dict()) run.checkpoint.tensors.emplace("model." + name, t);
  run.config.model = old_kind;
  run.config.model.kind.options.set("pooling", "mean");  // what such a run's config.yaml says
  ViT rebuilt(run.config.model, shape, gen);
  try {
    load_run_model(rebuilt, run, nullptr);
    FAIL() << "the CLS-token weights loaded into a mean-pooled ViT";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("unexpected: cls"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("set `pooling: cls` under `model:` in runs/old-vit/config.yaml"), std::string::npos) << e.what();
  }
  run.config.model.kind.options.set("pooling", "cls");
  ViT as_saved(run.config.model, shape, gen);
  EXPECT_NO_THROW(load_run_model(as_saved, run, nullptr));
  // A mismatch without the CLS token in the checkpoint carries no such hint.
  run.checkpoint.tensors.erase("model.cls");
  run.config.model.kind.options.set("pooling", "mean");
  ViT mean_pooled(run.config.model, shape, gen);
  try {
    load_run_model(mean_pooled, run, nullptr);
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()).find("pooling: cls"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace attnlab
