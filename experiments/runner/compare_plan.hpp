// A comparison file read and planned (see compare.hpp for its format): the variants, grid axes, seeds and
// overrides, every (variant, grid point, seed) run resolved and validated before anything runs, and the
// summary tables (summary.csv, summary.md, runs.csv; with a grid, summary_all.csv) and report written from
// the finished runs (compare_summary.cpp).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <yaml-cpp/yaml.h>

namespace attnlab {

struct CompareVariant {
  std::string name;
  // key=value assignments, each with how an error names it (the comparison file's position of the key).
  std::vector<std::pair<std::string, std::string>> overrides;
  std::string description;  // the overrides as one line, for tables
  YAML::Mark mark;          // where its name is written, for errors
};

// One axis of the grid: a config key and the values it takes, crossed with the variants and the seeds.
struct GridAxis {
  std::string key;                  // dotted config key, e.g. train.optimizer.lr
  std::string label;                // its last component (the whole key when two axes share one), for folders and tables
  std::vector<std::string> values;  // each as written (one line of YAML), e.g. 0.003
  std::vector<std::string> origins; // where each value is written, for errors
};

// `select: {over: KEY, by: METRIC, seeds: N}`: each variant reported at the value of the grid axis KEY
// whose runs score best on METRIC (mean over the first N seeds, all by default, of the final value;
// highest, or lowest for loss). With N below the number of seeds the choice is made on those N first and
// the other seeds run only at the chosen value (tune on some seeds, report over all).
struct CompareSelect {
  std::size_t axis = 0;   // into CompareSpec::grid
  std::string by;
  std::size_t seeds = 0;  // the seeds that choose: the first this many of CompareSpec::seeds
};

struct CompareSpec {
  std::string name, base, metric = "token_accuracy", dir = "runs";
  std::vector<std::uint64_t> seeds;
  bool analyze = false;  // run `attnlab analyze` on every finished run
  std::vector<std::pair<std::string, std::string>> common;  // `set`, described as the variants' overrides
  std::vector<CompareVariant> variants;
  std::vector<GridAxis> grid;            // empty: one point, the base as the variant leaves it
  std::optional<CompareSelect> select;   // only with a grid
  std::string file, text;
  std::string folder() const;  // dir/name
  // The grid's points, each as one value index per axis, the last axis varying fastest; {{}} without a grid.
  std::vector<std::vector<std::size_t>> points() const;
  // A point's folder under runs/<variant>/ ("d_model-64/lr-0.003"; "" without a grid) and its description
  // ("d_model=64 lr=0.003"); `skip` leaves one axis out (the selected one).
  std::string point_folder(const std::vector<std::size_t>& point) const;
  std::string point_label(const std::vector<std::size_t>& point, std::size_t skip = SIZE_MAX) const;
  // Whether a run of this seed chooses the selected value (always true without `select`).
  bool choosing_seed(std::uint64_t seed) const;
  // Whether runs of the other seeds wait for the choice (select.seeds below the number of seeds).
  bool two_phase() const { return select && select->seeds < seeds.size(); }
};

// Reads a comparison file; errors are ConfigErrors at its file:line:column.
CompareSpec read_compare_spec(const std::string& path);

// One (variant, grid point, seed) run.
struct PlannedRun {
  std::size_t variant = 0;
  std::vector<std::size_t> point;  // one value index per grid axis
  std::uint64_t seed = 0;
  std::string rel;          // runs/<variant>[/<point folder>]/seed_<s>, relative to the comparison folder
  std::string run_dir;      // the same under the comparison folder
  std::string config_file;  // runs/<variant>/seed_<s>.yaml
  std::string config_yaml;  // its resolved text
  bool moved = false;       // config_file names another log.dir: the comparison folder was moved since
  std::string log_file() const { return config_file.substr(0, config_file.size() - 5) + ".log"; }
};

// Every (variant, grid point, seed) run with its resolved config, validated, `extra` (command-line overrides) applied
// last; errors point at the comparison file. With `against_existing`, a run whose folder already holds a
// different config is an error too.
std::vector<PlannedRun> plan_comparison(const CompareSpec& spec, const std::vector<std::string>& extra, bool against_existing);

// A run's state as the summary counts it: "finished", "diverged", "unfinished" or "not started".
std::string run_status(const PlannedRun& run);
// With `select`, for every planned run whether its (variant, grid point) is the one its variant is
// reported at (the value of the selected axis whose choosing seeds' finished runs score best); without,
// every run. compare_summary.cpp, which reads the runs.
std::vector<bool> selected_runs(const CompareSpec& spec, const std::vector<PlannedRun>& plan);
// Whether a run of this status has ended for good: finished or diverged (a diverged run diverges again
// the same way); the comparison (re)starts the others.
bool run_ended(const std::string& status);
bool needs_running(const PlannedRun& run);  // !run_ended(run_status(run))

// summary.csv, summary.md, runs.csv (with a grid, summary_all.csv) and report.html from the runs that
// finished (compare_summary.cpp).
void write_comparison_summary(const CompareSpec& spec, const std::vector<PlannedRun>& plan);

}  // namespace attnlab
