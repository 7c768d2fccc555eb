#include "experiments/runner/compare_plan.hpp"

#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <system_error>

#include "experiments/runner/config.hpp"
#include "experiments/runner/metrics_log.hpp"
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

// Whether the override `key=value` gives the dotted key `target` a value: the key itself, a key inside it,
// or a section (`train={steps: 12}`) whose value holds it.
bool assigns(const std::string& assignment, const std::string& target) {
  const std::size_t eq = assignment.find('=');
  const std::string key = assignment.substr(0, eq);
  if (!keys_overlap(key, target)) return false;
  if (key.size() >= target.size()) return true;
  YAML::Node value;
  try {
    value = YAML::Load(eq == std::string::npos ? "" : assignment.substr(eq + 1));
  } catch (const YAML::Exception&) {
    return false;  // not a section; parse_config says what is wrong with it
  }
  std::string rest = target.substr(key.size() + 1);
  for (;;) {
    if (!value.IsMap()) return false;
    const std::string part = rest.substr(0, rest.find('.'));
    const YAML::Node next = value[part];
    if (!next.IsDefined()) return false;
    if (part.size() == rest.size()) return true;
    value.reset(next);
    rest = rest.substr(part.size() + 1);
  }
}

// Whether the override `key=value` (or a key alone) sets what the comparison sets for each of its runs: a
// run's seed, its folder's name and the folder it is in (log.dir, also through log: {dir: ..}; log:
// {interval: 5} sets only what it names).
bool set_per_run(const std::string& assignment) {
  for (const char* key : {"seed", "name", "log.dir"})
    if (assigns(assignment, key)) return true;
  return false;
}

// Where a value is written in the comparison file, and what writes it, for errors about its run's config.
std::string origin_of(const ConfigNode& node, const YAML::Node& at, const std::string& what) {
  const YAML::Mark m = at.Mark();
  return node.source().file() + ":" + std::to_string(m.line + 1) + ":" + std::to_string(m.column + 1) + ": " + what;
}

