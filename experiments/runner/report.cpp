#include "experiments/runner/report.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <regex>
#include <set>
#include <sstream>
#include <stdexcept>

#include "framework/io/image.hpp"
#include "framework/io/npy.hpp"

namespace attnlab {
namespace {

namespace fs = std::filesystem;

const double kNaN = std::numeric_limits<double>::quiet_NaN();

// Ten distinguishable colours (matplotlib's tab10), for series in order.
const char* colour(std::size_t i) {
  static const char* palette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                  "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
  return palette[i % 10];
}

std::string escape(const std::string& s) {
  std::string out;
  for (char ch : s) {
    switch (ch) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += ch;
    }
  }
  return out;
}

std::string fmt(const char* format, double v) {
  if (std::isnan(v)) return "-";
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, format, v);
  return buffer;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string base64(const std::string& bytes) {
  static const char* table = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  std::size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const unsigned v = (static_cast<unsigned char>(bytes[i]) << 16) | (static_cast<unsigned char>(bytes[i + 1]) << 8) |
                       static_cast<unsigned char>(bytes[i + 2]);
    out += table[v >> 18], out += table[(v >> 12) & 63], out += table[(v >> 6) & 63], out += table[v & 63];
  }
  if (i + 1 == bytes.size()) {
    const unsigned v = static_cast<unsigned char>(bytes[i]) << 16;
    out += table[v >> 18], out += table[(v >> 12) & 63], out += "==";
  } else if (i + 2 == bytes.size()) {
    const unsigned v = (static_cast<unsigned char>(bytes[i]) << 16) | (static_cast<unsigned char>(bytes[i + 1]) << 8);
    out += table[v >> 18], out += table[(v >> 12) & 63], out += table[(v >> 6) & 63], out += '=';
  }
  return out;
}

double number(const YAML::Node& node) {
  if (!node || node.IsNull()) return kNaN;
  return node.as<double>();
}

// ---- charts ----------------------------------------------------------------------------------------

struct Series {
  std::string name;
  std::vector<std::pair<double, double>> points;
  std::string colour;
  bool dashed = false;
};

// About five round tick values covering [low, high].
std::vector<double> ticks(double low, double high) {
  if (!(high > low)) return {low};
  const double raw = (high - low) / 5, magnitude = std::pow(10, std::floor(std::log10(raw)));
  const double step = magnitude * (raw / magnitude < 1.5 ? 1 : raw / magnitude < 3.5 ? 2 : raw / magnitude < 7.5 ? 5 : 10);
  std::vector<double> out;
  for (double t = std::ceil(low / step) * step; t <= high + step * 1e-9; t += step) out.push_back(std::abs(t) < step * 1e-9 ? 0 : t);
  return out;
}

std::string tick_label(double v) {
  char buffer[32];
  if (v != 0 && (std::abs(v) >= 1e5 || std::abs(v) < 1e-3)) {
    std::snprintf(buffer, sizeof buffer, "%.0e", v);
  } else {
    std::snprintf(buffer, sizeof buffer, "%g", v);
  }
  return buffer;
}

enum class YScale { linear, log, unit };  // unit: linear over [0, 1] (accuracies)

