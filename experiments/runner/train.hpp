// `attnlab train`: builds the task, model and optimizer a config describes, trains, evaluates on the
// held-out split, and writes a run folder: config.yaml (resolved), metrics.jsonl, metrics.csv.
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
};

// Trains; progress lines go to stdout. `threads` sizes the thread pool.
TrainResult train_experiment(const ExperimentConfig& config, int threads);

}  // namespace attnlab
