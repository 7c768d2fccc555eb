// The experiment config: one YAML file (plus key=value overrides) describing the task, the model, the
// training and the logging. Every key is described once, in config_schema() (config.cpp): its member, type,
// range, default (the struct's) and doc. Reading, the resolved config.yaml, the key list, the docs table
// of docs/configs.md (a test keeps the two equal) and the comparison of two configs all come from it.
// Errors point at file:line:column, or name the command-line override, and say what to do.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "datasets/source.hpp"
#include "framework/io/component.hpp"
#include "framework/io/config_schema.hpp"
#include "framework/models/model.hpp"
#include "framework/nn/module.hpp"
#include "framework/optim/schedule.hpp"

namespace attnlab {

// task: the task's name and its own keys (datasets/: each task declares them).
struct TaskChoice : ComponentChoice {
  TaskChoice() { name = "reverse"; }
};

// train.optimizer: the optimizer's name and its own keys (framework/optim: each optimizer declares them).
struct OptimizerChoice : ComponentChoice {
  OptimizerChoice() { name = "adamw"; }
  double lr() const;  // its peak learning rate
};

struct TrainConfig {
  std::size_t steps = 1000;
  std::size_t batch_size = 32;
  OptimizerChoice optimizer;
  ScheduleOptions schedule;     // kind, warmup_steps, decay_steps, min_lr (lr comes from the optimizer)
  double grad_clip = 1.0;       // 0: no clipping
  double label_smoothing = 0.0; // the training loss's (evaluation reports the plain cross-entropy)
  std::size_t eval_interval = 100;
  std::size_t eval_batches = 4;          // 0: the whole held-out split (char_text, fashion_mnist)
  std::size_t final_eval_batches = 4;    // the evaluation after the last step; defaults to eval_batches
  bool eval_train = false;               // each evaluation also scores training batches (split "eval_train")
  std::size_t checkpoint_interval = 0;  // also write last.ckpt every this many steps; 0: only at the end
  bool keep_checkpoints = false;        // and keep each as checkpoints/step_N.ckpt
};

struct LogConfig {
  std::string dir = "runs";
  std::size_t interval = 50;
  bool patterns = true;              // capture attention patterns of fixed held-out probes
  std::size_t pattern_interval = 0;  // capture every this many steps; 0: at every evaluation
  std::size_t probes = 4;            // probe examples
};

struct ExperimentConfig {
  std::string name = "experiment";
  std::uint64_t seed = 0;
  TaskChoice task;
  ModelConfig model;
  TrainConfig train;
  LogConfig log;
};

// Every key of the experiment config, described once.
const Schema<ExperimentConfig>& config_schema();

// Reads a config file and applies `overrides` ("model.attention.name=linear"); throws ConfigError.
ExperimentConfig load_config(const std::string& path, const std::vector<std::string>& overrides = {});
// The same from YAML text (tests, checkpoints); `file` names it in messages.
ExperimentConfig parse_config(const std::string& yaml_text, const std::string& file, const std::vector<std::string>& overrides = {});
// The same with overrides whose origins are already described (a comparison's variants): each pair is
// the assignment and how an error names it.
ExperimentConfig parse_config(const std::string& yaml_text, const std::string& file,
                              const std::vector<std::pair<std::string, std::string>>& described_overrides);
// parse_config without the memory check, for the memory check itself (memory_estimate.cpp reads the
// config with one key back at its default to find which key sizes it most).
ExperimentConfig parse_config_unsized(const std::string& yaml_text, const std::string& file);
// The resolved config (every default filled in) as YAML that load_config reads back unchanged.
std::string config_to_yaml(const ExperimentConfig& config);
// Every key, dotted ("train.optimizer.lr"), the chosen components' keys (each task's, model kind's,
// optimizer's) included.
std::vector<std::string> config_keys();
// The tables of docs/configs.md, each after its marker "<!-- config-keys: MARKER -->": one per section
// ("top", "task", "model", "train", "log"), then one per component of each extension point
// ("train.optimizer.adamw", ...), as (marker, markdown table).
std::vector<std::pair<std::string, std::string>> config_doc_tables();
// The keys on which two configs differ; without `include_resumable`, only those a run cannot change when
// it resumes (everything but train.steps, the evaluation and logging cadence, ...).
std::vector<KeyDifference> config_differences(const ExperimentConfig& a, const ExperimentConfig& b, bool include_resumable);

// Derived facts: the layout of examples the model kind reads, the data's shape for it (no files read),
// and the length of the sequences the model's attention sees.
TaskFormat task_format(const ExperimentConfig& config);
DataShape data_shape(const ExperimentConfig& config);
std::size_t attention_length(const ExperimentConfig& config);
// The kernels the model uses, as "name" when one kernel serves every part, else "encoder linformer,
// decoder gated_delta, cross performer" (each part by its name).
std::string kernel_names(const ExperimentConfig& config);
// Whether training captures attention patterns: log.patterns on, and a kernel of the model that forms an
// attention matrix (capabilities.pattern). When it does not, or a run of it has none, why_no_patterns
// says why in a clause (for the report and analyze): log.patterns is off, the kernels form none, or the
// run ended before its first capture step.
bool captures_patterns(const ExperimentConfig& config);
std::string why_no_patterns(const ExperimentConfig& config);
// Both for a report, from a run's config text. The parsed config's checks read the data's shape (SCAN's
// files, perhaps from another folder); without it, model.attention's name and every reason there can be.
std::pair<std::string, std::string> kernels_and_why_no_patterns(const std::string& config_text, const std::string& file);
// The same reason for the run in `run_dir`, from its config.yaml (or why that cannot be read).
std::string why_run_has_no_patterns(const std::string& run_dir);

}  // namespace attnlab
