// The files that record a run: metrics.jsonl (one JSON object per line: training rows, evaluations, the
// final evaluation, pattern captures), metrics.csv (the same training and evaluation rows as a table) and
// summary.json (a finished run's figures). Each row type has its writer and its reader here, side by side;
// report and compare read runs only through read_run. JSON goes through nlohmann-json: a non-finite
// value (a diverged run's loss) is written as null and read back as NaN.
#pragma once

#include <cstddef>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "experiments/runner/patterns.hpp"

namespace attnlab {

// A row of split "train" (the mean loss since the previous row), "eval" (a periodic evaluation),
// "final" (the evaluation after the last step, the figure to report) or "diverged" (the step whose loss
// or gradient was not finite). NaN where the row has no value.
struct MetricRow {
  std::size_t step = 0;
  std::string split;
  double loss, token_accuracy, exact_match, lr, tokens_per_s, elapsed_s;
  MetricRow();
  // The numeric columns by name, in file order (metrics.csv's header reads this list).
  static const std::vector<std::pair<const char*, double MetricRow::*>>& columns();
  double value(const std::string& column) const;  // "loss", "token_accuracy", ... (NaN for an unknown one)
};

// One capture's per-head metrics (a row of split "patterns"); `part` names the attention part of an
// encoder-decoder ("encoder", "decoder", "cross"), empty for a single-stack model.
struct HeadMetricRow {
  std::string part;
  std::size_t layer = 0, head = 0;
  HeadMetrics metrics;
  std::string name() const;  // "L1H2", "cross L1H2"
};
struct PatternCapture {
  std::size_t step = 0;
  std::vector<HeadMetricRow> heads;
};

// summary.json: written when a run ends (status "finished", or "diverged" when it stopped at a non-
// finite loss); a run without it is unfinished.
struct RunSummary {
  std::string name, status = "finished";
  std::size_t steps = 0, params = 0, final_scored_tokens = 0;
  double train_seconds = 0, tokens_per_s = 0, peak_rss_mb = 0;
  double state_size = 0;  // numbers the attention layers keep per sequence (memory_estimate.hpp's state_size)
  // What decides the bits: results repeat bit for bit with the same kernels, vendor and compiler.
  std::string openblas_core;  // the BLAS kernels that did the products ("SkylakeX")
  std::string cpu_vendor;     // cpu_vendor() ("GenuineIntel"): oneDNN picks its kernels by it
  std::string compiler;       // compiler_name() ("GCC 12.2.0"): the build's part in the bits
  double final_eval_loss, final_token_accuracy, final_exact_match, best_eval_loss;
  // A data-parallel run (processes > 1, written only then, as "data_parallel"): the bytes each step's
  // allreduce sums, its calls per step, its mean time per step in the last session, and its share of
  // that session's training time.
  std::size_t processes = 1, allreduce_bytes = 0, allreduce_calls_per_step = 0;
  double allreduce_ms_per_step, allreduce_share;
  RunSummary();
};
void write_summary(const std::string& run_dir, const RunSummary& summary);
// Throws naming the file when it is not a summary.
std::optional<RunSummary> read_summary(const std::string& run_dir);

// What a resume from `step` will do to the run's metrics logs, checked before anything of the run is
// changed: a line that is no row (but a last line cut short) is refused with its file and line.
void check_resumable_metrics(const std::string& run_dir, std::size_t step, bool evaluation_owed);

// Appends rows to a run's metrics.jsonl and metrics.csv, flushed after every row.
class MetricsLog {
 public:
  // Opens the run's log. `after_step`: on resuming, rows past the checkpoint's step (logged after it by
  // a run that was then killed) are dropped first, so that the log stays one continuous record; and with
  // `evaluation_owed` (TrainState), the step's own rows other than its training row, which the resume
  // writes again.
  MetricsLog(const std::string& run_dir, std::optional<std::size_t> after_step, bool evaluation_owed = false);
  void write(const MetricRow& row);
  void write(const PatternCapture& capture);

 private:
  std::ofstream jsonl_, csv_;
};

// What a run folder holds, read back.
struct RunRecord {
  std::string dir;
  std::string config_text;
  std::vector<MetricRow> rows;
  std::vector<PatternCapture> captures;
  std::optional<RunSummary> summary;
  bool finished() const { return summary && summary->status == "finished"; }
  // Rows of one split; the (step, value of `column`) pairs of the eval rows.
  std::vector<std::pair<double, double>> eval_curve(const std::string& column) const;
  std::vector<std::pair<double, double>> train_loss_curve() const;
  // The run's reported figure for `column`: its "final" row when there is one, else the last evaluation;
  // NaN without either.
  double final_value(const std::string& column) const;
};

// Reads a run folder; throws naming the file (and line) when metrics.jsonl or config.yaml is missing or
// malformed.
RunRecord read_run(const std::string& run_dir);

}  // namespace attnlab
