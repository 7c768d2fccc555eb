#include "experiments/runner/compare.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "experiments/runner/config.hpp"
#include "experiments/runner/report.hpp"
#include "framework/io/config_node.hpp"

extern char** environ;

namespace attnlab {
namespace {

namespace fs = std::filesystem;

struct Variant {
  std::string name;
  std::vector<std::string> overrides;  // key=value
  std::string description;             // the overrides as one line, for tables
  YAML::Node node;                     // where it is written, for errors
};

struct CompareSpec {
  std::string name, base, metric = "token_accuracy", dir = "runs";
  std::vector<std::uint64_t> seeds;
  std::vector<std::string> common;  // `set`
  std::vector<Variant> variants;
  std::string file, text;
};

// A YAML value as the text of a key=value override (flow style, so that it stays on one line).
std::string flow(const YAML::Node& value) {
  YAML::Emitter out;
  out.SetMapFormat(YAML::Flow);
  out.SetSeqFormat(YAML::Flow);
  out << value;
  return out.c_str();
}

// A mapping of dotted keys to values, as overrides; `where` names it in errors.
std::vector<std::string> read_overrides(const YAML::Node& node, const std::string& file, const std::string& where) {
  std::vector<std::string> out;
  if (!node || node.IsNull()) return out;
  if (!node.IsMap()) fail_at(node, file, where + " must be a mapping of config keys to values, e.g. {model.attention.name: linear}");
  for (const auto& kv : node) {
    const std::string key = kv.first.as<std::string>();
    if (key == "seed" || key == "name" || key == "log.dir" || key == "log") {
      fail_at(kv.first, file, where + ": '" + key + "' is set by the comparison for each run (use seeds: and name:)");
    }
    out.push_back(key + "=" + flow(kv.second));
  }
  return out;
}

CompareSpec read_spec(const std::string& path) {
  CompareSpec spec;
  spec.file = path;
  std::ifstream in(path);
  if (!in) throw ConfigError(path, 0, 0, "cannot read the comparison file");
  std::stringstream text;
  text << in.rdbuf();
  spec.text = text.str();
  YAML::Node root;
  try {
    root = YAML::Load(spec.text);
  } catch (const YAML::ParserException& e) {
    throw ConfigError(path, e.mark.line + 1, e.mark.column + 1, e.msg);
  }
  ConfigNode node(root, "", path);
  spec.name = node.get<std::string>("name", "comparison");
  spec.base = node.get<std::string>("base", "");
  if (spec.base.empty()) node.fail("base", "'base' must name the experiment config the variants start from, e.g. base: reverse.yaml");
  spec.metric = node.get_choice("metric", "token_accuracy", {"token_accuracy", "exact_match", "loss"});
  spec.dir = node.get<std::string>("dir", "runs");
  if (!std::regex_match(spec.name, std::regex("[A-Za-z0-9_.-]+"))) {
    node.fail("name", "name '" + spec.name + "' names a folder: use letters, digits, '_', '-' and '.'");
  }
  const YAML::Node seeds = node.child("seeds");
  if (!seeds || seeds.IsNull()) {
    spec.seeds = {0};
  } else {
    if (!seeds.IsSequence() || seeds.size() == 0) fail_at(seeds, path, "'seeds' must be a non-empty list, e.g. seeds: [0, 1, 2]");
    for (const YAML::Node& s : seeds) {
      std::uint64_t seed = 0;
      try {
        seed = s.as<std::uint64_t>();
      } catch (const YAML::Exception&) {
        fail_at(s, path, "a seed must be a non-negative integer");
      }
      if (std::count(spec.seeds.begin(), spec.seeds.end(), seed)) fail_at(s, path, "seed " + std::to_string(seed) + " is listed twice");
      spec.seeds.push_back(seed);
    }
  }
  spec.common = read_overrides(node.child("set"), path, "'set'");
  const YAML::Node variants = node.child("variants");
  if (!variants || !variants.IsMap() || variants.size() == 0) {
    if (variants && !variants.IsNull()) fail_at(variants, path, "'variants' must be a mapping of names to overrides, e.g. linear: {model.attention.name: linear}");
    node.fail("variants", "'variants' must list at least one variant, e.g. variants: {softmax: {}, linear: {model.attention.name: linear}}");
  }
  std::set<std::string> names;
  for (const auto& kv : variants) {
    Variant v;
    v.name = kv.first.as<std::string>();
    v.node = kv.first;
    if (!std::regex_match(v.name, std::regex("[A-Za-z0-9_.-]+"))) {
      fail_at(kv.first, path, "variant name '" + v.name + "' names a folder: use letters, digits, '_', '-' and '.'");
    }
    if (!names.insert(v.name).second) fail_at(kv.first, path, "variant '" + v.name + "' is listed twice");
    v.overrides = read_overrides(kv.second, path, "variant '" + v.name + "'");
    for (const std::string& o : v.overrides) v.description += (v.description.empty() ? "" : " ") + o;
    if (v.description.empty()) v.description = "(base)";
    spec.variants.push_back(v);
  }
  node.finish();
  return spec;
}

// One (variant, seed) run of the comparison.
struct Planned {
  std::size_t variant = 0;
  std::uint64_t seed = 0;
  std::string rel;          // runs/<variant>/seed_<s>, relative to the comparison folder
  std::string run_dir;      // the same, absolute-or-as-given
  std::string config_file;  // runs/<variant>/seed_<s>.yaml
  std::string config_yaml;  // its resolved text
};

bool finished(const Planned& p) { return fs::exists(p.run_dir + "/summary.json"); }

std::atomic<bool> g_interrupted{false};
extern "C" void on_compare_interrupt(int) { g_interrupted = true; }

// Starts `attnlab train ...` for a run, its output appended to runs/<variant>/seed_<s>.log.
pid_t spawn_run(const Planned& p, int threads) {
  std::vector<std::string> args = {"attnlab", "train"};
  if (fs::exists(p.run_dir + "/last.ckpt")) {
    args.insert(args.end(), {"--resume", p.run_dir});
  } else {
    if (fs::exists(p.run_dir)) fs::remove_all(p.run_dir);  // started but never reached a checkpoint: start again
    args.push_back(p.config_file);
  }
  args.insert(args.end(), {"--threads", std::to_string(threads)});
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const std::string log = p.config_file.substr(0, p.config_file.size() - 5) + ".log";
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  pid_t pid = 0;
  const int error = posix_spawn(&pid, "/proc/self/exe", &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (error) throw std::runtime_error("cannot start a training process for " + p.rel + ": " + std::strerror(error));
  return pid;
}

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

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char ch : s) out += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return out + "\"";
}

// One finished run's figures for the summary.
struct RunFigures {
  double final_metric = NAN, best_metric = NAN, final_loss = NAN, seconds = NAN, tokens_per_s = NAN, peak_mb = NAN, params = NAN;
};

RunFigures figures(const RunRecord& run, const std::string& metric) {
  RunFigures f;
  const auto curve = run.eval_curve(metric);
  f.final_metric = run.final_value(metric);
  if (!curve.empty()) {
    f.best_metric = curve.front().second;
    for (const auto& p : curve) f.best_metric = metric == "loss" ? std::min(f.best_metric, p.second) : std::max(f.best_metric, p.second);
  }
  f.final_loss = run.final_value("loss");
  auto field = [&](const char* key) {
    const auto it = run.summary.find(key);
    return it == run.summary.end() ? NAN : std::stod(it->second);
  };
  f.seconds = field("train_seconds"), f.tokens_per_s = field("tokens_per_s"), f.peak_mb = field("peak_rss_mb"), f.params = field("params");
  return f;
}

// summary.csv, summary.md, runs.csv and report.html from the finished runs.
void write_summary(const std::string& dir, const CompareSpec& spec, const std::vector<Planned>& plan) {
  const bool percent = spec.metric != "loss";
  auto shown = [&](double v) { return std::isnan(v) ? std::string("-") : percent ? num(100 * v, "%.2f%%") : num(v, "%.4f"); };
  std::ostringstream csv, runs_csv, md, table;
  const std::string m = spec.metric;
  csv << "variant,seeds,final_" << m << "_mean,final_" << m << "_std,best_" << m << "_mean,best_" << m
      << "_std,final_eval_loss_mean,train_seconds_mean,tokens_per_s_mean,peak_rss_mb_max,params,overrides\n";
  runs_csv << "variant,seed,run,status,final_" << m << ",best_" << m << ",final_eval_loss,train_seconds,tokens_per_s,peak_rss_mb,params\n";
  md << "| variant | seeds | final " << m << " (mean ± std) | best " << m << " | final held-out loss | train time (s) | tokens/s | peak memory (MiB) | parameters | overrides |\n"
     << "|---|---|---|---|---|---|---|---|---|---|\n";
  table << "<table><tr><th>variant</th><th>seeds</th><th>final " << m << " (mean ± std)</th><th>best " << m
        << "</th><th>final held-out loss</th><th>train time (s)</th><th>tokens/s</th><th>peak memory (MiB)</th><th>parameters</th><th>overrides</th></tr>";
  std::vector<ComparisonVariant> report_variants;
  for (std::size_t v = 0; v < spec.variants.size(); ++v) {
    std::vector<double> final_metric, best_metric, loss, seconds, rate;
    double peak = NAN, params = NAN;
    ComparisonVariant rv{spec.variants[v].name, spec.variants[v].description, {}};
    for (const Planned& p : plan) {
      if (p.variant != v) continue;
      if (!finished(p)) {
        runs_csv << csv_field(spec.variants[v].name) << "," << p.seed << "," << p.rel << "," << (fs::exists(p.run_dir) ? "unfinished" : "not started") << ",,,,,,,\n";
        continue;
      }
      const RunFigures f = figures(read_run(p.run_dir), m);
      rv.run_dirs.push_back(p.rel);
      final_metric.push_back(f.final_metric), best_metric.push_back(f.best_metric), loss.push_back(f.final_loss);
      seconds.push_back(f.seconds), rate.push_back(f.tokens_per_s);
      peak = std::isnan(peak) ? f.peak_mb : std::max(peak, f.peak_mb);
      params = f.params;
      runs_csv << csv_field(spec.variants[v].name) << "," << p.seed << "," << p.rel << ",finished," << num(f.final_metric) << ","
               << num(f.best_metric) << "," << num(f.final_loss) << "," << num(f.seconds) << "," << num(f.tokens_per_s) << ","
               << num(f.peak_mb) << "," << num(f.params, "%.0f") << "\n";
    }
    const Stats fm = stats(final_metric), bm = stats(best_metric), l = stats(loss), s = stats(seconds), r = stats(rate);
    csv << csv_field(spec.variants[v].name) << "," << final_metric.size() << "," << num(fm.mean) << "," << num(fm.std) << ","
        << num(bm.mean) << "," << num(bm.std) << "," << num(l.mean) << "," << num(s.mean) << "," << num(r.mean) << "," << num(peak)
        << "," << num(params, "%.0f") << "," << csv_field(spec.variants[v].description) << "\n";
    const std::string spread = std::isnan(fm.std) ? "" : " ± " + (percent ? num(100 * fm.std, "%.2f") : num(fm.std, "%.4f"));
    const std::string cells[] = {std::to_string(final_metric.size()) + "/" + std::to_string(spec.seeds.size()),
                                 shown(fm.mean) + spread, shown(bm.mean), num(l.mean, "%.4f"), num(s.mean, "%.1f"),
                                 num(r.mean, "%.0f"), num(peak, "%.0f"), num(params, "%.0f")};
    md << "| " << spec.variants[v].name;
    table << "<tr><td>" << spec.variants[v].name << "</td>";
    for (const std::string& c : cells) md << " | " << c, table << "<td>" << c << "</td>";
    md << " | `" << spec.variants[v].description << "` |\n";
    table << "<td style=\"text-align:left\"><code>" << spec.variants[v].description << "</code></td></tr>";
    report_variants.push_back(rv);
  }
  table << "</table>";
  write_file_atomic(dir + "/summary.csv", csv.str());
  write_file_atomic(dir + "/runs.csv", runs_csv.str());
  write_file_atomic(dir + "/summary.md", "# " + spec.name + "\n\nBase: `" + spec.base + "`; seeds: " +
                                             std::to_string(spec.seeds.size()) + "; metric: " + m +
                                             " on the held-out split (final = at the last step).\n\n" + md.str());
  write_comparison_report(dir, spec.name, m, report_variants, table.str());
}

// The base config's path, resolved against the comparison file's folder.
std::string base_path(const CompareSpec& spec, const std::string& config_path) {
  const std::string base = (fs::path(config_path).parent_path() / spec.base).string();
  if (!fs::exists(base)) {
    YAML::Node root = YAML::Load(spec.text);
    fail_at(root["base"], config_path, "base '" + spec.base + "' does not exist (looked for " + base + ")");
  }
  return base;
}

// Every (variant, seed) run with its resolved config, validated; errors point at the comparison file.
// With `against_existing`, a run whose folder already holds a different config is an error too.
std::vector<Planned> plan_runs(const CompareSpec& spec, const std::string& config_path, const std::string& base,
                               const std::string& dir, const std::vector<std::string>& extra, bool against_existing) {
  std::vector<Planned> plan;
  for (std::size_t v = 0; v < spec.variants.size(); ++v) {
    for (std::uint64_t seed : spec.seeds) {
      Planned p;
      p.variant = v;
      p.seed = seed;
      p.rel = "runs/" + spec.variants[v].name + "/seed_" + std::to_string(seed);
      p.run_dir = dir + "/" + p.rel;
      p.config_file = p.run_dir + ".yaml";
      std::vector<std::string> overrides = spec.common;
      overrides.insert(overrides.end(), spec.variants[v].overrides.begin(), spec.variants[v].overrides.end());
      overrides.insert(overrides.end(), extra.begin(), extra.end());
      overrides.push_back("seed=" + std::to_string(seed));
      overrides.push_back("name=seed_" + std::to_string(seed));
      overrides.push_back("log.dir=" + dir + "/runs/" + spec.variants[v].name);
      try {
        p.config_yaml = config_to_yaml(load_config(base, overrides));
      } catch (const std::exception& e) {
        const YAML::Mark mark = spec.variants[v].node.Mark();
        throw ConfigError(config_path, mark.line + 1, mark.column + 1,
                          "variant '" + spec.variants[v].name + "' (" + spec.variants[v].description + " on " + spec.base + "): " + e.what());
      }
      if (against_existing && fs::exists(p.config_file)) {
        std::ifstream in(p.config_file);
        std::stringstream existing;
        existing << in.rdbuf();
        if (existing.str() != p.config_yaml) {
          const YAML::Mark mark = spec.variants[v].node.Mark();
          throw ConfigError(config_path, mark.line + 1, mark.column + 1,
                            "variant '" + spec.variants[v].name + "': " + dir + " already holds this run with a different config (" +
                                p.config_file + "); set a new name: for the comparison, or remove the folder to start again");
        }
      }
      plan.push_back(p);
    }
  }
  return plan;
}

}  // namespace

