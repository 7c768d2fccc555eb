#include "experiments/runner/compare_plan.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <filesystem>
#include <set>
#include <sstream>

#include "experiments/runner/config.hpp"
#include "experiments/runner/file_fields.hpp"
#include "experiments/runner/metrics_log.hpp"
#include "experiments/runner/report.hpp"
#include "experiments/runner/run_folder.hpp"
#include "framework/io/atomic_file.hpp"
#include "framework/io/config_node.hpp"

namespace attnlab {
namespace {

namespace fs = std::filesystem;

// A YAML value on one line (flow style), for key=value and for tables.
std::string flow(const YAML::Node& value) {
  YAML::Emitter out;
  out.SetMapFormat(YAML::Flow);
  out.SetSeqFormat(YAML::Flow);
  out << value;
  return out.c_str();
}

// Keys the comparison sets for each of its runs: a run's seed, its folder's name and the folder it is in.
bool set_per_run(const std::string& key) { return key == "seed" || key == "name" || key == "log.dir" || key == "log"; }

// A mapping of dotted keys to values, as overrides described by their position in the comparison file.
std::vector<std::pair<std::string, std::string>> read_overrides(const ConfigNode& node, const std::string& key, const std::string& who) {
  const YAML::Node map = node.node()[key];
  std::vector<std::pair<std::string, std::string>> out;
  if (!map.IsDefined() || map.IsNull()) return out;
  if (!map.IsMap()) node.fail(key, who + " must be a mapping of config keys to values, e.g. {model.attention.name: linear}");
  for (const auto& kv : map) {
    if (!kv.first.IsScalar()) node.fail_at(kv.first, who + ": a key must be a dotted config key");
    const std::string name = kv.first.Scalar();
    if (set_per_run(name)) {
      node.fail_at(kv.first, who + ": '" + name + "' is set by the comparison for each run (use seeds: and name:)");
    }
    const YAML::Mark m = kv.first.Mark();
    const std::string origin = node.source().file() + ":" + std::to_string(m.line + 1) + ":" + std::to_string(m.column + 1) + ": " +
                               who + " sets `" + name + ": " + flow(kv.second) + "`";
    out.emplace_back(name + "=" + flow(kv.second), origin);
  }
  return out;
}

std::vector<std::uint64_t> read_seeds(const ConfigNode& node) {
  const YAML::Node seeds = node.node()["seeds"];
  if (!seeds.IsDefined() || seeds.IsNull()) return {0};
  if (!seeds.IsSequence() || seeds.size() == 0) node.fail("seeds", "'seeds' must be a non-empty list, e.g. seeds: [0, 1, 2]");
  std::vector<std::uint64_t> out;
  for (const YAML::Node& s : seeds) {
    std::int64_t seed = -1;
    try {
      seed = s.as<std::int64_t>();
    } catch (const YAML::Exception&) {
    }
    if (seed < 0) node.fail_at(s, "a seed must be a non-negative integer");
    if (std::count(out.begin(), out.end(), static_cast<std::uint64_t>(seed))) node.fail_at(s, "seed " + std::to_string(seed) + " is listed twice");
    out.push_back(static_cast<std::uint64_t>(seed));
  }
  return out;
}

void read_variants(const ConfigNode& node, CompareSpec& spec) {
  const YAML::Node variants = node.node()["variants"];
  if (!variants.IsDefined() || !variants.IsMap() || variants.size() == 0) {
    if (variants.IsDefined() && !variants.IsNull() && !variants.IsMap()) {
      node.fail("variants", "'variants' must be a mapping of names to overrides, e.g. linear: {model.attention.name: linear}");
    }
    node.fail("variants", "'variants' must list at least one variant, e.g. variants: {softmax: {}, linear: {model.attention.name: linear}}");
  }
  std::set<std::string> names;
  const ConfigNode map(variants, "variants", node.source_ptr());
  for (const auto& kv : variants) {
    CompareVariant v;
    v.name = kv.first.Scalar();
    v.mark = kv.first.Mark();
    const std::string problem = folder_name_problem(v.name);
    if (!problem.empty()) node.fail_at(kv.first, "variant name '" + v.name + "' names a folder: " + problem);
    if (!names.insert(v.name).second) node.fail_at(kv.first, "variant '" + v.name + "' is listed twice");
    v.overrides = read_overrides(map, v.name, "variant '" + v.name + "'");
    for (const auto& [assignment, origin] : v.overrides) v.description += (v.description.empty() ? "" : " ") + assignment;
    if (v.description.empty()) v.description = "(base)";
    spec.variants.push_back(v);
  }
}

// The base config's path, resolved against the comparison file's folder.
std::string base_path(const CompareSpec& spec) { return (fs::path(spec.file).parent_path() / spec.base).string(); }

}  // namespace

std::string CompareSpec::folder() const { return (fs::path(dir) / name).string(); }

CompareSpec read_compare_spec(const std::string& path) {
  CompareSpec spec;
  spec.file = path;
  spec.text = read_config_text(path);
  const YAML::Node root = read_config_document(spec.text, path);
  ConfigNode node(root, "", std::make_shared<ConfigSource>(path, spec.text));
  spec.name = node.get<std::string>("name", "comparison");
  const std::string problem = folder_name_problem(spec.name);
  if (!problem.empty()) node.fail("name", "'name' names the comparison's folder: " + problem);
  spec.base = node.get<std::string>("base", "");
  if (spec.base.empty()) node.fail("base", "'base' must name the experiment config the variants start from, e.g. base: reverse.yaml");
  if (!fs::is_regular_file(base_path(spec))) {
    node.fail("base", "base '" + spec.base + "' is not a file (looked for " + base_path(spec) + ")");
  }
  spec.metric = node.get_choice("metric", "token_accuracy", {"token_accuracy", "exact_match", "loss"});
  spec.dir = node.get<std::string>("dir", "runs");
  spec.analyze = node.get<bool>("analyze", false);
  node.allow("seeds");
  node.allow("set");
  node.allow("variants");
  spec.seeds = read_seeds(node);
  spec.common = read_overrides(node, "set", "'set'");
  read_variants(node, spec);
  node.finish();
  return spec;
}

// A run the comparison already holds must be the one it plans: compared key by key (a key a newer build
// added, at its default, is no difference), with the keys that differ named.
void check_same_run(const CompareSpec& spec, const CompareVariant& variant, const PlannedRun& p, const ExperimentConfig& planned) {
  std::string differences;
  try {
    const ExperimentConfig existing = parse_config(read_file(p.config_file, "run's config"), p.config_file);
    for (const KeyDifference& d : config_differences(existing, planned, true))
      differences += (differences.empty() ? "" : ", ") + d.key + " " + d.first + " there, " + d.second + " now";
  } catch (const ConfigError& e) {
    differences = std::string("it no longer reads: ") + e.what();
  }
  if (differences.empty()) return;
  throw ConfigError(spec.file, variant.mark.line + 1, variant.mark.column + 1,
                    "variant '" + variant.name + "': " + spec.folder() + " already holds this run with a different config (" + p.config_file +
                        ": " + differences + "); set a new name: for the comparison, or remove the folder to start again");
}

std::vector<PlannedRun> plan_comparison(const CompareSpec& spec, const std::vector<std::string>& extra, bool against_existing) {
  const std::string base = base_path(spec), base_text = read_config_text(base), dir = spec.folder();
  std::vector<PlannedRun> plan;
  for (std::size_t v = 0; v < spec.variants.size(); ++v) {
    const CompareVariant& variant = spec.variants[v];
    std::vector<std::pair<std::string, std::string>> overrides = spec.common;
    overrides.insert(overrides.end(), variant.overrides.begin(), variant.overrides.end());
    for (const std::string& e : extra) {
      if (set_per_run(e.substr(0, e.find('=')))) {
        throw ConfigError::at_origin("command-line override `" + e + "`",
                                     "the comparison sets seed, name and log.dir for each run; choose the seeds with seeds: and the "
                                     "folder with name: and dir: in " + spec.file + " (its runs go to " + dir + ")");
      }
      overrides.emplace_back(e, "");
    }
    const YAML::Mark mark = variant.mark;
    ExperimentConfig config;
    try {
      config = parse_config(base_text, base, overrides);
    } catch (const ConfigError& e) {
      if (!e.origin().empty()) throw;  // already names the comparison file's line, or the command line
      throw ConfigError(spec.file, mark.line + 1, mark.column + 1, "variant '" + variant.name + "' (" + variant.description + "): " + e.what());
    }
    for (std::uint64_t seed : spec.seeds) {
      PlannedRun p;
      p.variant = v;
      p.seed = seed;
      p.rel = "runs/" + variant.name + "/seed_" + std::to_string(seed);
      p.run_dir = dir + "/" + p.rel;
      p.config_file = p.run_dir + ".yaml";
      config.seed = seed;
      config.name = "seed_" + std::to_string(seed);
      config.log.dir = dir + "/runs/" + variant.name;
      p.config_yaml = config_to_yaml(config);
      if (against_existing && fs::exists(p.config_file)) check_same_run(spec, variant, p, config);
      plan.push_back(p);
    }
  }
  return plan;
}

std::string run_status(const PlannedRun& p) {
  const std::optional<RunSummary> summary = read_summary(p.run_dir);
  if (summary) return summary->status;
  return fs::exists(p.run_dir) ? "unfinished" : "not started";
}

bool needs_running(const PlannedRun& p) {
  const std::string status = run_status(p);
  return status != "finished" && status != "diverged";
}

// ---- the summary ----

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
  double final_metric = NAN, best_metric = NAN, final_loss = NAN, seconds = NAN, tokens_per_s = NAN, peak_mb = NAN, params = NAN;
};