// A line chart: x is the step; a legend below when there is more than one series.
std::string line_chart(const std::string& title, const std::vector<Series>& series, YScale scale = YScale::linear,
                       int width = 460, int height = 260) {
  const bool log_y = scale == YScale::log;
  double x0 = std::numeric_limits<double>::infinity(), x1 = -x0, y0 = x0, y1 = -x0;
  for (const Series& s : series)
    for (const auto& [x, y] : s.points) {
      if (!std::isfinite(y) || (log_y && y <= 0)) continue;
      const double v = log_y ? std::log10(y) : y;
      x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, v), y1 = std::max(y1, v);
    }
  std::ostringstream svg;
  const int left = 52, right = 12, top = 24, bottom = 34;
  std::size_t longest = 0;
  for (const Series& s : series) longest = std::max(longest, s.name.size());
  const std::size_t columns = std::clamp<std::size_t>(static_cast<std::size_t>((width - 20) / (longest * 6.5 + 34)), 1, 4);
  const std::size_t legend_rows = series.size() > 1 ? (series.size() + columns - 1) / columns : 0;
  const int total_height = height + static_cast<int>(legend_rows) * 16;
  svg << "<svg class=\"chart\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << total_height
      << "\" viewBox=\"0 0 " << width << " " << total_height << "\" font-family=\"sans-serif\" font-size=\"11\">"
      << "<text x=\"" << width / 2 << "\" y=\"15\" text-anchor=\"middle\" font-weight=\"bold\">" << escape(title) << "</text>";
  if (!std::isfinite(x0)) {
    svg << "<text x=\"" << width / 2 << "\" y=\"" << height / 2 << "\" text-anchor=\"middle\" fill=\"#777\">no data yet</text></svg>";
    return svg.str();
  }
  if (x1 == x0) x0 -= 1, x1 += 1;
  if (scale == YScale::unit) y0 = std::min(y0, 0.0), y1 = std::max(y1, 1.0);
  if (y1 == y0) y0 -= 0.5, y1 += 0.5;
  const double pad = (y1 - y0) * 0.04;
  y0 -= pad, y1 += pad;
  const double plot_w = width - left - right, plot_h = height - top - bottom;
  auto px = [&](double x) { return left + (x - x0) / (x1 - x0) * plot_w; };
  auto py = [&](double y) { return top + (1 - ((log_y ? std::log10(y) : y) - y0) / (y1 - y0)) * plot_h; };
  svg << "<rect x=\"" << left << "\" y=\"" << top << "\" width=\"" << plot_w << "\" height=\"" << plot_h
      << "\" fill=\"none\" stroke=\"#999\"/>";
  for (double t : ticks(x0, x1)) {
    svg << "<line x1=\"" << px(t) << "\" x2=\"" << px(t) << "\" y1=\"" << top + plot_h << "\" y2=\"" << top + plot_h + 4
        << "\" stroke=\"#999\"/><text x=\"" << px(t) << "\" y=\"" << top + plot_h + 15 << "\" text-anchor=\"middle\">"
        << tick_label(t) << "</text>";
  }
  svg << "<text x=\"" << left + plot_w / 2 << "\" y=\"" << height - 4 << "\" text-anchor=\"middle\" fill=\"#555\">step</text>";
  if (log_y) {
    // Powers of ten, and 2 and 5 times them when the range spans less than about two decades.
    const std::vector<double> mantissas = y1 - y0 < 2 ? std::vector<double>{1, 2, 5} : std::vector<double>{1};
    for (double e = std::floor(y0); e <= y1; ++e)
      for (double m : mantissas) {
        const double v = std::log10(m) + e;
        if (v < y0 || v > y1) continue;
        const double y = top + (1 - (v - y0) / (y1 - y0)) * plot_h;
        svg << "<line x1=\"" << left << "\" x2=\"" << left + plot_w << "\" y1=\"" << y << "\" y2=\"" << y
            << "\" stroke=\"#eee\"/><text x=\"" << left - 4 << "\" y=\"" << y + 4 << "\" text-anchor=\"end\">"
            << tick_label(m * std::pow(10, e)) << "</text>";
      }
  } else {
    for (double t : ticks(y0, y1)) {
      const double y = top + (1 - (t - y0) / (y1 - y0)) * plot_h;
      svg << "<line x1=\"" << left << "\" x2=\"" << left + plot_w << "\" y1=\"" << y << "\" y2=\"" << y
          << "\" stroke=\"#eee\"/><text x=\"" << left - 4 << "\" y=\"" << y + 4 << "\" text-anchor=\"end\">" << tick_label(t)
          << "</text>";
    }
  }
  for (const Series& s : series) {
    std::ostringstream path;
    std::size_t drawn = 0;
    for (const auto& [x, y] : s.points) {
      if (!std::isfinite(y) || (log_y && y <= 0)) continue;
      path << (drawn++ ? " L" : "M") << px(x) << " " << py(y);
    }
    if (drawn == 0) continue;
    svg << "<path d=\"" << path.str() << "\" fill=\"none\" stroke=\"" << s.colour << "\" stroke-width=\"1.6\""
        << (s.dashed ? " stroke-dasharray=\"5 3\"" : "") << "><title>" << escape(s.name) << "</title></path>";
    if (drawn == 1) svg << "<circle cx=\"" << px(s.points.back().first) << "\" cy=\"" << py(s.points.back().second) << "\" r=\"2.5\" fill=\"" << s.colour << "\"/>";
  }
  for (std::size_t i = 0; i < series.size() && legend_rows; ++i) {
    const double x = 10 + static_cast<double>(i % columns) * (width - 20) / static_cast<double>(columns);
    const double y = height + static_cast<double>(i / columns) * 16 + 4;
    svg << "<line x1=\"" << x << "\" x2=\"" << x + 18 << "\" y1=\"" << y << "\" y2=\"" << y << "\" stroke=\"" << series[i].colour
        << "\" stroke-width=\"2\"" << (series[i].dashed ? " stroke-dasharray=\"5 3\"" : "") << "/><text x=\"" << x + 22
        << "\" y=\"" << y + 4 << "\">" << escape(series[i].name) << "</text>";
  }
  svg << "</svg>";
  return svg.str();
}