// A mapping of dotted keys to values, as overrides described by their position in the comparison file.
std::vector<std::pair<std::string, std::string>> read_overrides(const ConfigNode& node, const std::string& key, const std::string& who) {
  const YAML::Node map = node.node()[key];
  std::vector<std::pair<std::string, std::string>> out;
  if (!map.IsDefined() || map.IsNull()) return out;
  if (!map.IsMap()) node.fail(key, who + " must be a mapping of config keys to values, e.g. {model.attention.name: linear}");
  std::vector<YAML::Node> keys;
  for (const auto& kv : map) {
    if (!kv.first.IsScalar()) node.fail_at(kv.first, who + ": a key must be a dotted config key");
    const std::string name = kv.first.Scalar();
    if (set_per_run(name + "=" + flow(kv.second))) {
      node.fail_at(kv.first, who + ": '" + name + "' is set by the comparison for each run (use seeds: and name:)");
    }
    for (const YAML::Node& earlier : keys)  // the last would win without a word (yaml-cpp keeps duplicate keys)
      if (keys_overlap(name, earlier.Scalar())) {
        node.fail_at(kv.first, who + ": '" + name + "' and '" + earlier.Scalar() + "' (line " + std::to_string(earlier.Mark().line + 1) +
                                   ") set the same key; give each key once");
      }
    keys.push_back(kv.first);
    out.emplace_back(name + "=" + flow(kv.second), origin_of(node, kv.first, who + " sets `" + name + ": " + flow(kv.second) + "`"));
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
    if (!s.IsScalar() || read_decimal_integer(s.Scalar(), seed) != std::errc() || seed < 0) {
      node.fail_at(s, "a seed must be a non-negative integer");
    }
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

constexpr std::size_t kMaxRuns = 10000;

// `grid: {KEY: [v1, v2, ...], ...}`: each key a config key no variant or `set` assigns, each value a
// scalar that can name a folder.
void read_grid(const ConfigNode& node, CompareSpec& spec) {
  const YAML::Node grid = node.node()["grid"];
  if (!grid.IsDefined() || grid.IsNull()) return;
  if (!grid.IsMap() || grid.size() == 0)
    node.fail("grid", "'grid' must map config keys to lists of values, e.g. grid: {model.d_model: [64, 128], train.optimizer.lr: [1e-3, 3e-3]}");
  std::map<std::string, int> leaves;
  for (const auto& kv : grid) {
    if (!kv.first.IsScalar()) node.fail_at(kv.first, "grid: a key must be a dotted config key, e.g. train.optimizer.lr");
    const std::string key = kv.first.Scalar();
    if (set_per_run(key)) node.fail_at(kv.first, "grid: '" + key + "' is set by the comparison for each run (use seeds: and name:)");
    for (const GridAxis& earlier : spec.grid)  // yaml-cpp keeps a duplicate key; the last would win without a word
      if (keys_overlap(key, earlier.key))
        node.fail_at(kv.first, "grid: '" + key + "' and '" + earlier.key + "' vary the same key; give each key once");
    if (!kv.second.IsSequence() || kv.second.size() == 0)
      node.fail_at(kv.second, "grid: '" + key + "' must list the values it takes, e.g. " + key + ": [1e-3, 3e-3]");
    GridAxis axis;
    axis.key = key;
    axis.label = key.substr(key.rfind('.') + 1);
    for (const YAML::Node& value : kv.second) {
      if (!value.IsScalar()) node.fail_at(value, "grid: the values of '" + key + "' must be single values (numbers, names), not lists or mappings");
      const std::string text = flow(value);
      if (std::count(axis.values.begin(), axis.values.end(), text)) node.fail_at(value, "grid: '" + key + "' lists " + text + " twice");
      const std::string problem = folder_name_problem(axis.label + "-" + text);
      if (!problem.empty()) node.fail_at(value, "grid: the value " + text + " of '" + key + "' names its runs' folder, but " + problem);
      axis.values.push_back(text);
      axis.origins.push_back(origin_of(node, value, "grid sets `" + key + ": " + text + "`"));
    }
    ++leaves[axis.label];
    spec.grid.push_back(axis);
  }
  // Each run is planned (a config parsed and checked) before any starts: refuse a plan of millions.
  double runs = static_cast<double>(spec.variants.size() * spec.seeds.size());
  std::string product = std::to_string(spec.variants.size()) + " variants x " + std::to_string(spec.seeds.size()) + " seeds";
  for (const GridAxis& axis : spec.grid) runs *= static_cast<double>(axis.values.size()), product += " x " + std::to_string(axis.values.size());
  if (runs > kMaxRuns) {
    node.fail("grid", "the comparison would train " + product + " = " + schema_detail::number(runs) + " runs; attnlab compare plans at most " +
                          std::to_string(kMaxRuns) + ": split it into several comparisons or take fewer values");
  }
  for (GridAxis& axis : spec.grid)
    if (leaves[axis.label] > 1) axis.label = axis.key;  // two axes end alike (a.window, b.window): name them whole
  // `set` and the variants come before the grid's values, which would replace what they give an axis's key
  // (as `train.steps: 12` or through its section, `train: {steps: 12}`) without a word.
  const auto clash = [&](const std::vector<std::pair<std::string, std::string>>& overrides) {
    for (const auto& [assignment, origin] : overrides)
      for (const GridAxis& axis : spec.grid)
        if (assigns(assignment, axis.key)) throw ConfigError::at_origin(origin, "the grid varies '" + axis.key + "' too; set it in one place");
  };
  clash(spec.common);
  for (const CompareVariant& v : spec.variants) clash(v.overrides);
}

// `select: {over: KEY, by: METRIC}`, KEY one of the grid's axes.
void read_select(const ConfigNode& node, CompareSpec& spec) {
  const YAML::Node select = node.node()["select"];
  if (!select.IsDefined() || select.IsNull()) return;
  if (!select.IsMap()) node.fail("select", "'select' must be a mapping, e.g. select: {over: train.optimizer.lr, by: token_accuracy}");
  ConfigNode map(select, "select", node.source_ptr());
  const std::string over = map.get<std::string>("over", "");
  if (spec.grid.empty()) node.fail("select", "'select' picks a value of a grid axis for each variant, but there is no grid:");
  std::string axes;
  CompareSelect out;
  out.axis = spec.grid.size();
  for (std::size_t a = 0; a < spec.grid.size(); ++a) {
    axes += (a ? ", " : "") + spec.grid[a].key;
    if (spec.grid[a].key == over) out.axis = a;
  }
  if (out.axis == spec.grid.size()) map.fail("over", "'over' must name one of the grid's axes (" + axes + "), not '" + over + "'");
  out.by = map.get_choice("by", spec.metric, {"token_accuracy", "exact_match", "loss"});
  // How many of the seeds (the first ones) choose the value; the others run only at the chosen one.
  out.seeds = map.get<std::size_t>("seeds", spec.seeds.size(), Range::closed(1, static_cast<double>(spec.seeds.size())));
  map.finish();
  spec.select = out;
}

// The base config's path, resolved against the comparison file's folder.
std::string base_path(const CompareSpec& spec) { return (fs::path(spec.file).parent_path() / spec.base).string(); }

}  // namespace

std::string CompareSpec::folder() const { return (fs::path(dir) / name).string(); }

std::vector<std::vector<std::size_t>> CompareSpec::points() const {
  std::vector<std::vector<std::size_t>> out = {{}};
  for (const GridAxis& axis : grid) {
    std::vector<std::vector<std::size_t>> next;
    for (const auto& point : out)
      for (std::size_t i = 0; i < axis.values.size(); ++i) {
        next.push_back(point);
        next.back().push_back(i);
      }
    out = next;
  }
  return out;
}

std::string CompareSpec::point_folder(const std::vector<std::size_t>& point) const {
  std::string out;
  for (std::size_t a = 0; a < grid.size(); ++a) out += (a ? "/" : "") + grid[a].label + "-" + grid[a].values[point[a]];
  return out;
}

std::string CompareSpec::point_label(const std::vector<std::size_t>& point, std::size_t skip) const {
  std::string out;
  for (std::size_t a = 0; a < grid.size(); ++a)
    if (a != skip) out += (out.empty() ? "" : " ") + grid[a].label + "=" + grid[a].values[point[a]];
  return out;
}

bool CompareSpec::choosing_seed(std::uint64_t seed) const {
  if (!select) return true;
  const auto at = std::find(seeds.begin(), seeds.end(), seed);
  return static_cast<std::size_t>(at - seeds.begin()) < select->seeds;
}

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
  node.allow("grid");
  node.allow("select");
  spec.seeds = read_seeds(node);
  spec.common = read_overrides(node, "set", "'set'");
  read_variants(node, spec);
  read_grid(node, spec);
  read_select(node, spec);
  node.finish();
  return spec;
}

