// A comparison file read and planned (see compare.hpp for its format): the variants, seeds and overrides,
// every (variant, seed) run resolved and validated before anything runs, and the summary tables
// (summary.csv, summary.md, runs.csv) and report written from the finished runs.
#pragma once

#include <cstdint>
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

struct CompareSpec {
  std::string name, base, metric = "token_accuracy", dir = "runs";
  std::vector<std::uint64_t> seeds;
  bool analyze = false;  // run `attnlab analyze` on every finished run
  std::vector<std::pair<std::string, std::string>> common;  // `set`, described as the variants' overrides
  std::vector<CompareVariant> variants;
  std::string file, text;
  std::string folder() const;  // dir/name
};

// Reads a comparison file; errors are ConfigErrors at its file:line:column.
CompareSpec read_compare_spec(const std::string& path);

// One (variant, seed) run.
struct PlannedRun {
  std::size_t variant = 0;
  std::uint64_t seed = 0;
  std::string rel;          // runs/<variant>/seed_<s>, relative to the comparison folder
  std::string run_dir;      // the same under the comparison folder
  std::string config_file;  // runs/<variant>/seed_<s>.yaml
  std::string config_yaml;  // its resolved text
  std::string log_file() const { return config_file.substr(0, config_file.size() - 5) + ".log"; }
};

// Every (variant, seed) run with its resolved config, validated, `extra` (command-line overrides) applied
// last; errors point at the comparison file. With `against_existing`, a run whose folder already holds a
// different config is an error too.
std::vector<PlannedRun> plan_comparison(const CompareSpec& spec, const std::vector<std::string>& extra, bool against_existing);

// A run's state as the summary counts it: "finished", "diverged", "unfinished" or "not started".
std::string run_status(const PlannedRun& run);
// Whether the comparison should (re)start it: neither finished nor diverged (a diverged run diverges
// again the same way).
bool needs_running(const PlannedRun& run);

// summary.csv, summary.md, runs.csv and report.html from the runs that finished.
void write_comparison_summary(const CompareSpec& spec, const std::vector<PlannedRun>& plan);

}  // namespace attnlab