std::size_t check_comparison(const std::string& config_path) {
  const CompareSpec spec = read_spec(config_path);
  const std::string base = base_path(spec, config_path);
  return plan_runs(spec, config_path, base, (fs::path(spec.dir) / spec.name).string(), {}, false).size();
}

int run_comparison(const std::string& config_path, const CompareOptions& options) {
  const CompareSpec spec = read_spec(config_path);
  const std::string base = base_path(spec, config_path);
  const std::string dir = (fs::path(spec.dir) / spec.name).string();
  // Resolve and validate every run before anything is written.
  const std::vector<Planned> plan = plan_runs(spec, config_path, base, dir, options.overrides, true);

  fs::create_directories(dir + "/runs");
  write_file_atomic(dir + "/compare.yaml", "# " + config_path + (options.overrides.empty() ? "" : " with") +
                                               [&] {
                                                 std::string s;
                                                 for (const auto& o : options.overrides) s += " " + o;
                                                 return s;
                                               }() + "\n" + spec.text);
  for (const Planned& p : plan) {
    fs::create_directories(fs::path(p.config_file).parent_path());
    if (!fs::exists(p.config_file)) write_file_atomic(p.config_file, p.config_yaml);
  }

  std::vector<const Planned*> queue;
  for (const Planned& p : plan)
    if (!finished(p)) queue.push_back(&p);
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int jobs = std::max(1, options.jobs);
  const int threads = options.threads > 0 ? options.threads : std::max(1, cores / jobs);
  std::printf("attnlab compare: %s, %zu variants x %zu seeds; %zu of %zu runs already finished; %d at a time, %d thread%s each\n",
              dir.c_str(), spec.variants.size(), spec.seeds.size(), plan.size() - queue.size(), plan.size(), jobs, threads,
              threads == 1 ? "" : "s");
  std::fflush(stdout);

  g_interrupted = false;
  struct SigintHandler {  // without SA_RESTART, so that Ctrl-C wakes the wait below; restored however we leave
    struct sigaction previous {};
    SigintHandler() {
      struct sigaction action {};
      action.sa_handler = on_compare_interrupt;
      sigemptyset(&action.sa_mask);
      sigaction(SIGINT, &action, &previous);
    }
    ~SigintHandler() { sigaction(SIGINT, &previous, nullptr); }
  } sigint;
  std::map<pid_t, const Planned*> running;
  std::map<pid_t, std::chrono::steady_clock::time_point> started;
  std::vector<std::string> failed;
  std::size_t next = 0, done = plan.size() - queue.size();
  bool forwarded = false;
  while (next < queue.size() || !running.empty()) {
    while (!g_interrupted && next < queue.size() && static_cast<int>(running.size()) < jobs) {
      const Planned* p = queue[next++];
      const pid_t pid = spawn_run(*p, threads);
      running[pid] = p;
      started[pid] = std::chrono::steady_clock::now();
      std::printf("  started  %s (log: %s.log)\n", p->rel.c_str(), p->rel.c_str());
      std::fflush(stdout);
    }
    if (running.empty()) break;
    int status = 0;
    const pid_t pid = waitpid(-1, &status, 0);
    if (pid < 0) {
      if (errno == EINTR) {
        if (g_interrupted && !forwarded) {  // Ctrl-C: each run writes its last.ckpt and stops
          for (const auto& [child, p] : running) kill(child, SIGINT);
          forwarded = true;
        }
        continue;
      }
      throw std::runtime_error(std::string("waiting for a training process: ") + std::strerror(errno));
    }
    const auto it = running.find(pid);
    if (it == running.end()) continue;
    const Planned* p = it->second;
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started[pid]).count();
    running.erase(it);
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (code == 0 && finished(*p)) {
      ++done;
      const double value = read_run(p->run_dir).final_value(spec.metric);
      std::printf("  finished %s in %.1f s: %s %s  [%zu/%zu]\n", p->rel.c_str(), seconds, spec.metric.c_str(),
                  std::isnan(value) ? "-" : num(value, "%.4f").c_str(), done, plan.size());
    } else if (code == 130 || g_interrupted) {
      std::printf("  stopped  %s (interrupted; it continues from its last.ckpt when resumed)\n", p->rel.c_str());
    } else {
      failed.push_back(p->rel);
      std::printf("  FAILED   %s (exit %d); see %s.log\n", p->rel.c_str(), code, p->rel.c_str());
    }
    std::fflush(stdout);
  }
  write_summary(dir, spec, plan);
  std::printf("attnlab compare: %zu of %zu runs finished; %s/summary.md, %s/report.html\n", done, plan.size(), dir.c_str(), dir.c_str());
  if (g_interrupted) {
    std::string command = "attnlab compare " + config_path;
    for (const auto& o : options.overrides) command += " " + o;
    std::printf("attnlab compare: interrupted. Resume with the same command: %s\n", command.c_str());
    return 130;
  }
  if (!failed.empty()) {
    std::fprintf(stderr, "attnlab compare: %zu run%s failed:", failed.size(), failed.size() == 1 ? "" : "s");
    for (const auto& f : failed) std::fprintf(stderr, " %s", f.c_str());
    std::fprintf(stderr, " (their .log files say why; the same command retries them)\n");
    return 1;
  }
  return 0;
}

}  // namespace attnlab
