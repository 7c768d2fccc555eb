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
  bool interrupted = false;  // stopped by Ctrl-C after writing last.ckpt
};

// Trains; progress lines go to stdout. `threads` sizes the thread pool. With `resume_dir`, continues the
// run in that folder from its last.ckpt (`config` is then the run's config.yaml, plus any overrides).
TrainResult train_experiment(const ExperimentConfig& config, int threads, const std::string& resume_dir = "");

}  // namespace attnlab
