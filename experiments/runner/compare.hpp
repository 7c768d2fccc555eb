// `attnlab compare CONFIG`: one base experiment, a list of variations and a list of seeds, every
// (variant, seed) trained as its own run, then a summary and a report side by side.
//
//   name: compare_reverse          # the comparison folder: <dir>/<name>
//   base: reverse.yaml             # an experiment config, relative to this file
//   seeds: [0, 1, 2]
//   metric: exact_match            # token_accuracy (default), exact_match or loss (lower is better)
//   set: {train.steps: 1500}       # overrides for every variant (optional)
//   variants:                      # name: overrides (dotted keys, any YAML value); {} is the base as it is
//     softmax: {}
//     linear: {model.attention.name: linear}
//     sparse: {model.attention: {name: sparse, options: {window: 4, stride: 4}}}
//   dir: runs                      # where the comparison folder goes (default runs)
//   analyze: true                  # also run `attnlab analyze` on every finished run (default false);
//                                  # the summary and report then set each variant's analysis side by side
//   grid:                          # axes crossed with the variants and seeds (optional): a run per
//     model.d_model: [64, 128]     # (variant, grid point, seed), in runs/<variant>/d_model-64/lr-0.001/seed_<s>
//     train.optimizer.lr: [1e-3, 3e-3]
//   select: {over: train.optimizer.lr, by: token_accuracy}   # report each variant (at each point of the
//                                  # other axes) at its best value of one axis: mean final `by` over seeds;
//                                  # `seeds: 1` chooses on the first seed, and the others run only at the
//                                  # chosen value
//
// The folder holds runs/<variant>/seed_<s>/ (ordinary run folders, each with its report.html; with a grid,
// one folder level per axis between),
// runs/<variant>/seed_<s>.yaml (the resolved config each was started from) and .log (its output),
// summary.csv, summary.md, runs.csv and report.html (with a grid also summary_all.csv, a row per grid
// point; when the rows differ in attention state size the report plots the metric against it). Every variant is resolved and validated before
// anything runs; errors point at the comparison file. Runs are child processes of this binary, `jobs` at
// a time with `threads` threads each. Running the same command again resumes: finished runs (those with
// summary.json) are kept, interrupted ones continue from their last.ckpt, and a run whose resolved config
// changed is refused rather than mixed in.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace attnlab {

struct CompareOptions {
  std::vector<std::string> overrides;  // key=value for every run, after the file's own
  int jobs = 1;                        // runs at a time
  int threads = 0;                     // per run; 0: the cores divided among the jobs
};

// The program a comparison starts its runs with: this one (/proc/self/exe) unless set; the Python module
// sets its build's attnlab, an interpreter not being one.
void set_run_program(const std::string& path);

// Returns the exit status: 0 when every run finished, 1 when some failed (the others are summarised),
// 130 when interrupted (finished runs are kept; the same command resumes). Config errors throw ConfigError.
int run_comparison(const std::string& config_path, const CompareOptions& options);

// Reads a comparison file and resolves every run's config without running or writing anything, as
// run_comparison does first; throws ConfigError. Returns the number of runs.
std::size_t check_comparison(const std::string& config_path);

}  // namespace attnlab