RunFigures figures(const RunRecord& run, const std::string& metric) {
  RunFigures f;
  const auto curve = run.eval_curve(metric);
  f.final_metric = run.final_value(metric);
  for (const auto& p : curve)
    f.best_metric = std::isnan(f.best_metric) ? p.second : metric == "loss" ? std::min(f.best_metric, p.second) : std::max(f.best_metric, p.second);
  f.final_loss = run.final_value("loss");
  if (run.summary) {
    f.seconds = run.summary->train_seconds, f.tokens_per_s = run.summary->tokens_per_s;
    f.peak_mb = run.summary->peak_rss_mb, f.params = static_cast<double>(run.summary->params);
  }
  return f;
}

// A variant's finished runs, summarised, with its rows of runs.csv.
struct VariantFigures {
  std::vector<double> final_metric, best_metric, loss, seconds, rate;
  double peak = NAN, params = NAN;
  ComparisonVariant report;
};

VariantFigures variant_figures(const CompareSpec& spec, const std::vector<PlannedRun>& plan, std::size_t v, std::ostream& runs_csv) {
  VariantFigures out;
  out.report = ComparisonVariant{spec.variants[v].name, spec.variants[v].description, {}};
  for (const PlannedRun& p : plan) {
    if (p.variant != v) continue;
    const std::string status = run_status(p);
    runs_csv << csv_field(spec.variants[v].name) << "," << p.seed << "," << p.rel << "," << status;
    if (status != "finished") {
      runs_csv << ",,,,,,,\n";
      continue;
    }
    const RunFigures f = figures(read_run(p.run_dir), spec.metric);
    out.report.run_dirs.push_back(p.rel);
    out.final_metric.push_back(f.final_metric), out.best_metric.push_back(f.best_metric), out.loss.push_back(f.final_loss);
    out.seconds.push_back(f.seconds), out.rate.push_back(f.tokens_per_s);
    out.peak = std::isnan(out.peak) ? f.peak_mb : std::max(out.peak, f.peak_mb);
    out.params = f.params;
    runs_csv << "," << num(f.final_metric) << "," << num(f.best_metric) << "," << num(f.final_loss) << "," << num(f.seconds) << ","
             << num(f.tokens_per_s) << "," << num(f.peak_mb) << "," << num(f.params, "%.0f") << "\n";
  }
  return out;
}

}  // namespace