// A run the comparison already holds must be the one it plans: compared key by key (a key a newer build
// added, at its default, is no difference), with the keys that differ named.
// A log.dir of its own is not a difference: the comparison folder was moved (or copied) since, and the run's
// config file is written again with the folder's new place (PlannedRun::moved), so that a run not yet
// started trains there and not in the old place.
void check_same_run(const CompareSpec& spec, const CompareVariant& variant, PlannedRun& p, const ExperimentConfig& planned) {
  std::string differences;
  try {
    const ExperimentConfig existing = parse_config(read_file(p.config_file, "run's config"), p.config_file);
    for (const KeyDifference& d : config_differences(existing, planned, true)) {
      if (d.key == "log.dir") {
        p.moved = true;
        continue;
      }
      differences += (differences.empty() ? "" : ", ") + d.key + " " + d.first + " there, " + d.second + " now";
    }
  } catch (const ConfigError& e) {
    differences = std::string("it no longer reads: ") + e.what();
  }
  if (differences.empty()) return;
  throw ConfigError(spec.file, variant.mark.line + 1, variant.mark.column + 1,
                    "variant '" + variant.name + "': " + spec.folder() + " already holds this run with a different config (" + p.config_file +
                        ": " + differences + "); set a new name: for the comparison, or remove the folder to start again");
}

