// A comparison's summary from its finished runs: a row per variant (and grid point), or with `select:`
// a row per variant at its best value of the selected axis; summary.csv, summary.md, runs.csv,
// summary_all.csv (with a grid: every grid point) and report.html, with a plot of the metric against
// the attention state size when the rows differ in it.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include "experiments/runner/compare_plan.hpp"
#include "experiments/runner/file_fields.hpp"
#include "experiments/runner/metrics_log.hpp"
#include "experiments/runner/report.hpp"
#include "experiments/runner/report_svg.hpp"
#include "framework/io/atomic_file.hpp"

namespace attnlab {
namespace {

struct Stats {
  double mean = NAN, std = NAN;
};
Stats stats(const std::vector<double>& v) {
  Stats s;
  if (v.empty()) return s;
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / static_cast<double>(v.size());
  if (v.size() > 1) {
    double sq = 0;
    for (double x : v) sq += (x - s.mean) * (x - s.mean);
    s.std = std::sqrt(sq / static_cast<double>(v.size() - 1));
  }
  return s;
}

std::string num(double v, const char* format = "%.6g") {
  if (std::isnan(v)) return "";
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, format, v);
  return buffer;
}

// One finished run's figures.
struct RunFigures {
  double final_metric = NAN, best_metric = NAN, final_loss = NAN, by = NAN, seconds = NAN, tokens_per_s = NAN, peak_mb = NAN,
         params = NAN, state = NAN;
};

RunFigures figures(const RunRecord& run, const std::string& metric, const std::string& by) {
  RunFigures f;
  const auto curve = run.eval_curve(metric);
  f.final_metric = run.final_value(metric);
  for (const auto& p : curve)
    f.best_metric = std::isnan(f.best_metric) ? p.second : metric == "loss" ? std::min(f.best_metric, p.second) : std::max(f.best_metric, p.second);
  if (std::isfinite(f.final_metric))  // the final evaluation counts too: best is the best of every evaluation
    f.best_metric = std::isnan(f.best_metric) ? f.final_metric : metric == "loss" ? std::min(f.best_metric, f.final_metric) : std::max(f.best_metric, f.final_metric);
  f.final_loss = run.final_value("loss");
  f.by = run.final_value(by);
  if (run.summary) {
    f.seconds = run.summary->train_seconds, f.tokens_per_s = run.summary->tokens_per_s;
    f.peak_mb = run.summary->peak_rss_mb, f.params = static_cast<double>(run.summary->params);
    f.state = run.summary->state_size;
  }
  return f;
}

// A (variant, grid point)'s runs: the figures of those that finished, over seeds.
struct Cell {
  std::size_t variant = 0;
  std::vector<std::size_t> point;
  std::vector<double> final_metric, best_metric, loss, by, seconds, rate;
  std::vector<double> by_choosing;  // `by` of the finished runs of the seeds that choose (select.seeds)
  bool choosing_ended = true;        // every run of the seeds that choose has finished or diverged
  double peak = NAN, params = NAN, state = NAN;
  std::vector<std::string> run_dirs;  // the finished ones, relative to the comparison folder
  std::vector<std::uint64_t> seeds;   // theirs
  // Each planned run's row of runs.csv: its status and, when finished, its figures.
  struct Row {
    const PlannedRun* run;
    std::string status, figures;
  };
  std::vector<Row> rows;
};

// The cells in plan order (variant, then grid point).
std::vector<Cell> read_cells(const CompareSpec& spec, const std::vector<PlannedRun>& plan, const std::string& by) {
  std::vector<Cell> cells;
  for (const PlannedRun& p : plan) {
    if (cells.empty() || cells.back().variant != p.variant || cells.back().point != p.point) {
      cells.emplace_back();
      cells.back().variant = p.variant, cells.back().point = p.point;
    }
    Cell& c = cells.back();
    c.rows.push_back({&p, run_status(p), ",,,,,,,,"});
    if (spec.choosing_seed(p.seed) && !run_ended(c.rows.back().status)) c.choosing_ended = false;
    if (c.rows.back().status != "finished") continue;
    const RunFigures f = figures(read_run(p.run_dir), spec.metric, by);
    c.run_dirs.push_back(p.rel);
    c.seeds.push_back(p.seed);
    c.final_metric.push_back(f.final_metric), c.best_metric.push_back(f.best_metric), c.loss.push_back(f.final_loss);
    c.by.push_back(f.by), c.seconds.push_back(f.seconds), c.rate.push_back(f.tokens_per_s);
    if (spec.choosing_seed(p.seed)) c.by_choosing.push_back(f.by);
    c.peak = std::isnan(c.peak) ? f.peak_mb : std::max(c.peak, f.peak_mb);
    c.params = f.params, c.state = f.state;
    c.rows.back().figures = "," + num(f.final_metric) + "," + num(f.best_metric) + "," + num(f.final_loss) + "," + num(f.seconds) + "," +
                            num(f.tokens_per_s) + "," + num(f.peak_mb) + "," + num(f.params, "%.0f") + "," + num(f.state, "%.0f");
  }
  return cells;
}

// With `select`, each variant's cell at the best value of the selected axis for every point of the other
// axes, by the choosing seeds' runs (a point none of whose cells finished keeps its first); without,
// every cell.
std::vector<const Cell*> shown_cells(const CompareSpec& spec, const std::vector<Cell>& cells) {
  std::vector<const Cell*> out;
  if (!spec.select) {
    for (const Cell& c : cells) out.push_back(&c);
    return out;
  }
  const std::size_t axis = spec.select->axis;
  const bool lower = spec.select->by == "loss";
  std::map<std::pair<std::size_t, std::vector<std::size_t>>, std::size_t> best;  // (variant, point without the axis) -> index into out
  for (const Cell& c : cells) {
    std::vector<std::size_t> rest = c.point;
    rest[axis] = 0;
    const auto key = std::make_pair(c.variant, rest);
    const auto it = best.find(key);
    if (it == best.end()) {
      best[key] = out.size();
      out.push_back(&c);
      continue;
    }
    const double now = stats(out[it->second]->by_choosing).mean, candidate = stats(c.by_choosing).mean;
    if (!std::isnan(candidate) && (std::isnan(now) || (lower ? candidate < now : candidate > now))) out[it->second] = &c;
  }
  return out;
}

// runs.csv: a row per planned run. A run of a seed that waits for the choice (select.seeds) at a value
// that was not chosen is "not selected".
std::string runs_csv(const CompareSpec& spec, const std::vector<Cell>& cells, const std::vector<const Cell*>& shown) {
  const std::string m = spec.metric;
  std::ostringstream csv;
  csv << "variant";
  for (const GridAxis& a : spec.grid) csv << "," << csv_field(a.label);
  csv << ",seed,run,status,final_" << m << ",best_" << m << ",final_eval_loss,train_seconds,tokens_per_s,peak_rss_mb,params,state_size\n";
  for (const Cell& c : cells) {
    const bool chosen = std::find(shown.begin(), shown.end(), &c) != shown.end();
    for (const Cell::Row& row : c.rows) {
      const PlannedRun& p = *row.run;
      const bool waits = !spec.choosing_seed(p.seed) && row.status == "not started" && !chosen;
      csv << csv_field(spec.variants[p.variant].name);
      for (std::size_t a = 0; a < spec.grid.size(); ++a) csv << "," << csv_field(spec.grid[a].values[p.point[a]]);
      csv << "," << p.seed << "," << p.rel << "," << (waits ? "not selected" : row.status) << row.figures << "\n";
    }
  }
  return csv.str();
}

// The metric against the attention state size, a line per variant through its shown cells, when they
// differ in state size; "" otherwise.
std::string state_plot(const CompareSpec& spec, const std::vector<const Cell*>& shown) {
  std::vector<double> sizes;
  for (const Cell* c : shown)
    if (std::isfinite(c->state) && c->state > 0) sizes.push_back(c->state);
  std::sort(sizes.begin(), sizes.end());
  if (std::unique(sizes.begin(), sizes.end()) - sizes.begin() < 2) return "";
  std::vector<report::Series> series;
  for (std::size_t v = 0; v < spec.variants.size(); ++v) {
    report::Series s{spec.variants[v].name, {}, report::colour(v)};
    s.markers = true;
    for (const Cell* c : shown)
      if (c->variant == v) s.points.emplace_back(c->state, stats(c->final_metric).mean);
    std::sort(s.points.begin(), s.points.end());
    series.push_back(s);
  }
  const std::string m = spec.metric;
  const std::string how = spec.select ? ", each point at its best " + spec.grid[spec.select->axis].label + " (by " + spec.select->by + ")" : "";
  return "<h2>" + report::escape(m) + " against state size</h2><p class=\"note\">Final held-out " + report::escape(m) +
         " (mean over seeds" + report::escape(how) + ") against the numbers the attention layers keep per sequence to continue it "
         "(summed over layers, at the longest sequence; see <code>attnlab list</code>), one line per variant.</p>" +
         report::line_chart(m + " against state size", series, m == "loss" ? report::YScale::log : report::YScale::unit, 640, 340,
                            {"state size (numbers per sequence)", true});
}

// summary.csv (the shown rows) and summary_all.csv (every cell): the same columns.
std::string summary_csv(const CompareSpec& spec, const std::vector<const Cell*>& rows) {
  const std::string m = spec.metric, by = spec.select ? spec.select->by : m;
  std::ostringstream csv;
  csv << "variant";
  for (const GridAxis& a : spec.grid) csv << "," << csv_field(a.label);
  csv << ",seeds,final_" << m << "_mean,final_" << m << "_std,best_" << m << "_mean,best_" << m << "_std,final_eval_loss_mean,train_seconds_mean,"
      << "tokens_per_s_mean,peak_rss_mb_max,params,state_size";
  if (spec.select) csv << ",select_" << by << "_mean";
  csv << ",overrides\n";
  for (const Cell* c : rows) {
    const Stats fm = stats(c->final_metric), bm = stats(c->best_metric);
    csv << csv_field(spec.variants[c->variant].name);
    for (std::size_t a = 0; a < spec.grid.size(); ++a) csv << "," << csv_field(spec.grid[a].values[c->point[a]]);
    csv << "," << c->final_metric.size() << "," << num(fm.mean) << "," << num(fm.std) << "," << num(bm.mean) << "," << num(bm.std) << ","
        << num(stats(c->loss).mean) << "," << num(stats(c->seconds).mean) << "," << num(stats(c->rate).mean) << "," << num(c->peak) << ","
        << num(c->params, "%.0f") << "," << num(c->state, "%.0f");
    if (spec.select) csv << "," << num(stats(c->by).mean);
    csv << "," << csv_field(spec.variants[c->variant].description) << "\n";
  }
  return csv.str();
}

// The sentence above the summary table: base, seeds, metric, grid and selection.
std::string summary_intro(const CompareSpec& spec) {
  std::string intro = "Base: `" + spec.base + "`; seeds: " + std::to_string(spec.seeds.size()) + "; metric: " + spec.metric +
                      " on the held-out split (final: the final evaluation, after the last step; best: the best of every evaluation, those during training and the final one).";
  if (!spec.grid.empty()) {
    intro += " Grid:";
    for (const GridAxis& a : spec.grid) intro += " " + a.key + " (" + std::to_string(a.values.size()) + " values)";
    intro += ", crossed with the variants; every grid point's row is in summary_all.csv.";
  }
  if (spec.select) {
    const std::string& by = spec.select->by;
    intro += " Each row is the variant at the " + spec.grid[spec.select->axis].key + " whose runs' mean final " + by + " is " +
             (by == "loss" ? "lowest" : "highest") + ".";
    if (spec.two_phase())
      intro += " The value is chosen on the first " + std::to_string(spec.select->seeds) + " seed" + (spec.select->seeds == 1 ? "" : "s") +
               "; the other seeds ran at the chosen value only.";
  }
  return intro;
}

}  // namespace