void write_comparison_summary(const CompareSpec& spec, const std::vector<PlannedRun>& plan) {
  const std::string dir = spec.folder(), m = spec.metric;
  const bool percent = m != "loss";
  auto shown = [&](double v) { return std::isnan(v) ? std::string("-") : percent ? num(100 * v, "%.2f%%") : num(v, "%.4f"); };
  std::ostringstream csv, runs_csv, md, table;
  csv << "variant,seeds,final_" << m << "_mean,final_" << m << "_std,best_" << m << "_mean,best_" << m
      << "_std,final_eval_loss_mean,train_seconds_mean,tokens_per_s_mean,peak_rss_mb_max,params,overrides\n";
  runs_csv << "variant,seed,run,status,final_" << m << ",best_" << m << ",final_eval_loss,train_seconds,tokens_per_s,peak_rss_mb,params\n";
  const std::string columns[] = {"variant", "seeds", "final " + m + " (mean ± std)", "best " + m, "final held-out loss", "train time (s)",
                                 "tokens/s", "peak memory (MiB)", "parameters", "overrides"};
  md << "|";
  table << "<table><tr>";
  for (const std::string& c : columns) md << " " << c << " |", table << "<th>" << c << "</th>";
  md << "\n|---|---|---|---|---|---|---|---|---|---|\n";
  table << "</tr>";
  std::vector<ComparisonVariant> report_variants;
  for (std::size_t v = 0; v < spec.variants.size(); ++v) {
    const VariantFigures f = variant_figures(spec, plan, v, runs_csv);
    const Stats fm = stats(f.final_metric), bm = stats(f.best_metric), l = stats(f.loss), s = stats(f.seconds), r = stats(f.rate);
    const CompareVariant& variant = spec.variants[v];
    csv << csv_field(variant.name) << "," << f.final_metric.size() << "," << num(fm.mean) << "," << num(fm.std) << "," << num(bm.mean)
        << "," << num(bm.std) << "," << num(l.mean) << "," << num(s.mean) << "," << num(r.mean) << "," << num(f.peak) << ","
        << num(f.params, "%.0f") << "," << csv_field(variant.description) << "\n";
    const std::string spread = std::isnan(fm.std) ? "" : " ± " + (percent ? num(100 * fm.std, "%.2f") : num(fm.std, "%.4f"));
    const std::string cells[] = {std::to_string(f.final_metric.size()) + "/" + std::to_string(spec.seeds.size()), shown(fm.mean) + spread,
                                 shown(bm.mean), num(l.mean, "%.4f"), num(s.mean, "%.1f"), num(r.mean, "%.0f"), num(f.peak, "%.0f"),
                                 num(f.params, "%.0f")};
    md << "| " << variant.name;
    table << "<tr><td>" << variant.name << "</td>";
    for (const std::string& c : cells) md << " | " << c, table << "<td>" << c << "</td>";
    md << " | `" << variant.description << "` |\n";
    table << "<td style=\"text-align:left\"><code>" << variant.description << "</code></td></tr>";
    report_variants.push_back(f.report);
  }
  table << "</table>";
  write_file_atomically(dir + "/summary.csv", csv.str());
  write_file_atomically(dir + "/runs.csv", runs_csv.str());
  write_file_atomically(dir + "/summary.md", "# " + spec.name + "\n\nBase: `" + spec.base + "`; seeds: " + std::to_string(spec.seeds.size()) +
                                                 "; metric: " + m + " on the held-out split (final = at the last step).\n\n" + md.str());
  write_comparison_report(dir, spec.name, m, report_variants, table.str());
}

}  // namespace attnlab
