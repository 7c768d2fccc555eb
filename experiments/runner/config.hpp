// The experiment config: one YAML file (plus key=value overrides) describing the task, the model, the
// training and the logging, read into structs with every field's default here. Errors point at
// file:line:column and say what to do; docs/configs.md documents every key (a test keeps the two in step).
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "datasets/images.hpp"
#include "datasets/toy_tasks.hpp"
#include "framework/models/text_models.hpp"
#include "framework/optim/schedule.hpp"

namespace attnlab {

struct TaskConfig {
  std::string name = "reverse";  // a toy task (copy, reverse, sort, mqar, induction, majority), char_text,
                                 // or an image task (quadrants, fashion_mnist)
  data::ToyTaskOptions toy;      // length, symbols, pairs, queries, held_out_fraction
  std::string path;              // char_text: the text file
  std::size_t block_size = 64;   // char_text: tokens per training window
  double train_fraction = 0.9;   // char_text
  std::size_t image_size = 16;   // quadrants: images are image_size x image_size
  data::ImageAugment augment;    // fashion_mnist: flip, shift of training images
};

struct ModelConfig {
  std::string kind = "token_tagger";  // causal_lm | token_tagger | sequence_classifier | vit
  std::size_t patch_size = 4;         // vit
  PositionalKind positional = PositionalKind::learned;
  Pooling pooling = Pooling::mean;  // sequence_classifier
  std::string init_from;            // a weights folder (attnlab export) to start from
  bool tie_embeddings = false;      // causal_lm: the output layer's weight is the token embedding
  EncoderConfig encoder;            // sizes, norm, dropout, activation, attention name and options
};

struct OptimizerConfig {
  std::string name = "adamw";  // adamw | adam | sgd
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double weight_decay = 0.01;
  std::set<ParamKind> decay_kinds = {ParamKind::weight};  // adamw: the kinds of parameter that decay
  double momentum = 0.0;  // sgd
};

struct TrainConfig {
  std::size_t steps = 1000;
  std::size_t batch_size = 32;
  OptimizerConfig optimizer;
  ScheduleOptions schedule;     // kind, warmup_steps, decay_steps, min_lr (lr comes from the optimizer)
  double grad_clip = 1.0;       // 0: no clipping
  std::size_t eval_interval = 100;
  std::size_t eval_batches = 4;          // 0: the whole held-out split (char_text, fashion_mnist)
  std::size_t final_eval_batches = 4;    // the evaluation after the last step; defaults to eval_batches
  std::size_t checkpoint_interval = 0;  // also write last.ckpt every this many steps; 0: only at the end
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
  TaskConfig task;
  ModelConfig model;
  TrainConfig train;
  LogConfig log;
  std::string file;  // where it was read from (for messages)
};

// Reads a config file and applies `overrides` ("model.attention.name=linear"); throws ConfigError.
ExperimentConfig load_config(const std::string& path, const std::vector<std::string>& overrides = {});
// The same from YAML text (tests); `file` names it in messages.
ExperimentConfig parse_config(const std::string& yaml_text, const std::string& file,
                              const std::vector<std::string>& overrides = {});
// The resolved config (every default filled in) as YAML that load_config reads back unchanged.
std::string config_to_yaml(const ExperimentConfig& config);
// Every key the config reads, dotted ("train.optimizer.lr"), for docs/configs.md's test.
std::vector<std::string> config_keys();

bool is_image_task(const std::string& name);

// The layout of examples the model kind needs.
data::TaskFormat task_format(const ModelConfig& model);

// The CausalLM a causal_lm config describes, for a vocabulary of `vocab_size` tokens.
CausalLMConfig causal_lm_config(const ModelConfig& model, std::size_t vocab_size);

}  // namespace attnlab
