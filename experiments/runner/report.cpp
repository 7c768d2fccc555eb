#include "experiments/runner/report.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <set>
#include <regex>
#include <sstream>
#include <stdexcept>

#include "experiments/runner/config.hpp"
#include "experiments/runner/metrics_log.hpp"
#include "experiments/runner/report_svg.hpp"
#include "framework/io/atomic_file.hpp"
#include "framework/io/config_node.hpp"
#include "framework/io/image.hpp"
#include "framework/io/npy.hpp"

namespace attnlab {
namespace {

namespace fs = std::filesystem;
using namespace report;

// The attention parts a run's pattern files hold: "" for a single-stack model; "encoder", "decoder",
// "cross" for an encoder-decoder (patterns/step_S_probe_0[_part].npy).
const std::vector<std::string> kParts{"", "encoder", "decoder", "cross"};

std::string part_suffix(const std::string& part) { return part.empty() ? "" : "_" + part; }

std::string pattern_file(const std::string& run_dir, std::size_t step, std::size_t probe, const std::string& part) {
  return run_dir + "/patterns/step_" + std::to_string(step) + "_probe_" + std::to_string(probe) + part_suffix(part) + ".npy";
}

std::vector<std::string> pattern_parts(const std::string& run_dir, std::size_t step) {
  std::vector<std::string> parts;
  for (const std::string& part : kParts)
    if (fs::exists(pattern_file(run_dir, step, 0, part))) parts.push_back(part);
  return parts;
}

// How the report titles a part's patterns.
std::string part_title(const std::string& part) {
  if (part == "encoder") return "Encoder self-attention: bidirectional, source down and across";
  if (part == "decoder") return "Decoder self-attention: causal, target down and across";
  if (part == "cross") return "Decoder cross-attention: target down, source across";
  return "";
}

// The display labels of a probe's source tokens (patterns/probe_P_labels.txt, one per line) or, with
// `target`, of its decoder inputs (probe_P_target_labels.txt); positions when there are none.
std::vector<std::string> probe_labels(const std::string& run_dir, std::size_t probe, std::size_t length, bool target = false) {
  std::vector<std::string> labels;
  std::ifstream in(run_dir + "/patterns/probe_" + std::to_string(probe) + (target ? "_target" : "") + "_labels.txt");
  for (std::string line; labels.size() < length && std::getline(in, line);) labels.push_back(line);
  if (labels.size() != length) {
    labels.clear();
    for (std::size_t i = 0; i < length; ++i) labels.push_back(std::to_string(i));
  }
  return labels;
}

// A ViT probe's image (patterns/probe_P_image.png, written at capture) with its patch geometry from the
// run's config.yaml (model.patch_size, and a CLS token before the patches with model.pooling cls); none
// for token inputs.
std::optional<PatternImage> probe_image(const std::string& run_dir, std::size_t probe) {
  const std::string file = run_dir + "/patterns/probe_" + std::to_string(probe) + "_image.png";
  if (!fs::exists(file)) return std::nullopt;
  std::ifstream in(file, std::ios::binary);
  PatternImage image;
  image.png.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  if (image.png.size() < 24 || image.png.compare(1, 3, "PNG") != 0) throw std::runtime_error(file + ": not a PNG file");
  const auto u32 = [&](std::size_t at) {  // the IHDR chunk's big-endian width and height
    std::size_t v = 0;
    for (std::size_t i = 0; i < 4; ++i) v = (v << 8) | static_cast<unsigned char>(image.png[at + i]);
    return v;
  };
  image.width = u32(16), image.height = u32(20);
  const YAML::Node model = YAML::LoadFile(run_dir + "/config.yaml")["model"];
  image.patch = model["patch_size"].as<std::size_t>(0);
  image.leading = model["pooling"].as<std::string>("") == "cls" ? 1 : 0;
  if (image.patch == 0 || image.width % image.patch || image.height % image.patch) return std::nullopt;
  return image;
}

// Every layer's heads of one part for one capture of one probe, a row per layer, each row followed by its
// token view (or for images, its image view), with the data report.js reads and the colour bar it needs.
std::string pattern_grid(const std::string& run_dir, std::size_t step, std::size_t probe, const std::string& part) {
  const std::string file = pattern_file(run_dir, step, probe, part);
  if (!fs::exists(file)) return "<p class=\"note\">no pattern file " + escape(file) + "</p>";
  const Tensor t = read_npy(file);
  if (t.dim() != 4) throw std::runtime_error(file + ": expected [layers, heads, queries, keys], got " + shape_str(t.shape()));
  PatternGrid grid;
  grid.layers = t.size(0), grid.heads = t.size(1), grid.tq = t.size(2), grid.tk = t.size(3);
  grid.values = t.to_vector();
  grid.title = "probe " + std::to_string(probe) + ", step " + std::to_string(step) + (part.empty() ? "" : ", " + part);
  const bool target_queries = part == "decoder" || part == "cross";
  grid.keys = probe_labels(run_dir, probe, grid.tk, part == "decoder");
  grid.queries = target_queries ? probe_labels(run_dir, probe, grid.tq, true) : grid.tq == grid.tk ? grid.keys : probe_labels("", probe, grid.tq);
  if (part.empty() || part == "encoder") grid.image = probe_image(run_dir, probe);
  const std::size_t cells = grid.tq * grid.tk;
  bool signed_values = false;
  for (std::size_t h = 0; h < grid.layers * grid.heads; ++h) signed_values |= pattern_scale(grid.values.data() + h * cells, cells).signed_values;
  std::ostringstream html;
  const std::string relative = "patterns/" + fs::path(file).filename().string();
  html << "<div class=\"attn\" data-file=\"" << escape(relative) << "\">" << pattern_data(grid) << colour_bar(signed_values);
  for (std::size_t l = 0; l < grid.layers; ++l) {
    html << "<div class=\"heads\">";
    for (std::size_t h = 0; h < grid.heads; ++h) {
      html << heatmap_panel(grid.values.data() + (l * grid.heads + h) * cells, grid.tq, grid.tk, grid.queries, grid.keys,
                            {l, h, (part.empty() ? "" : part + " ") + "layer " + std::to_string(l) + " head " + std::to_string(h)});
    }
    html << "</div><div class=\"" << (grid.image ? "imageview" : "tokenview") << "\" data-layer=\"" << l << "\"></div>";
  }
  html << "</div>";
  return html.str();
}

// The captured steps that have a pattern file for probe 0, ascending.
std::vector<std::size_t> captured_steps(const std::string& run_dir) {
  std::set<std::size_t> steps;
  const std::regex name("step_([0-9]+)_probe_0(_encoder|_decoder|_cross)?\\.npy");
  if (!fs::exists(run_dir + "/patterns")) return {};
  for (const auto& entry : fs::directory_iterator(run_dir + "/patterns")) {
    std::smatch m;
    const std::string file = entry.path().filename().string();
    if (std::regex_match(file, m, name)) steps.insert(std::stoul(m[1].str()));
  }
  return std::vector<std::size_t>(steps.begin(), steps.end());
}

std::size_t probe_count(const std::string& run_dir, std::size_t step) {
  const std::vector<std::string> parts = pattern_parts(run_dir, step);
  std::size_t n = 0;
  while (!parts.empty() && fs::exists(pattern_file(run_dir, step, n, parts[0]))) ++n;
  return n;
}

// The parts the captures' head rows name, in kParts order.
std::vector<std::string> metric_parts(const RunRecord& run) {
  std::set<std::string> named;
  for (const PatternCapture& c : run.captures)
    for (const HeadMetricRow& h : c.heads) named.insert(h.part);
  std::vector<std::string> parts;
  for (const std::string& part : kParts)
    if (named.count(part)) parts.push_back(part);
  return parts;
}

// One chart per head metric over the capture steps, a line per head; a row of charts per attention part.
std::string head_metric_charts(const RunRecord& run) {
  if (run.captures.empty()) return "<p class=\"note\">no pattern captures in metrics.jsonl</p>";
  std::ostringstream html;
  for (const std::string& part : metric_parts(run)) {
    if (!part.empty()) html << "<h3>" << escape(part_title(part)) << "</h3>";
    html << "<div class=\"charts\">";
    for (const auto& [metric, member] : head_metric_fields()) {
      std::map<std::pair<std::size_t, std::size_t>, Series> by_head;
      for (const PatternCapture& c : run.captures)
        for (const HeadMetricRow& h : c.heads) {
          if (h.part != part || std::isnan(h.metrics.*member)) continue;
          Series& s = by_head[{h.layer, h.head}];
          s.name = "L" + std::to_string(h.layer) + "H" + std::to_string(h.head);
          s.points.emplace_back(static_cast<double>(c.step), h.metrics.*member);
        }
      if (by_head.empty()) continue;  // a metric that does not apply to this part
      std::vector<Series> series;
      for (auto& [key, s] : by_head) {
        s.colour = colour(key.second);
        s.dash = dash(key.first);  // a line style per layer; heads share colours across layers
        series.push_back(s);
      }
      const std::string name = metric;
      const YScale scale = name == "entropy" || name == "mean_distance" ? YScale::linear : name == "monotonicity" ? YScale::signed_unit : YScale::unit;
      html << line_chart(name, series, scale, 420, 240);
    }
    html << "</div>";
  }
  return html.str();
}

// The last capture's metrics as a table, each metric's highest head of each part in bold.
std::string head_metric_table(const RunRecord& run) {
  if (run.captures.empty()) return "";
  const PatternCapture& last = run.captures.back();
  std::ostringstream html;
  html << "<p>At step " << last.step << " (bold: the highest head of each metric";
  if (metric_parts(run).size() > 1) html << " in each part";
  html << "; &ndash;: does not apply):</p><table><tr><th>head</th>";
  for (const auto& [metric, member] : head_metric_fields()) html << "<th>" << metric << "</th>";
  html << "</tr>";
  for (const HeadMetricRow& h : last.heads) {
    html << "<tr><td>" << escape(h.part.empty() ? "" : h.part + " ") << "layer " << h.layer << " head " << h.head << "</td>";
    for (const auto& [metric, member] : head_metric_fields()) {
      double best = -1e300;
      for (const HeadMetricRow& other : last.heads)
        if (other.part == h.part && !std::isnan(other.metrics.*member)) best = std::max(best, other.metrics.*member);
      const double v = h.metrics.*member;
      const bool top = !std::isnan(v) && v == best;
      html << "<td>" << (top ? "<b>" : "") << (std::isnan(v) ? "&ndash;" : fmt("%.3f", v)) << (top ? "</b>" : "") << "</td>";
    }
    html << "</tr>";
  }
  html << "</table>";
  return html.str();
}

// A metric's best head: the lowest entropy and mean distance, the largest |monotonicity| (its sign kept),
// the highest of the rest; NaN when no head has the metric.
double best_head_value(const std::string& metric, const std::vector<double>& values) {
  double best = std::nan("");
  for (double v : values) {
    if (std::isnan(v)) continue;
    const bool lower = metric == "entropy" || metric == "mean_distance";
    const bool better = std::isnan(best) || (lower ? v < best : metric == "monotonicity" ? std::fabs(v) > std::fabs(best) : v > best);
    if (better) best = v;
  }
  return best;
}

// Per variant and attention part: each metric of its best head at the last capture, mean over seeds.
std::string comparison_head_metrics(const std::string& dir, const std::vector<ComparisonVariant>& variants) {
  std::ostringstream rows;
  for (const ComparisonVariant& variant : variants) {
    std::map<std::string, std::map<std::string, std::pair<double, std::size_t>>> sums;  // part -> metric -> (sum, runs)
    for (const std::string& r : variant.run_dirs) {
      const RunRecord run = read_run(dir + "/" + r);
      if (run.captures.empty()) continue;
      for (const auto& [metric, member] : head_metric_fields()) {
        std::map<std::string, std::vector<double>> by_part;
        for (const HeadMetricRow& h : run.captures.back().heads) by_part[h.part].push_back(h.metrics.*member);
        for (const auto& [part, values] : by_part) {
          const double best = best_head_value(metric, values);
          if (std::isnan(best)) continue;
          auto& s = sums[part][metric];
          s.first += best, ++s.second;
        }
      }
    }
    for (const std::string& part : kParts) {
      if (!sums.count(part)) continue;
      rows << "<tr data-variant=\"" << (&variant - variants.data()) << "\"><td>" << escape(variant.name) << "</td><td>" << escape(part.empty() ? "self" : part) << "</td>";
      for (const auto& [metric, member] : head_metric_fields()) {
        const auto it = sums[part].find(metric);
        rows << "<td>" << (it == sums[part].end() ? "&ndash;" : fmt("%.3f", it->second.first / static_cast<double>(it->second.second))) << "</td>";
      }
      rows << "</tr>";
    }
  }
  if (rows.str().empty()) return "";
  std::ostringstream html;
  html << "<h2>Pattern metrics</h2><p class=\"note\">For each variant and attention part, each metric of the head that "
       << "scores best on it (lowest entropy and distance, largest |monotonicity|, highest otherwise) at the last capture, "
       << "mean over seeds; definitions in experiments/runner/patterns.hpp.</p><table><tr><th>variant</th><th>part</th>";
  for (const auto& [metric, member] : head_metric_fields()) html << "<th>" << metric << "</th>";
  html << "</tr>" << rows.str() << "</table>";
  return html.str();
}

// The facts at a glance: task, model, kernel, seed, and a finished run's size and speed.
std::string run_facts(const RunRecord& run, const YAML::Node& config, const std::string& kernels) {
  const YAML::Node model = config["model"];
  std::ostringstream html;
  html << "<p class=\"facts\"><span>task: <b>" << escape(config["task"]["name"].as<std::string>("?")) << "</b></span>"
       << "<span>model: <b>" << escape(model ? model["kind"].as<std::string>("?") : "?") << "</b></span>"
       << "<span>attention: <b>" << escape(kernels) << "</b></span>"
       << "<span>seed: " << escape(config["seed"].as<std::string>("?")) << "</span>";
  if (run.summary) {
    const RunSummary& s = *run.summary;
    if (s.status != "finished") html << "<span><b>" << escape(s.status) << "</b></span>";
    html << "<span>parameters: " << s.params << "</span><span>steps: " << s.steps << "</span><span>train time: "
         << fmt("%.1f s", s.train_seconds) << "</span><span>tokens/s: " << fmt("%.0f", s.tokens_per_s)
         << "</span><span>peak memory: " << fmt("%.0f MiB", s.peak_rss_mb) << "</span>";
  } else {
    html << "<span><b>unfinished</b> (no summary.json yet)</span>";
  }
  html << "</p>\n";
  return html.str();
}

// The final and best evaluations, and the final evaluation over its own batches.
std::string evaluation_table(const RunRecord& run) {
  const auto accuracy = run.eval_curve("token_accuracy"), exact = run.eval_curve("exact_match"), loss = run.eval_curve("loss");
  if (loss.empty()) return "";
  // Each column's best over the evaluations (NaN ones skipped; "-" when none is a number).
  const auto best = [](const std::vector<std::pair<double, double>>& curve, bool lowest) {
    double out = NAN;
    for (const auto& p : curve)
      if (!std::isnan(p.second) && (std::isnan(out) || (lowest ? p.second < out : p.second > out))) out = p.second;
    return out;
  };
  const double best_loss = best(loss, true), best_acc = best(accuracy, false), best_exact = best(exact, false);
  std::ostringstream html;
  html << "<table><tr><th></th><th>held-out loss</th><th>token accuracy</th><th>exact match</th></tr><tr><td>last evaluation "
       << "during training (step " << loss.back().first << ")</td><td>" << fmt("%.4f", loss.back().second) << "</td><td>"
       << fmt("%.2f%%", 100 * accuracy.back().second) << "</td><td>" << fmt("%.2f%%", 100 * exact.back().second) << "</td></tr><tr><td>best "
       << "evaluation during training (each column at its own step)</td><td>" << fmt("%.4f", best_loss) << "</td><td>"
       << fmt("%.2f%%", 100 * best_acc) << "</td><td>" << fmt("%.2f%%", 100 * best_exact) << "</td></tr>";
  for (const MetricRow& r : run.rows)
    if (r.split == "final") {
      html << "<tr><td>final evaluation (" << (run.summary ? std::to_string(run.summary->final_scored_tokens) : "?")
           << " scored)</td><td>" << fmt("%.4f", r.loss) << "</td><td>" << fmt("%.2f%%", 100 * r.token_accuracy) << "</td><td>"
           << fmt("%.2f%%", 100 * r.exact_match) << "</td></tr>";
    }
  html << "</table>\n";
  return html.str();
}

// The parts of one probe's capture, each under its title.
std::string probe_patterns(const std::string& run_dir, std::size_t step, std::size_t probe) {
  std::ostringstream html;
  for (const std::string& part : pattern_parts(run_dir, step)) {
    const std::string base = "patterns/step_" + std::to_string(step) + "_probe_" + std::to_string(probe) + part_suffix(part);
    if (!part.empty()) html << "<h4>" << escape(part_title(part)) << " ";
    html << "(<a href=\"" << base << ".npy\">.npy</a>, <a href=\"" << base << ".png\">.png</a>)" << (part.empty() ? "" : "</h4>")
         << pattern_grid(run_dir, step, probe, part);
  }
  return html.str();
}

// The last capture of every probe, the first capture of probe 0, and links to every capture.
std::string pattern_section(const std::string& run_dir, const std::string& why_none) {
  const std::vector<std::size_t> steps = captured_steps(run_dir);
  std::ostringstream html;
  html << "<h2>Attention patterns</h2>";
  if (steps.empty()) return html.str() + "<p class=\"note\">No patterns captured: " + escape(why_none) + ".</p>";
  const std::size_t last = steps.back(), probes = probe_count(run_dir, last);
  html << "<p class=\"note\">Each panel: queries down, keys across, colour by sqrt(weight) so that small weights stay "
       << "visible. Probes are fixed held-out examples; axes carry their tokens. Hover a cell for its tokens and weight, "
       << "a token under a layer's heads for where it attends in each head" << (probe_image(run_dir, 0) ? " (for images: a patch)" : "")
       << "; click a head to enlarge it.</p>";
  for (std::size_t p = 0; p < probes; ++p) html << "<h3>Probe " << p << " at step " << last << "</h3>" << probe_patterns(run_dir, last, p);
  if (steps.size() > 1) html << "<h3>Probe 0 at the first capture, step " << steps.front() << "</h3>" << probe_patterns(run_dir, steps.front(), 0);
  const std::string first_part = part_suffix(pattern_parts(run_dir, last).front());
  html << "<p class=\"note\">Every capture (probe 0" << (first_part.empty() ? "" : ", " + first_part.substr(1)) << "):";
  for (std::size_t s : steps) html << " <a href=\"patterns/step_" << s << "_probe_0" << first_part << ".png\">" << s << "</a>";
  html << "</p>";
  return html.str();
}

std::string evaluations_and_config(const RunRecord& run) {
  std::ostringstream html;
  html << "<h2>Evaluations</h2><table><tr><th>step</th><th>held-out loss</th><th>token accuracy</th><th>exact match</th>"
       << "<th>lr</th><th>elapsed s</th></tr>";
  for (const MetricRow& r : run.rows)
    if (r.split == "eval") {
      html << "<tr><td>" << r.step << "</td><td>" << fmt("%.4f", r.loss) << "</td><td>" << fmt("%.2f%%", 100 * r.token_accuracy)
           << "</td><td>" << fmt("%.2f%%", 100 * r.exact_match) << "</td><td>" << fmt("%.3g", r.lr) << "</td><td>"
           << fmt("%.1f", r.elapsed_s) << "</td></tr>";
    }
  html << "</table>\n<h2>Config</h2><p class=\"note\"><a href=\"config.yaml\">config.yaml</a> (resolved; runs again as "
       << "it is) &middot; <a href=\"metrics.csv\">metrics.csv</a> &middot; <a href=\"metrics.jsonl\">metrics.jsonl</a></p><pre>"
       << escape(run.config_text) << "</pre>\n";
  return html.str();
}

}  // namespace

void write_run_report(const std::string& run_dir) {
  if (!fs::exists(run_dir + "/config.yaml") && fs::exists(run_dir + "/compare.yaml")) {
    // A comparison's folder: its first line names the file and overrides `attnlab compare` ran.
    std::ifstream in(run_dir + "/compare.yaml");
    std::string first;
    std::getline(in, first);
    const std::string ran = first.rfind("# ", 0) == 0 ? first.substr(2) : "FILE";
    const std::size_t with = ran.find(" with ");
    throw std::runtime_error(run_dir + " is a comparison's folder, not a run's: `attnlab compare " +
                             (with == std::string::npos ? ran : ran.substr(0, with) + ran.substr(with + 5)) +
                             "`, run again from the folder it was run from, rewrites its summary and report.html (finished runs are "
                             "kept, not trained again); `attnlab report` rewrites one run's report (" + run_dir + "/runs/VARIANT/seed_S)");
  }
  const RunRecord run = read_run(run_dir);
  std::ostringstream html;
  try {
    const YAML::Node config = YAML::Load(run.config_text);
    const std::string name = config["name"] ? config["name"].as<std::string>() : fs::path(run_dir).filename().string();
    const auto [kernels, why_none] = kernels_and_why_no_patterns(run.config_text, run_dir + "/config.yaml");
    html << page_start("attnlab run: " + name) << run_facts(run, config, kernels) << evaluation_table(run);
    html << "<h2>Curves</h2><div class=\"charts\">"
         << line_chart("loss", {{"train (mean since last row)", run.train_loss_curve(), colour(0)}, {"held-out", run.eval_curve("loss"), colour(1)}},
                       YScale::log)
         << line_chart("held-out accuracy", {{"token accuracy", run.eval_curve("token_accuracy"), colour(2)},
                                            {"exact match", run.eval_curve("exact_match"), colour(3), dash(1)}},
                       YScale::unit)
         << "</div>\n";
    html << pattern_section(run_dir, why_none);
    html << "<h2>Pattern metrics per head</h2><p class=\"note\">Averaged over the probes at each capture; solid lines "
         << "are layer 0, dashed layer 1, dotted layer 2, dash-dot layer 3 (then again); colour is the head. See experiments/runner/patterns.hpp for the "
         << "definitions.</p>" << head_metric_charts(run) << head_metric_table(run);
    html << analysis_section(run_dir) << evaluations_and_config(run) << page_end();
  } catch (const YAML::Exception& e) {  // an edited config.yaml: said at its line and column, as `eval` says it
    throw ConfigError(run_dir + "/config.yaml", e.mark.line + 1, e.mark.column + 1, e.msg);
  }
  write_file_atomically(run_dir + "/report.html", html.str());
}

namespace {

// data-* attributes the page's script filters on: a variant's index and a seed (none: the mean over seeds).
std::string data_of(std::size_t variant, std::optional<std::uint64_t> seed) {
  return " data-variant=\"" + std::to_string(variant) + "\"" + (seed ? " data-seed=\"" + std::to_string(*seed) + "\"" : "");
}

// Check boxes for the variants and seeds the charts, patterns and lists show, and for the mean and each
// seed's curve (report.js hides what is unchecked).
std::string series_picker(const std::vector<ComparisonVariant>& variants) {
  std::set<std::uint64_t> seeds;
  for (const ComparisonVariant& v : variants) seeds.insert(v.seeds.begin(), v.seeds.end());
  std::ostringstream html;
  html << "<form class=\"series\"><b>Show</b> variants:";
  for (std::size_t v = 0; v < variants.size(); ++v)
    html << " <label><input type=\"checkbox\" name=\"variant\" value=\"" << v << "\" checked>" << escape(variants[v].name) << "</label>";
  html << "<br>seeds:";
  for (std::uint64_t s : seeds) html << " <label><input type=\"checkbox\" name=\"seed\" value=\"" << s << "\" checked>" << s << "</label>";
  html << " &middot; curves: <label><input type=\"checkbox\" name=\"curves\" value=\"mean\" checked>mean over seeds</label>"
       << "<label><input type=\"checkbox\" name=\"curves\" value=\"seeds\">each seed</label></form>";
  return html.str();
}

// The training loss and held-out metric of every variant: the mean over its seeds, and each seed thin.
std::string comparison_curves(const std::string& dir, const std::string& metric, const std::vector<ComparisonVariant>& variants) {
  std::vector<Series> loss, score;
  for (std::size_t v = 0; v < variants.size(); ++v) {
    std::vector<std::vector<std::pair<double, double>>> losses, scores;
    for (std::size_t r = 0; r < variants[v].run_dirs.size(); ++r) {
      const RunRecord run = read_run(dir + "/" + variants[v].run_dirs[r]);
      losses.push_back(run.train_loss_curve());
      scores.push_back(run.eval_curve(metric));
      const std::string name = variants[v].name + " seed " + std::to_string(variants[v].seeds[r]);
      Series l{name, losses.back()}, m{name, scores.back()};
      for (Series* s : {&l, &m}) style(*s, v), s->data = data_of(v, variants[v].seeds[r]) + " data-curve=\"seeds\" style=\"display:none\" opacity=\"0.55\"";
      loss.push_back(l), score.push_back(m);
    }
    const std::string label = variants[v].name + " (" + std::to_string(variants[v].run_dirs.size()) + " seeds)";
    Series l{label, mean_curve(losses)}, m{label, mean_curve(scores)};
    for (Series* s : {&l, &m}) style(*s, v), s->data = data_of(v, std::nullopt) + " data-curve=\"mean\"";
    loss.push_back(l), score.push_back(m);
  }
  return "<div class=\"charts\">" + line_chart("training loss", loss, YScale::log, 560, 300) +
         line_chart("held-out " + metric, score, metric == "loss" ? YScale::log : YScale::unit, 560, 300) + "</div>";
}

// Probe 0's final patterns of each variant's first seed that has any, side by side; the rest named once.
std::string comparison_patterns(const std::string& dir, const std::vector<ComparisonVariant>& variants) {
  std::ostringstream html, boxes;
  std::vector<std::string> without;
  for (std::size_t v = 0; v < variants.size(); ++v) {
    const std::string first = variants[v].run_dirs.empty() ? "" : dir + "/" + variants[v].run_dirs[0];
    const std::vector<std::size_t> steps = first.empty() ? std::vector<std::size_t>{} : captured_steps(first);
    if (steps.empty()) {
      without.push_back(variants[v].name + " (" + (first.empty() ? "it has no run yet" : why_run_has_no_patterns(first)) + ")");
      continue;
    }
    const std::vector<std::string> parts = pattern_parts(first, steps.back());
    const std::string part = std::find(parts.begin(), parts.end(), "cross") != parts.end() ? "cross" : parts.front();
    boxes << "<div class=\"variant\"" << data_of(v, variants[v].seeds[0]) << "><h3>" << escape(variants[v].name) << "</h3><p class=\"note\">step "
          << steps.back() << (part.empty() ? "" : ", " + escape(part_title(part))) << ", <a href=\"" << escape(variants[v].run_dirs[0])
          << "/report.html\">" << escape(variants[v].run_dirs[0]) << "</a></p>" << pattern_grid(first, steps.back(), 0, part) << "</div>";
  }
  html << "<h2>Attention patterns side by side</h2><p class=\"note\">Probe 0 of the first seed of each variant at its last "
       << "capture: the same held-out example in every variant. Queries down, keys across; hover a cell for its tokens and "
       << "weight, click a head to enlarge it.</p>";
  if (!without.empty()) {
    html << "<p class=\"note\">No patterns from ";
    for (std::size_t i = 0; i < without.size(); ++i) html << (i ? ", " : "") << escape(without[i]);
    html << ".</p>";
  }
  return html.str() + "<div class=\"variants\">" + boxes.str() + "</div>";
}

}  // namespace

void write_comparison_report(const std::string& dir, const std::string& title, const std::string& metric,
                             const std::vector<ComparisonVariant>& variants, const std::string& summary_table_html) {
  std::ostringstream html;
  html << page_start("attnlab comparison: " + title) << "<h2>Summary</h2>" << summary_table_html
       << "<p class=\"note\"><a href=\"summary.csv\">summary.csv</a> &middot; <a href=\"summary.md\">summary.md</a> &middot; "
       << "<a href=\"runs.csv\">runs.csv</a> (one row per run) &middot; <a href=\"compare.yaml\">compare.yaml</a></p>"
       << series_picker(variants) << "<h2>Curves</h2>" << comparison_curves(dir, metric, variants)
       << comparison_head_metrics(dir, variants) << comparison_analysis_section(dir, variants) << comparison_patterns(dir, variants)
       << "<h2>Runs</h2><ul>";
  for (std::size_t v = 0; v < variants.size(); ++v)
    for (std::size_t r = 0; r < variants[v].run_dirs.size(); ++r)
      html << "<li" << data_of(v, variants[v].seeds[r]) << "><a href=\"" << escape(variants[v].run_dirs[r]) << "/report.html\">"
           << escape(variants[v].run_dirs[r]) << "</a></li>";
  html << "</ul>\n" << page_end();
  write_file_atomically(dir + "/report.html", html.str());
}

}  // namespace attnlab
