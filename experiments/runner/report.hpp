// report.html for a run folder and for a comparison: static HTML that opens from disk with no network.
// Curves are SVG; attention heatmaps are small PNGs embedded as data URIs inside SVG panels whose axes
// carry the probe's tokens (report_svg.hpp); everything else is linked by relative path (config.yaml,
// the metrics files, every captured pattern's .npy and .png).
//
// The reports read only what a run writes to its folder (read_run: config.yaml, metrics.jsonl,
// summary.json, patterns/), so they can be rebuilt at any time: `attnlab report RUN`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace attnlab {

// Writes run_dir/report.html.
void write_run_report(const std::string& run_dir);
// The report's Analysis section from run_dir/analysis/summary.json ("" when the run has none).
std::string analysis_section(const std::string& run_dir);

// A comparison's variants, in order, each with its finished runs (one per seed).
struct ComparisonVariant {
  std::string name;
  std::string overrides;              // as the user wrote them, for the table
  std::vector<std::string> run_dirs;  // relative to the comparison folder
  std::vector<std::uint64_t> seeds;   // of each run
};

// Writes dir/report.html: the summary table (summary_table_html), every variant's curves on shared charts
// (the mean over seeds, and each seed's, picked with check boxes), and the final attention patterns side
// by side for probe 0 of each variant's first seed (the same probe in every variant: probes are drawn
// from the seed), of the variants that have patterns.
void write_comparison_report(const std::string& dir, const std::string& title, const std::string& metric,
                             const std::vector<ComparisonVariant>& variants, const std::string& summary_table_html);
// The comparison report's side-by-side analysis (facts as mean and spread over seeds, key tables
// averaged over seeds), also written as dir/analysis_summary.csv; "" when no run has an analysis.
std::string comparison_analysis_section(const std::string& dir, const std::vector<ComparisonVariant>& variants);

}  // namespace attnlab