// The sqrt colour scale of the heatmaps, 0 to 1.
std::string colour_bar() {
  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"260\" height=\"34\" font-family=\"sans-serif\" font-size=\"10\">"
      << "<defs><linearGradient id=\"viridis\">";
  for (int i = 0; i <= 10; ++i) {
    unsigned char rgb[3];
    viridis(i / 10.0, rgb);
    char stop[96];
    std::snprintf(stop, sizeof stop, "<stop offset=\"%d%%\" stop-color=\"rgb(%d,%d,%d)\"/>", i * 10, rgb[0], rgb[1], rgb[2]);
    svg << stop;
  }
  svg << "</linearGradient></defs><rect x=\"10\" y=\"2\" width=\"240\" height=\"12\" fill=\"url(#viridis)\"/>";
  for (double w : {0.0, 0.01, 0.1, 0.25, 0.5, 1.0}) {
    const double x = 10 + 240 * std::sqrt(w);
    svg << "<line x1=\"" << x << "\" x2=\"" << x << "\" y1=\"14\" y2=\"18\" stroke=\"#333\"/><text x=\"" << x
        << "\" y=\"29\" text-anchor=\"middle\">" << tick_label(w) << "</text>";
  }
  svg << "</svg>";
  return svg.str();
}

// ---- heatmaps ----------------------------------------------------------------------------------------

// The display labels of a probe's tokens (patterns/probe_P_labels.txt, one per line), or positions.
std::vector<std::string> probe_labels(const std::string& run_dir, std::size_t probe, std::size_t length) {
  std::vector<std::string> labels;
  std::ifstream in(run_dir + "/patterns/probe_" + std::to_string(probe) + "_labels.txt");
  for (std::string line; labels.size() < length && std::getline(in, line);) labels.push_back(line);
  if (labels.size() != length) {
    labels.clear();
    for (std::size_t i = 0; i < length; ++i) labels.push_back(std::to_string(i));
  }
  return labels;
}

