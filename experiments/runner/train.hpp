// `attnlab train`: builds the task, model and optimizer a config describes, trains, evaluates on the
// held-out split, and writes a run folder: config.yaml (resolved), metrics.jsonl, metrics.csv, and
// checkpoints last.ckpt (every train.checkpoint_interval steps, at the end, and on Ctrl-C) and best.ckpt
// (lowest held-out loss). A run resumes exactly from last.ckpt: the model, optimizer and every random
// generator come back, so 100 + 100 steps give the same parameters and metrics as 200.
#pragma once

#include <string>

#include "experiments/runner/config.hpp"

namespace attnlab {

struct TrainResult {
  std::string run_dir;
  double final_train_loss = 0;
  double final_eval_loss = 0;
  double final_token_accuracy = 0;
  double final_exact_match = 0;
  std::size_t final_scored_tokens = 0;  // tokens (or images) the final evaluation scored
  bool interrupted = false;  // stopped by Ctrl-C after writing last.ckpt
};

// Trains; progress lines go to stdout. `threads` sizes the thread pool. With `resume_dir`, continues the
// run in that folder from its last.ckpt (`config` is then the run's config.yaml, plus any overrides).
TrainResult train_experiment(const ExperimentConfig& config, int threads, const std::string& resume_dir = "");

// `attnlab eval RUN`: the held-out loss and metrics of a run's checkpoint ("best" or "last") over
// train.final_eval_batches (the whole split when 0), printed as one JSON line. Returns 0.
int evaluate_run(const std::string& run_dir, const std::string& checkpoint, int threads);

struct SampleOptions {
  std::string prompt;  // text for char_text runs; space-separated token ids otherwise
  std::size_t tokens = 200;
  double temperature = 1.0;
  std::size_t top_k = 0;
  std::uint64_t seed = 0;
  std::string checkpoint = "best";
};
// `attnlab export RUN DIR`: the weights of a run's checkpoint as .npy files and index.json. Returns 0.
int export_run(const std::string& run_dir, const std::string& checkpoint, const std::string& out_dir);

// `attnlab sample RUN`: continues a prompt with a causal LM run's model and prints the continuation.
int sample_run(const std::string& run_dir, const SampleOptions& options, int threads);

}  // namespace attnlab