void write_comparison_summary(const CompareSpec& spec, const std::vector<PlannedRun>& plan) {
  const std::string dir = spec.folder(), m = spec.metric, by = spec.select ? spec.select->by : m;
  const bool percent = m != "loss";
  const std::size_t skip = spec.select ? spec.select->axis : SIZE_MAX;
  auto shown_value = [&](double v) { return std::isnan(v) ? std::string("-") : percent ? num(100 * v, "%.2f%%") : num(v, "%.4f"); };
  const std::vector<Cell> cells = read_cells(spec, plan, by);
  const std::vector<const Cell*> shown = shown_cells(spec, cells);

  std::vector<const Cell*> all;
  for (const Cell& c : cells) all.push_back(&c);
  const std::string csv = summary_csv(spec, shown), all_csv = summary_csv(spec, all);

  // summary.md and the report's table: the shown rows.
  std::vector<std::string> columns = {"variant"};
  for (std::size_t a = 0; a < spec.grid.size(); ++a)
    columns.push_back(a == skip ? spec.grid[a].label + " (best of " + std::to_string(spec.grid[a].values.size()) + ")" : spec.grid[a].label);
  for (const std::string& c : std::vector<std::string>{"seeds", "final " + m + " (mean ± std)", "best " + m, "final held-out loss", "train time (s)", "tokens/s",
                               "peak memory (MiB)", "parameters", "state size", "overrides"})
    columns.push_back(c);
  std::ostringstream md, table;
  md << "|";
  table << "<table><tr>";
  for (const std::string& c : columns) md << " " << c << " |", table << "<th>" << report::escape(c) << "</th>";
  md << "\n|";
  for (std::size_t i = 0; i < columns.size(); ++i) md << "---|";
  md << "\n";
  table << "</tr>";
  // The selected axis's cell: the chosen value, "-" before any run that chooses has finished, and how many
  // values have been tried (their choosing runs finished or diverged) while some are still to run: the
  // best so far is not yet the best of all.
  auto chosen_text = [&](const Cell& shown_cell) {
    if (shown_cell.by_choosing.empty()) return std::string("-");
    std::size_t tried = 0;
    for (const Cell& c : cells) {
      bool same = c.variant == shown_cell.variant;
      for (std::size_t a = 0; same && a < c.point.size(); ++a) same = a == skip || c.point[a] == shown_cell.point[a];
      if (same && c.choosing_ended) ++tried;
    }
    const std::size_t values = spec.grid[skip].values.size();
    const std::string& value = spec.grid[skip].values[shown_cell.point[skip]];
    return tried == values ? value : value + " (" + std::to_string(tried) + " of " + std::to_string(values) + " done)";
  };
  std::vector<ComparisonVariant> report_variants;
  for (const Cell* c : shown) {
    const Stats fm = stats(c->final_metric), bm = stats(c->best_metric);
    const CompareVariant& variant = spec.variants[c->variant];
    const std::string spread = std::isnan(fm.std) ? "" : " ± " + (percent ? num(100 * fm.std, "%.2f") : num(fm.std, "%.4f"));
    std::vector<std::string> cells_text;
    for (std::size_t a = 0; a < spec.grid.size(); ++a) cells_text.push_back(a == skip ? chosen_text(*c) : spec.grid[a].values[c->point[a]]);
    for (const std::string& t : std::vector<std::string>{std::to_string(c->final_metric.size()) + "/" + std::to_string(spec.seeds.size()), shown_value(fm.mean) + spread,
                                 shown_value(bm.mean), num(stats(c->loss).mean, "%.4f"), num(stats(c->seconds).mean, "%.1f"),
                                 num(stats(c->rate).mean, "%.0f"), num(c->peak, "%.0f"), num(c->params, "%.0f"), num(c->state, "%.0f")})
      cells_text.push_back(t);
    md << "| " << variant.name;
    table << "<tr><td>" << report::escape(variant.name) << "</td>";
    for (const std::string& t : cells_text) md << " | " << t, table << "<td>" << t << "</td>";
    md << " | `" << variant.description << "` |\n";
    table << "<td style=\"text-align:left\"><code>" << report::escape(variant.description) << "</code></td></tr>";
    const std::string at = spec.point_label(c->point, skip);
    std::string name = variant.name + (at.empty() ? "" : " " + at);
    if (spec.select) name += " (" + spec.grid[skip].label + "=" + chosen_text(*c) + ")";
    report_variants.push_back(ComparisonVariant{name, variant.description, c->run_dirs, c->seeds});
  }
  table << "</table>";
  const std::string intro = summary_intro(spec);
  write_file_atomically(dir + "/summary.csv", csv);
  if (!spec.grid.empty()) write_file_atomically(dir + "/summary_all.csv", all_csv);
  write_file_atomically(dir + "/runs.csv", runs_csv(spec, cells, shown));
  write_file_atomically(dir + "/summary.md", "# " + spec.name + "\n\n" + intro + "\n\n" + md.str());
  write_comparison_report(dir, spec.name, m, report_variants,
                          "<p class=\"note\">" + report::inline_code(intro) + "</p>" + table.str() + state_plot(spec, shown));
}

std::vector<bool> selected_runs(const CompareSpec& spec, const std::vector<PlannedRun>& plan) {
  const std::vector<Cell> cells = read_cells(spec, plan, spec.select ? spec.select->by : spec.metric);
  const std::vector<const Cell*> shown = shown_cells(spec, cells);
  std::vector<bool> selected(plan.size(), false);
  for (const Cell* c : shown)
    if (!spec.select || !c->by_choosing.empty())  // a value is chosen only among finished runs
      for (const Cell::Row& row : c->rows) selected[static_cast<std::size_t>(row.run - plan.data())] = true;
  return selected;
}

}  // namespace attnlab
