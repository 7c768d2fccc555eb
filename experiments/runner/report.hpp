// report.html for a run folder and for a comparison: static HTML that opens from disk with no network.
// Curves are SVG drawn here; attention heatmaps are small PNGs embedded as data URIs inside SVG panels
// whose axes carry the probe's tokens; everything else is linked by relative path (config.yaml, the
// metrics files, every captured pattern's .npy and .png).
//
// The reports read only what a run writes to its folder (config.yaml, metrics.jsonl, summary.json,
// patterns/), so they can be rebuilt at any time: `attnlab report RUN_OR_COMPARISON`.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <vector>

namespace attnlab {

// One row of metrics.jsonl with split "train" or "eval" (NaN where the row has no value).
struct MetricRow {
  std::size_t step = 0;
  std::string split;
  double loss = 0, token_accuracy = 0, exact_match = 0, lr = 0, tokens_per_s = 0, elapsed_s = 0;
};

// One capture's per-head metrics ("split": "patterns" rows).
struct HeadMetricRow {
  std::size_t layer = 0, head = 0;
  std::map<std::string, double> values;  // entropy, mean_distance, diagonal, previous_token, anti_diagonal, induction
};
struct PatternCapture {
  std::size_t step = 0;
  std::vector<HeadMetricRow> heads;
};

// What a run folder holds, read back.
struct RunRecord {
  std::string dir;
  std::string config_text;
  std::vector<MetricRow> rows;
  std::vector<PatternCapture> captures;
  std::map<std::string, std::string> summary;  // summary.json's scalar fields (empty while unfinished)
  bool finished() const { return !summary.empty(); }
  // Eval rows only; the value of `metric` (token_accuracy, exact_match or loss) at each.
  std::vector<std::pair<double, double>> eval_curve(const std::string& metric) const;
  std::vector<std::pair<double, double>> train_loss_curve() const;
  // The run's reported figure for `metric`: its "final" row (the final evaluation, possibly over the
  // whole held-out split) when there is one, else the last evaluation; NaN without either.
  double final_value(const std::string& metric) const;
};

// Reads a run folder; throws naming the file when metrics.jsonl or config.yaml is missing or malformed.
RunRecord read_run(const std::string& run_dir);

// Writes run_dir/report.html.
void write_run_report(const std::string& run_dir);

// A comparison's variants, in order, each with its finished runs (one per seed).
struct ComparisonVariant {
  std::string name;
  std::string overrides;  // as the user wrote them, for the table
  std::vector<std::string> run_dirs;  // relative to the comparison folder
};

// Writes dir/report.html: the summary table (summary_md's rows), every variant's curves on shared
// charts (mean over seeds), and each variant's final attention patterns side by side for probe 0 of its
// first seed (the same probe in every variant: probes are drawn from the seed).
void write_comparison_report(const std::string& dir, const std::string& title, const std::string& metric,
                             const std::vector<ComparisonVariant>& variants, const std::string& summary_table_html);

// Writes `text` to a temporary file beside `path` and renames it into place (no half-written file).
void write_file_atomic(const std::string& path, const std::string& text);

}  // namespace attnlab