// One head's pattern as an SVG panel: the PNG (a pixel per cell, scaled without smoothing) with the
// key tokens across the top and the query tokens down the left.
std::string heatmap_panel(const double* pattern, std::size_t tq, std::size_t tk, const std::vector<std::string>& query_labels,
                          const std::vector<std::string>& key_labels, const std::string& title) {
  // Small sequences get big cells; long ones stay readable by zooming (the labels are vector text).
  const double cell = std::clamp(260.0 / static_cast<double>(std::max(tq, tk)), 3.0, 16.0);
  const bool labelled = std::max(tq, tk) <= 128;
  const double font = std::min(10.0, cell * 0.95);
  std::size_t longest = 1;
  for (const auto& l : key_labels) longest = std::max(longest, l.size());
  for (const auto& l : query_labels) longest = std::max(longest, l.size());
  const double margin = labelled ? 6 + font * 0.65 * static_cast<double>(std::min<std::size_t>(longest, 8)) : 4;
  const double w = margin + cell * static_cast<double>(tk) + 4, h = 16 + margin + cell * static_cast<double>(tq) + 4;
  std::ostringstream svg;
  svg << "<svg class=\"heatmap\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" << w << "\" height=\"" << h
      << "\" font-family=\"monospace\"><text x=\"" << w / 2 << "\" y=\"11\" text-anchor=\"middle\" font-family=\"sans-serif\" "
      << "font-size=\"11\">" << escape(title) << "</text>";
  const double x0 = margin, y0 = 16 + margin;
  svg << "<image x=\"" << x0 << "\" y=\"" << y0 << "\" width=\"" << cell * static_cast<double>(tk) << "\" height=\""
      << cell * static_cast<double>(tq) << "\" preserveAspectRatio=\"none\" style=\"image-rendering:pixelated\" href=\"data:image/png;base64,"
      << base64(encode_pattern_png(pattern, tq, tk)) << "\"/>";
  if (labelled) {
    for (std::size_t j = 0; j < tk; ++j) {
      const double x = x0 + (static_cast<double>(j) + 0.5) * cell;
      svg << "<text font-size=\"" << font << "\" text-anchor=\"start\" transform=\"translate(" << x + font * 0.35 << ","
          << y0 - 2 << ") rotate(-90)\">" << escape(key_labels[j]) << "</text>";
    }
    for (std::size_t i = 0; i < tq; ++i) {
      svg << "<text font-size=\"" << font << "\" text-anchor=\"end\" x=\"" << x0 - 2 << "\" y=\""
          << y0 + (static_cast<double>(i) + 0.5) * cell + font * 0.35 << "\">" << escape(query_labels[i]) << "</text>";
    }
  }
  svg << "</svg>";
  return svg.str();
}

// Every layer's heads for one capture of one probe (patterns/step_S_probe_P.npy), a row per layer.
std::string pattern_grid(const std::string& run_dir, std::size_t step, std::size_t probe) {
  const std::string file = run_dir + "/patterns/step_" + std::to_string(step) + "_probe_" + std::to_string(probe) + ".npy";
  if (!fs::exists(file)) return "<p class=\"note\">no pattern file " + escape(file) + "</p>";
  const Tensor t = read_npy(file);
  if (t.dim() != 4) throw std::runtime_error(file + ": expected [layers, heads, queries, keys], got " + shape_str(t.shape()));
  const std::size_t layers = t.size(0), heads = t.size(1), tq = t.size(2), tk = t.size(3);
  const std::vector<double> v = t.to_vector();
  const std::vector<std::string> keys = probe_labels(run_dir, probe, tk);
  const std::vector<std::string> queries = tq == tk ? keys : probe_labels("", probe, tq);
  std::ostringstream html;
  for (std::size_t l = 0; l < layers; ++l) {
    html << "<div class=\"heads\">";
    for (std::size_t h = 0; h < heads; ++h) {
      html << heatmap_panel(v.data() + (l * heads + h) * tq * tk, tq, tk, queries, keys,
                            "layer " + std::to_string(l) + " head " + std::to_string(h));
    }
    html << "</div>";
  }
  return html.str();
}

