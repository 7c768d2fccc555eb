// What `attnlab analyze` found in a run (experiments/analysis/), as tables and facts, and its file:
// analysis/summary.json holds every table and fact; each table is also written as CSV, .npy and a PNG
// heatmap beside it. The analysis writes it; the run's report and comparisons read it.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace attnlab {

// One result laid out as a grid (layer x head, layer x position, ...), the unit every part writes.
struct AnalysisTable {
  std::string name;                  // file stem under analysis/ ("ablation_zero_loss")
  std::string section;               // "ablation", "patching", ...
  std::string title;                 // what a value is
  std::string row_axis, col_axis;    // "layer", "head"
  std::vector<std::string> rows, cols;
  std::vector<double> values;        // rows x cols, row-major; NaN where undefined
  bool signed_values = true;         // drawn with a diverging scale around 0
  bool compared = false;             // a headline table, set side by side (mean over seeds) in a comparison's report
  // How many examples its numbers are over: unset, the analysis's (`--examples`, filled in when the part
  // ends); a part that works on others says so (patching: its pairs; 0: none of the analysis's, e.g. the
  // weights or the patterns the run captured while it trained).
  std::optional<std::size_t> examples;
  // A 95% bootstrap interval per value over the examples (percentiles of the resampled statistic); empty
  // when the table has none.
  std::vector<double> low, high;
  double at(std::size_t r, std::size_t c) const { return values[r * cols.size() + c]; }
};

// What the analysis has found, in the order it was found.
struct AnalysisResult {
  std::vector<AnalysisTable> tables;
  std::map<std::string, double> facts;    // headline numbers ("ablation.baseline.loss", "detectors.induction_head.max", ...)
  std::vector<std::string> notes;         // what was skipped and why ("attribution: a post-norm model has no final norm")
  std::vector<std::string> images;        // extra PNGs under analysis/ (rollout maps)
  std::map<std::string, std::string> titles;  // each section's heading in the report ("ablation" -> "Ablation: ...")
  // The checkpoint analysed ("best.ckpt") and the step it held, and the step last.ckpt held then (the run's
  // patterns and metrics went that far); empty in summaries from before they were kept.
  std::string checkpoint;
  std::optional<std::size_t> step, run_step;
  bool report_written = false;  // whether the run's report.html was written after the analysis (not kept in summary.json)
  void add(AnalysisTable table) { tables.push_back(std::move(table)); }
};

// Writes every table's CSV, .npy and PNG, and summary.json, into `dir`.
void write_analysis(const std::string& dir, const AnalysisResult& result);
// RUN/analysis/summary.json; throws std::runtime_error naming the file when absent or malformed.
AnalysisResult read_analysis(const std::string& run_dir);
bool has_analysis(const std::string& run_dir);
// Why the run's analysis `r` is out of date ("best.ckpt now holds step 400, not step 155", "the run has
// trained on since (...)"), or "" when it is not (or, from before the steps were kept, cannot tell).
std::string analysis_out_of_date(const std::string& run_dir, const AnalysisResult& r);

}  // namespace attnlab