// "(its overrides)", or "(base)" for a variant that changes nothing.
std::string described(const CompareVariant& v) { return v.overrides.empty() ? v.description : "(" + v.description + ")"; }

// A variant's config at one grid point: the base, then `set`, the variant's overrides, the point's values
// and the command line's; errors name the comparison file (or the command line).
ExperimentConfig variant_config(const CompareSpec& spec, const CompareVariant& variant, const std::vector<std::size_t>& point,
                                const std::vector<std::string>& extra, const std::string& base, const std::string& base_text) {
  std::vector<std::pair<std::string, std::string>> overrides = spec.common;
  overrides.insert(overrides.end(), variant.overrides.begin(), variant.overrides.end());
  for (std::size_t a = 0; a < spec.grid.size(); ++a)
    overrides.emplace_back(spec.grid[a].key + "=" + spec.grid[a].values[point[a]], spec.grid[a].origins[point[a]]);
  check_distinct_overrides(extra);
  for (const std::string& e : extra) {
    const std::string key = e.substr(0, e.find('='));
    if (set_per_run(e)) {
      throw ConfigError::at_origin("command-line override `" + e + "`",
                                   "the comparison sets seed, name and log.dir for each run; choose the seeds with seeds: and the "
                                   "folder with name: and dir: in " + spec.file + " (its runs go to " + spec.folder() + ")");
    }
    for (const GridAxis& axis : spec.grid)
      if (keys_overlap(key, axis.key))
        throw ConfigError::at_origin("command-line override `" + e + "`", "the grid of " + spec.file + " varies '" + axis.key +
                                                                             "'; change its values there (the runs' folders are named by them)");
    overrides.emplace_back(e, "");
  }
  try {
    return parse_config(base_text, base, overrides);
  } catch (const ConfigError& e) {
    if (!e.origin().empty()) throw;  // already names the comparison file's line, or the command line
    const std::string at = spec.grid.empty() ? "" : " at " + spec.point_label(point);
    throw ConfigError(spec.file, variant.mark.line + 1, variant.mark.column + 1,
                      "variant '" + variant.name + "' " + described(variant) + at + ": " + e.what());
  }
}

std::vector<PlannedRun> plan_comparison(const CompareSpec& spec, const std::vector<std::string>& extra, bool against_existing) {
  const std::string base = base_path(spec), base_text = read_config_text(base), dir = spec.folder();
  std::vector<PlannedRun> plan;
  for (std::size_t v = 0; v < spec.variants.size(); ++v) {
    const CompareVariant& variant = spec.variants[v];
    for (const std::vector<std::size_t>& point : spec.points()) {
      ExperimentConfig config = variant_config(spec, variant, point, extra, base, base_text);
      const std::string folder = "runs/" + variant.name + (spec.grid.empty() ? "" : "/" + spec.point_folder(point));
      for (std::uint64_t seed : spec.seeds) {
        PlannedRun p;
        p.variant = v;
        p.point = point;
        p.seed = seed;
        p.rel = folder + "/seed_" + std::to_string(seed);
        p.run_dir = dir + "/" + p.rel;
        p.config_file = p.run_dir + ".yaml";
        config.seed = seed;
        config.name = "seed_" + std::to_string(seed);
        config.log.dir = dir + "/" + folder;
        p.config_yaml = config_to_yaml(config);
        if (against_existing && fs::exists(p.config_file)) check_same_run(spec, variant, p, config);
        plan.push_back(p);
      }
    }
  }
  return plan;
}

std::string run_status(const PlannedRun& p) {
  const std::optional<RunSummary> summary = read_summary(p.run_dir);
  if (summary) return summary->status;
  return fs::exists(p.run_dir) ? "unfinished" : "not started";
}

bool run_ended(const std::string& status) { return status == "finished" || status == "diverged"; }

bool needs_running(const PlannedRun& p) { return !run_ended(run_status(p)); }

}  // namespace attnlab