// The captured steps that have a pattern file for probe 0, ascending.
std::vector<std::size_t> captured_steps(const std::string& run_dir) {
  std::vector<std::size_t> steps;
  const std::regex name("step_([0-9]+)_probe_0\\.npy");
  if (!fs::exists(run_dir + "/patterns")) return steps;
  for (const auto& entry : fs::directory_iterator(run_dir + "/patterns")) {
    std::smatch m;
    const std::string file = entry.path().filename().string();
    if (std::regex_match(file, m, name)) steps.push_back(std::stoul(m[1].str()));
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

std::size_t probe_count(const std::string& run_dir, std::size_t step) {
  std::size_t n = 0;
  while (fs::exists(run_dir + "/patterns/step_" + std::to_string(step) + "_probe_" + std::to_string(n) + ".npy")) ++n;
  return n;
}

const char* kStyle = R"(<style>
body { font-family: sans-serif; margin: 24px; color: #222; }
h1 { font-size: 22px; } h2 { font-size: 18px; margin-top: 32px; border-bottom: 1px solid #ddd; } h3 { font-size: 14px; }
table { border-collapse: collapse; font-size: 13px; } td, th { border: 1px solid #ccc; padding: 3px 8px; text-align: right; }
th { background: #f4f4f4; } td:first-child, th:first-child { text-align: left; }
pre { background: #f7f7f7; padding: 10px; font-size: 12px; overflow-x: auto; }
.charts, .heads, .variants { display: flex; flex-wrap: wrap; gap: 12px; align-items: flex-start; }
.variant { border: 1px solid #ddd; padding: 6px; } .note { color: #666; font-size: 13px; }
.facts span { display: inline-block; margin-right: 18px; }
</style>)";

std::string page_start(const std::string& title) {
  return "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>" + escape(title) + "</title>" + kStyle +
         "</head><body>\n<h1>" + escape(title) + "</h1>\n";
}

std::string summary_value(const RunRecord& run, const std::string& key) {
  const auto it = run.summary.find(key);
  return it == run.summary.end() ? "" : it->second;
}

double summary_number(const RunRecord& run, const std::string& key) {
  const std::string v = summary_value(run, key);
  try {
    return v.empty() ? kNaN : std::stod(v);
  } catch (const std::exception&) {
    return kNaN;
  }
}

// The metric names of the per-head rows, in the order patterns.hpp lists them.
const std::vector<std::string>& head_metric_names() {
  static const std::vector<std::string> names = {"entropy", "mean_distance", "diagonal", "previous_token", "anti_diagonal", "induction"};
  return names;
}

// One chart per head metric over the capture steps, a line per head.
std::string head_metric_charts(const RunRecord& run) {
  if (run.captures.empty()) return "<p class=\"note\">no pattern captures in metrics.jsonl</p>";
  std::ostringstream html;
  html << "<div class=\"charts\">";
  for (const std::string& metric : head_metric_names()) {
    std::map<std::pair<std::size_t, std::size_t>, Series> by_head;
    for (const PatternCapture& c : run.captures)
      for (const HeadMetricRow& h : c.heads) {
        Series& s = by_head[{h.layer, h.head}];
        s.name = "L" + std::to_string(h.layer) + "H" + std::to_string(h.head);
        const auto it = h.values.find(metric);
        s.points.emplace_back(static_cast<double>(c.step), it == h.values.end() ? kNaN : it->second);
      }
    std::vector<Series> series;
    for (auto& [key, s] : by_head) {
      s.colour = colour(key.second);
      s.dashed = key.first % 2 == 1;  // layers alternate solid and dashed; heads share colours across layers
      series.push_back(s);
    }
    html << line_chart(metric, series, metric == "entropy" || metric == "mean_distance" ? YScale::linear : YScale::unit, 420, 240);
  }
  html << "</div>";
  return html.str();
}

// The last capture's metrics as a table, each metric's highest head in bold.
std::string head_metric_table(const RunRecord& run) {
  if (run.captures.empty()) return "";
  const PatternCapture& last = run.captures.back();
  std::map<std::string, double> best;
  for (const HeadMetricRow& h : last.heads)
    for (const auto& [k, v] : h.values) best[k] = std::max(best.count(k) ? best[k] : -1e300, v);
  std::ostringstream html;
  html << "<p>At step " << last.step << " (bold: the highest head of each metric):</p><table><tr><th>head</th>";
  for (const std::string& m : head_metric_names()) html << "<th>" << m << "</th>";
  html << "</tr>";
  for (const HeadMetricRow& h : last.heads) {
    html << "<tr><td>layer " << h.layer << " head " << h.head << "</td>";
    for (const std::string& m : head_metric_names()) {
      const auto it = h.values.find(m);
      const double v = it == h.values.end() ? kNaN : it->second;
      const bool top = !std::isnan(v) && v == best[m];
      html << "<td>" << (top ? "<b>" : "") << fmt("%.3f", v) << (top ? "</b>" : "") << "</td>";
    }
    html << "</tr>";
  }
  html << "</table>";
  return html.str();
}

// Mean over runs of a curve, at the steps every run has.
std::vector<std::pair<double, double>> mean_curve(const std::vector<std::vector<std::pair<double, double>>>& curves) {
  std::map<double, std::pair<double, std::size_t>> sums;
  for (const auto& c : curves)
    for (const auto& [x, y] : c) {
      auto& s = sums[x];
      s.first += y, ++s.second;
    }
  std::vector<std::pair<double, double>> out;
  for (const auto& [x, s] : sums)
    if (s.second == curves.size()) out.emplace_back(x, s.first / static_cast<double>(s.second));
  return out;
}

}  // namespace

std::vector<std::pair<double, double>> RunRecord::eval_curve(const std::string& metric) const {
  std::vector<std::pair<double, double>> out;
  for (const MetricRow& r : rows) {
    if (r.split != "eval") continue;
    const double v = metric == "loss" ? r.loss : metric == "exact_match" ? r.exact_match : r.token_accuracy;
    out.emplace_back(static_cast<double>(r.step), v);
  }
  return out;
}

double RunRecord::final_value(const std::string& metric) const {
  for (auto r = rows.rbegin(); r != rows.rend(); ++r)
    if (r->split == "final") return metric == "loss" ? r->loss : metric == "exact_match" ? r->exact_match : r->token_accuracy;
  const auto curve = eval_curve(metric);
  return curve.empty() ? kNaN : curve.back().second;
}

std::vector<std::pair<double, double>> RunRecord::train_loss_curve() const {
  std::vector<std::pair<double, double>> out;
  for (const MetricRow& r : rows)
    if (r.split == "train") out.emplace_back(static_cast<double>(r.step), r.loss);
  return out;
}

RunRecord read_run(const std::string& run_dir) {
  RunRecord run;
  run.dir = run_dir;
  run.config_text = read_text(run_dir + "/config.yaml");
  std::ifstream in(run_dir + "/metrics.jsonl");
  if (!in) throw std::runtime_error("cannot read " + run_dir + "/metrics.jsonl");
  std::size_t line_number = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_number;
    if (line.empty()) continue;
    try {
      const YAML::Node row = YAML::Load(line);  // JSON is YAML
      const std::string split = row["split"].as<std::string>();
      const auto step = row["step"].as<std::size_t>();
      if (split == "patterns") {
        PatternCapture capture;
        capture.step = step;
        for (const YAML::Node& h : row["heads"]) {
          HeadMetricRow head;
          for (const auto& kv : h) {
            const std::string key = kv.first.as<std::string>();
            if (key == "layer") {
              head.layer = kv.second.as<std::size_t>();
            } else if (key == "head") {
              head.head = kv.second.as<std::size_t>();
            } else {
              head.values[key] = kv.second.as<double>();
            }
          }
          capture.heads.push_back(head);
        }
        run.captures.push_back(capture);
      } else {
        MetricRow r;
        r.step = step;
        r.split = split;
        r.loss = number(row["loss"]), r.token_accuracy = number(row["token_accuracy"]), r.exact_match = number(row["exact_match"]);
        r.lr = number(row["lr"]), r.tokens_per_s = number(row["tokens_per_s"]), r.elapsed_s = number(row["elapsed_s"]);
        run.rows.push_back(r);
      }
    } catch (const YAML::Exception& e) {
      throw std::runtime_error(run_dir + "/metrics.jsonl:" + std::to_string(line_number) + ": not a metrics row (" + e.msg + ")");
    }
  }
  const std::string summary_file = run_dir + "/summary.json";
  if (fs::exists(summary_file)) {
    try {
      const YAML::Node s = YAML::LoadFile(summary_file);
      for (const auto& kv : s)
        if (kv.second.IsScalar()) run.summary[kv.first.as<std::string>()] = kv.second.as<std::string>();
    } catch (const YAML::Exception& e) {
      throw std::runtime_error(summary_file + ": not valid JSON (" + e.msg + ")");
    }
  }
  return run;
}

void write_file_atomic(const std::string& path, const std::string& text) {
  const std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out << text;
    out.flush();
    if (!out) throw std::runtime_error("cannot write " + temporary);
  }
  fs::rename(temporary, path);
}

void write_run_report(const std::string& run_dir) {
  const RunRecord run = read_run(run_dir);
  const YAML::Node config = YAML::Load(run.config_text);
  const std::string name = config["name"] ? config["name"].as<std::string>() : fs::path(run_dir).filename().string();
  std::ostringstream html;
  html << page_start("attnlab run: " + name);

  // The facts at a glance.
  const YAML::Node model = config["model"], attention = model ? model["attention"] : YAML::Node();
  html << "<p class=\"facts\"><span>task: <b>" << escape(config["task"]["name"].as<std::string>("?")) << "</b></span>"
       << "<span>model: <b>" << escape(model ? model["kind"].as<std::string>("?") : "?") << "</b></span>"
       << "<span>attention: <b>" << escape(attention ? attention["name"].as<std::string>("?") : "?") << "</b></span>"
       << "<span>seed: " << escape(config["seed"].as<std::string>("?")) << "</span>";
  if (run.finished()) {
    html << "<span>parameters: " << escape(summary_value(run, "params")) << "</span><span>steps: "
         << escape(summary_value(run, "steps")) << "</span><span>train time: "
         << fmt("%.1f s", summary_number(run, "train_seconds")) << "</span><span>tokens/s: "
         << fmt("%.0f", summary_number(run, "tokens_per_s")) << "</span><span>peak memory: "
         << fmt("%.0f MiB", summary_number(run, "peak_rss_mb")) << "</span>";
  } else {
    html << "<span><b>unfinished</b> (no summary.json yet)</span>";
  }
  html << "</p>\n";

  // Final and best evaluation.
  const auto accuracy = run.eval_curve("token_accuracy"), exact = run.eval_curve("exact_match"), eval_loss = run.eval_curve("loss");
  if (!eval_loss.empty()) {
    double best_loss = INFINITY, best_acc = -1;
    for (const auto& p : eval_loss) best_loss = std::min(best_loss, p.second);
    for (const auto& p : accuracy) best_acc = std::max(best_acc, p.second);
    html << "<table><tr><th></th><th>held-out loss</th><th>token accuracy</th><th>exact match</th></tr><tr><td>final (step "
         << eval_loss.back().first << ")</td><td>" << fmt("%.4f", eval_loss.back().second) << "</td><td>"
         << fmt("%.2f%%", 100 * accuracy.back().second) << "</td><td>" << fmt("%.2f%%", 100 * exact.back().second)
         << "</td></tr><tr><td>best</td><td>" << fmt("%.4f", best_loss) << "</td><td>" << fmt("%.2f%%", 100 * best_acc)
         << "</td><td></td></tr>";
    for (const MetricRow& r : run.rows)
      if (r.split == "final") {
        html << "<tr><td>final evaluation (" << escape(summary_value(run, "final_scored_tokens")) << " scored)</td><td>"
             << fmt("%.4f", r.loss) << "</td><td>" << fmt("%.2f%%", 100 * r.token_accuracy) << "</td><td>"
             << fmt("%.2f%%", 100 * r.exact_match) << "</td></tr>";
      }
    html << "</table>\n";
  }

  html << "<h2>Curves</h2><div class=\"charts\">"
       << line_chart("loss", {{"train (mean since last row)", run.train_loss_curve(), colour(0)}, {"held-out", eval_loss, colour(1)}}, YScale::log)
       << line_chart("held-out accuracy", {{"token accuracy", accuracy, colour(2)}, {"exact match", exact, colour(3), true}}, YScale::unit)
       << "</div>\n";

  // Patterns: the last capture of every probe, then links to every capture.
  const std::vector<std::size_t> steps = captured_steps(run_dir);
  html << "<h2>Attention patterns</h2>";
  if (steps.empty()) {
    html << "<p class=\"note\">No patterns captured (log.patterns is off, or the kernel has none).</p>";
  } else {
    const std::size_t last = steps.back(), probes = probe_count(run_dir, last);
    html << "<p class=\"note\">Each panel: queries down, keys across, colour by sqrt(weight) so that small weights stay "
         << "visible. Probes are fixed held-out examples; axes carry their tokens.</p>" << colour_bar();
    for (std::size_t p = 0; p < probes; ++p) {
      html << "<h3>Probe " << p << " at step " << last << " (<a href=\"patterns/step_" << last << "_probe_" << p
           << ".npy\">.npy</a>, <a href=\"patterns/step_" << last << "_probe_" << p << ".png\">.png</a>)</h3>"
           << pattern_grid(run_dir, last, p);
    }
    if (steps.size() > 1) {
      html << "<h3>Probe 0 at the first capture, step " << steps.front() << "</h3>" << pattern_grid(run_dir, steps.front(), 0);
    }
    html << "<p class=\"note\">Every capture (probe 0):";
    for (std::size_t s : steps) html << " <a href=\"patterns/step_" << s << "_probe_0.png\">" << s << "</a>";
    html << "</p>";
  }
  html << "<h2>Pattern metrics per head</h2><p class=\"note\">Averaged over the probes at each capture; solid lines "
       << "are even layers, dashed odd ones; colour is the head. See experiments/runner/patterns.hpp for the "
       << "definitions.</p>"
       << head_metric_charts(run) << head_metric_table(run);

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
       << escape(run.config_text) << "</pre>\n</body></html>\n";
  write_file_atomic(run_dir + "/report.html", html.str());
}

void write_comparison_report(const std::string& dir, const std::string& title, const std::string& metric,
                             const std::vector<ComparisonVariant>& variants, const std::string& summary_table_html) {
  std::ostringstream html;
  html << page_start("attnlab comparison: " + title);
  html << "<h2>Summary</h2>" << summary_table_html
       << "<p class=\"note\"><a href=\"summary.csv\">summary.csv</a> &middot; <a href=\"summary.md\">summary.md</a> &middot; "
       << "<a href=\"runs.csv\">runs.csv</a> (one row per run) &middot; <a href=\"compare.yaml\">compare.yaml</a></p>";

  std::vector<Series> loss, score;
  std::vector<RunRecord> first_runs;
  for (std::size_t v = 0; v < variants.size(); ++v) {
    std::vector<std::vector<std::pair<double, double>>> losses, scores;
    for (const std::string& r : variants[v].run_dirs) {
      const RunRecord run = read_run(dir + "/" + r);
      losses.push_back(run.train_loss_curve());
      scores.push_back(run.eval_curve(metric));
      if (first_runs.size() == v) first_runs.push_back(run);
    }
    if (first_runs.size() == v) first_runs.emplace_back();  // no finished run
    const std::string label = variants[v].name + " (" + std::to_string(variants[v].run_dirs.size()) + " seeds)";
    loss.push_back({label, mean_curve(losses), colour(v)});
    score.push_back({label, mean_curve(scores), colour(v)});
  }
  html << "<h2>Curves (mean over seeds)</h2><div class=\"charts\">" << line_chart("training loss", loss, YScale::log, 560, 300)
       << line_chart("held-out " + metric, score, metric == "loss" ? YScale::log : YScale::unit, 560, 300) << "</div>";

  html << "<h2>Attention patterns side by side</h2><p class=\"note\">Probe 0 of the first seed of each variant at its last "
       << "capture: the same held-out example in every variant. Queries down, keys across, colour by sqrt(weight).</p>"
       << colour_bar() << "<div class=\"variants\">";
  for (std::size_t v = 0; v < variants.size(); ++v) {
    html << "<div class=\"variant\"><h3>" << escape(variants[v].name) << "</h3>";
    const std::vector<std::size_t> steps = first_runs[v].dir.empty() ? std::vector<std::size_t>{} : captured_steps(first_runs[v].dir);
    if (steps.empty()) {
      html << "<p class=\"note\">no patterns</p>";
    } else {
      html << "<p class=\"note\">step " << steps.back() << ", <a href=\"" << escape(variants[v].run_dirs[0]) << "/report.html\">"
           << escape(variants[v].run_dirs[0]) << "</a></p>" << pattern_grid(first_runs[v].dir, steps.back(), 0);
    }
    html << "</div>";
  }
  html << "</div><h2>Runs</h2><ul>";
  for (const ComparisonVariant& v : variants)
    for (const std::string& r : v.run_dirs)
      html << "<li><a href=\"" << escape(r) << "/report.html\">" << escape(r) << "</a></li>";
  html << "</ul>\n</body></html>\n";
  write_file_atomic(dir + "/report.html", html.str());
}

}  // namespace attnlab
