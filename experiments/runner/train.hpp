// `attnlab train`: builds the data, model and optimizer a config describes, trains, evaluates on the
// held-out split, and writes a run folder (run_folder.hpp): config.yaml (resolved), metrics.jsonl and
// metrics.csv (metrics_log.hpp), patterns/, last.ckpt (every train.checkpoint_interval steps, at the end,
// on Ctrl-C and on SIGTERM) and best.ckpt (lowest held-out loss), then summary.json and report.html. A run
// resumes exactly from last.ckpt: the model, optimizer and every random generator come back, so 100 + 100
// steps give the same parameters and metrics as 200.
#pragma once

#include <string>
#include <vector>

#include "experiments/runner/config.hpp"

namespace attnlab {

struct TrainResult {
  std::string run_dir;
  double final_train_loss = 0;
  double final_eval_loss = 0;
  double final_token_accuracy = 0;
  double final_exact_match = 0;
  std::size_t final_scored_tokens = 0;  // tokens (or images) the final evaluation scored
  int stop_signal = 0;                  // SIGINT, SIGTERM or SIGUSR1 when a signal stopped it (after writing last.ckpt)
  bool diverged = false;                // stopped at a non-finite loss or gradient (last.ckpt: the state before it)
  // The process exit status: 0 finished, 1 diverged, 130 (SIGINT), 143 (SIGTERM) or 138 (SIGUSR1) stopped.
  int exit_status() const { return stop_signal ? 128 + stop_signal : diverged ? 1 : 0; }
};

// Trains a new run; progress lines go to stdout. `threads` sizes the thread pool.
TrainResult train_experiment(const ExperimentConfig& config, int threads);
// Continues the run in `run_dir` from its last.ckpt, with `overrides` on its config.yaml (train.steps=N
// to extend it; keys that shape the model or the data cannot change).
TrainResult resume_experiment(const std::string& run_dir, const std::vector<std::string>& overrides, int threads);

}  // namespace attnlab
