#include "experiments/runner/report_svg.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "framework/io/image.hpp"

namespace attnlab::report {
namespace {

// About five round tick values covering [low, high].
std::vector<double> ticks(double low, double high) {
  if (!(high > low)) return {low};
  const double raw = (high - low) / 5, magnitude = std::pow(10, std::floor(std::log10(raw)));
  const double step = magnitude * (raw / magnitude < 1.5 ? 1 : raw / magnitude < 3.5 ? 2 : raw / magnitude < 7.5 ? 5 : 10);
  std::vector<double> out;
  for (double t = std::ceil(low / step) * step; t <= high + step * 1e-9; t += step) out.push_back(std::abs(t) < step * 1e-9 ? 0 : t);
  return out;
}

std::string tick_label(double v) { return short_number(v); }

// The labels of an axis's ticks: short_number's, or where that rounds two ticks alike (999.5 and 1000
// both "1000"), plain decimals with as many places as tell them apart.
std::vector<std::string> tick_labels(const std::vector<std::pair<double, double>>& ticks) {
  std::vector<std::string> labels;
  for (const auto& tick : ticks) labels.push_back(tick_label(tick.second));
  for (int places = 0; places <= 6; ++places) {
    if (std::adjacent_find(labels.begin(), labels.end()) == labels.end()) break;
    labels.clear();
    for (const auto& tick : ticks) {
      char text[32];
      std::snprintf(text, sizeof text, "%.*f", places, tick.second);
      labels.push_back(text);
    }
  }
  return labels;
}

// Where a chart's data falls on the canvas.
struct Frame {
  double x0 = std::numeric_limits<double>::infinity(), x1 = -x0, y0 = x0, y1 = -x0;  // in log10 when log_x, log_y
  double left = 52, top = 24, plot_w = 0, plot_h = 0;
  bool log_x = false, log_y = false;
  bool empty() const { return !std::isfinite(x0); }
  double px(double x) const { return left + ((log_x ? std::log10(x) : x) - x0) / (x1 - x0) * plot_w; }
  double py(double y) const { return top + (1 - ((log_y ? std::log10(y) : y) - y0) / (y1 - y0)) * plot_h; }
  bool drawable(double x, double y) const { return std::isfinite(x) && std::isfinite(y) && (!log_x || x > 0) && (!log_y || y > 0); }
};

Frame frame_for(const std::vector<Series>& series, YScale scale, int width, int height, bool log_x) {
  Frame f;
  f.log_y = scale == YScale::log;
  f.log_x = log_x;
  for (const Series& s : series)
    for (const auto& [x, y] : s.points) {
      if (!f.drawable(x, y)) continue;
      const double u = f.log_x ? std::log10(x) : x, v = f.log_y ? std::log10(y) : y;
      f.x0 = std::min(f.x0, u), f.x1 = std::max(f.x1, u), f.y0 = std::min(f.y0, v), f.y1 = std::max(f.y1, v);
    }
  if (f.empty()) return f;
  if (f.x1 == f.x0) {  // one x (a single capture): a margin of 5% of it either side, at least 1
    const double margin = std::max(1.0, std::fabs(f.x0) * 0.05);
    f.x0 -= margin, f.x1 += margin;
  }
  if (f.log_x) {
    const double pad = (f.x1 - f.x0) * 0.04;
    f.x0 -= pad, f.x1 += pad;
  }
  if (scale == YScale::unit) f.y0 = std::min(f.y0, 0.0), f.y1 = std::max(f.y1, 1.0);
  if (scale == YScale::signed_unit) f.y0 = std::min(f.y0, -1.0), f.y1 = std::max(f.y1, 1.0);
  if (f.y1 == f.y0) f.y0 -= 0.5, f.y1 += 0.5;
  const double pad = (f.y1 - f.y0) * 0.04;
  f.y0 -= pad, f.y1 += pad;
  f.plot_w = width - f.left - 12;
  f.plot_h = height - f.top - 34;
  return f;
}

// A horizontal grid line at canvas height y, labelled `label` on the left.
void grid_line(std::ostringstream& svg, const Frame& f, double y, const std::string& label) {
  svg << "<line x1=\"" << f.left << "\" x2=\"" << f.left + f.plot_w << "\" y1=\"" << y << "\" y2=\"" << y
      << "\" stroke=\"#eee\"/><text x=\"" << f.left - 4 << "\" y=\"" << y + 4 << "\" text-anchor=\"end\">" << label << "</text>";
}

// Tick positions over [low, high] (log10 units when `log`) with their values: round values, or on a log
// scale powers of ten, and 2 and 5 times them when the range spans less than about two decades.
std::vector<std::pair<double, double>> axis_ticks(double low, double high, bool log) {
  std::vector<std::pair<double, double>> out;
  if (!log) {
    for (double t : ticks(low, high)) out.emplace_back(t, t);
    return out;
  }
  const std::vector<double> mantissas = high - low < 2 ? std::vector<double>{1, 2, 5} : std::vector<double>{1};
  for (double e = std::floor(low); e <= high; ++e)
    for (double m : mantissas) {
      const double v = std::log10(m) + e;
      if (v >= low && v <= high) out.emplace_back(v, m * std::pow(10, e));
    }
  if (out.size() < 2) {  // a range within a factor of about two: round values between its ends, placed on the log scale
    out.clear();
    for (double t : ticks(std::pow(10, low), std::pow(10, high)))
      if (t > 0) out.emplace_back(std::log10(t), t);
  }
  return out;
}

void draw_axes(std::ostringstream& svg, const Frame& f, int height, const std::string& x_label) {
  svg << "<rect x=\"" << f.left << "\" y=\"" << f.top << "\" width=\"" << f.plot_w << "\" height=\"" << f.plot_h
      << "\" fill=\"none\" stroke=\"#999\"/>";
  const auto x_ticks = axis_ticks(f.x0, f.x1, f.log_x);
  const std::vector<std::string> x_labels = tick_labels(x_ticks);
  for (std::size_t i = 0; i < x_ticks.size(); ++i) {
    const double x = f.left + (x_ticks[i].first - f.x0) / (f.x1 - f.x0) * f.plot_w;
    // A label that would cross the frame's edge is anchored at its tick instead of centred on it.
    const std::string& label = x_labels[i];
    const double half = 3.2 * static_cast<double>(label.size());
    const char* anchor = x + half > f.left + f.plot_w + 10 ? "end" : x - half < f.left - 10 ? "start" : "middle";
    svg << "<line x1=\"" << x << "\" x2=\"" << x << "\" y1=\"" << f.top + f.plot_h << "\" y2=\"" << f.top + f.plot_h + 4
        << "\" stroke=\"#999\"/><text x=\"" << x << "\" y=\"" << f.top + f.plot_h + 15 << "\" text-anchor=\"" << anchor << "\">"
        << label << "</text>";
  }
  svg << "<text x=\"" << f.left + f.plot_w / 2 << "\" y=\"" << height - 4 << "\" text-anchor=\"middle\" fill=\"#555\">"
      << escape(x_label) << "</text>";
  const auto y_ticks = axis_ticks(f.y0, f.y1, f.log_y);
  const std::vector<std::string> y_labels = tick_labels(y_ticks);
  for (std::size_t i = 0; i < y_ticks.size(); ++i) grid_line(svg, f, f.top + (1 - (y_ticks[i].first - f.y0) / (f.y1 - f.y0)) * f.plot_h, y_labels[i]);
}

void draw_series(std::ostringstream& svg, const Frame& f, const Series& s) {
  std::ostringstream path, dots;
  std::size_t drawn = 0;
  for (const auto& [x, y] : s.points) {
    if (!f.drawable(x, y)) continue;
    path << (drawn++ ? " L" : "M") << f.px(x) << " " << f.py(y);
    dots << "<circle cx=\"" << f.px(x) << "\" cy=\"" << f.py(y) << "\" r=\"2.5\" fill=\"" << s.colour << "\"/>";
  }
  if (drawn == 0) return;
  svg << "<g" << s.data << "><path d=\"" << path.str() << "\" fill=\"none\" stroke=\"" << s.colour << "\" stroke-width=\"1.6\""
      << (s.dash.empty() ? "" : " stroke-dasharray=\"" + s.dash + "\"") << "><title>" << escape(s.name) << "</title></path>";
  if (drawn == 1 || s.markers) svg << dots.str();
  svg << "</g>";
}

void draw_legend(std::ostringstream& svg, const std::vector<Series>& series, int width, int height, std::size_t columns) {
  for (std::size_t i = 0; i < series.size(); ++i) {
    const double x = 10 + static_cast<double>(i % columns) * (width - 20) / static_cast<double>(columns);
    const double y = height + static_cast<double>(i / columns) * 16 + 4;
    svg << "<g" << series[i].data << "><line x1=\"" << x << "\" x2=\"" << x + 18 << "\" y1=\"" << y << "\" y2=\"" << y << "\" stroke=\"" << series[i].colour
        << "\" stroke-width=\"2\"" << (series[i].dash.empty() ? "" : " stroke-dasharray=\"" + series[i].dash + "\"") << "/><text x=\"" << x + 22
        << "\" y=\"" << y + 4 << "\">" << escape(series[i].name) << "</text></g>";
  }
}

const char* const kStyle = R"(<style>
body { font-family: sans-serif; margin: 24px; color: #222; }
h1 { font-size: 22px; } h2 { font-size: 18px; margin-top: 32px; border-bottom: 1px solid #ddd; } h3 { font-size: 14px; }
table { border-collapse: collapse; font-size: 13px; } td, th { border: 1px solid #ccc; padding: 3px 8px; text-align: right; }
th { background: #f4f4f4; } td:first-child, th:first-child { text-align: left; }
pre { background: #f7f7f7; padding: 10px; font-size: 12px; overflow-x: auto; }
.charts, .heads, .variants { display: flex; flex-wrap: wrap; gap: 12px; align-items: flex-start; }
.variant { border: 1px solid #ddd; padding: 6px; } .note { color: #666; font-size: 13px; }
.stale { background: #fff3cd; border: 1px solid #e0c36a; padding: 6px 10px; font-size: 13px; }
.facts span { display: inline-block; margin-right: 18px; }
svg.heatmap { cursor: zoom-in; } .colourbar { display: block; margin: 4px 0; }
#attnlab-tip { position: fixed; display: none; z-index: 20; background: #222; color: #fff; font: 12px monospace;
  padding: 4px 7px; border-radius: 3px; white-space: pre; pointer-events: none; max-width: 560px; }
#attnlab-overlay { position: fixed; inset: 0; z-index: 10; background: rgba(255,255,255,0.96); overflow: auto; padding: 16px; }
.tokenview { margin: 2px 0 14px; font: 12px monospace; } .tokenview .toks { color: #555; }
.tok { display: inline-block; padding: 1px 3px; margin: 1px; border-radius: 2px; cursor: default; }
.toks .tok:hover, .toks .tok.on { outline: 1px solid #d62728; } .headname { display: inline-block; width: 60px; color: #555; }
.imageview { display: flex; gap: 12px; align-items: flex-end; margin: 4px 0 16px; } .imageview canvas { image-rendering: pixelated; border: 1px solid #ccc; } .imageview .pick { cursor: crosshair; margin-right: 12px; }
.imageview figure { margin: 0; } .imageview figcaption { font-size: 11px; text-align: center; }
form.series { font-size: 13px; margin: 6px 0; } form.series label { margin-right: 12px; }
</style>)";


}  // namespace

const char* colour(std::size_t i) {
  static const char* palette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                  "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
  return palette[i % 10];
}

const char* dash(std::size_t i) {
  static const char* styles[] = {"", "6 3", "2 2", "8 3 2 3"};
  return styles[i % 4];
}

void style(Series& series, std::size_t i) {
  series.colour = colour(i);
  series.dash = dash(i / 10);
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

std::string inline_code(const std::string& s) {
  std::string out;
  std::size_t at = 0;
  for (std::size_t open = s.find('`'); open != std::string::npos; open = s.find('`', at)) {
    const std::size_t close = s.find('`', open + 1);
    if (close == std::string::npos) break;
    out += escape(s.substr(at, open - at)) + "<code>" + escape(s.substr(open + 1, close - open - 1)) + "</code>";
    at = close + 1;
  }
  return out + escape(s.substr(at));
}

std::string fmt(const char* format, double v) {
  if (std::isnan(v)) return "-";
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, format, v);
  return buffer;
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

std::string line_chart(const std::string& title, const std::vector<Series>& series, YScale scale, int width, int height,
                       const XAxis& x_axis) {
  std::size_t longest = 0;
  for (const Series& s : series) longest = std::max(longest, s.name.size());
  const std::size_t columns = std::clamp<std::size_t>(static_cast<std::size_t>((width - 20) / (longest * 6.5 + 34)), 1, 4);
  const std::size_t legend_rows = series.size() > 1 ? (series.size() + columns - 1) / columns : 0;
  const int total_height = height + static_cast<int>(legend_rows) * 16;
  std::ostringstream svg;
  svg << "<svg class=\"chart\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << total_height
      << "\" viewBox=\"0 0 " << width << " " << total_height << "\" font-family=\"sans-serif\" font-size=\"11\">"
      << "<text x=\"" << width / 2 << "\" y=\"15\" text-anchor=\"middle\" font-weight=\"bold\">" << escape(title) << "</text>";
  const Frame f = frame_for(series, scale, width, height, x_axis.log);
  if (f.empty()) {
    svg << "<text x=\"" << width / 2 << "\" y=\"" << height / 2 << "\" text-anchor=\"middle\" fill=\"#777\">no data yet</text></svg>";
    return svg.str();
  }
  draw_axes(svg, f, height, x_axis.label);
  for (const Series& s : series) draw_series(svg, f, s);
  if (legend_rows) draw_legend(svg, series, width, height, columns);
  svg << "</svg>";
  return svg.str();
}

std::string colour_bar(bool signed_values) {
  // Drawn as 48 strips rather than a gradient: a gradient needs an element id, and a page holds one bar
  // per pattern grid, so the ids would repeat.
  std::ostringstream svg;
  svg << "<svg class=\"colourbar " << (signed_values ? "diverging" : "viridis") << "\" xmlns=\"http://www.w3.org/2000/svg\" width=\"420\" "
      << "height=\"34\" font-family=\"sans-serif\" font-size=\"10\">";
  constexpr int kStrips = 48;
  for (int i = 0; i < kStrips; ++i) {
    const double t = (i + 0.5) / kStrips;
    unsigned char rgb[3];
    if (signed_values) {
      diverging(2 * t - 1, rgb);
    } else {
      viridis(t, rgb);
    }
    char strip[160];
    std::snprintf(strip, sizeof strip, "<rect x=\"%.2f\" y=\"2\" width=\"%.2f\" height=\"12\" fill=\"rgb(%d,%d,%d)\"/>", 10 + 240.0 * i / kStrips,
                  240.0 / kStrips + 0.3, rgb[0], rgb[1], rgb[2]);
    svg << strip;
  }
  // Positions on the bar: sqrt(w) for weights; sign(w) sqrt(|w| / m) for signed mixing, m each head's largest |w|.
  const std::vector<double> marks = signed_values ? std::vector<double>{-1, -0.25, 0, 0.25, 1} : std::vector<double>{0, 0.01, 0.1, 0.25, 0.5, 1};
  for (double w : marks) {
    const double x = signed_values ? 130 + 120 * (w < 0 ? -1 : 1) * std::sqrt(std::fabs(w)) : 10 + 240 * std::sqrt(w);
    svg << "<line x1=\"" << x << "\" x2=\"" << x << "\" y1=\"14\" y2=\"18\" stroke=\"#333\"/><text x=\"" << x
        << "\" y=\"29\" text-anchor=\"middle\">" << (signed_values && w != 0 ? short_number(w) + "m" : tick_label(w)) << "</text>";
  }
  svg << "<text x=\"258\" y=\"12\">" << (signed_values ? "signed mixing; m: the head's largest |weight|" : "attention weight")
      << "</text></svg>";
  return svg.str();
}

std::string heatmap_panel(const double* pattern, std::size_t tq, std::size_t tk, const std::vector<std::string>& query_labels,
                          const std::vector<std::string>& key_labels, const PanelPlace& place) {
  // Small sequences get big cells. Labels are at least kFont px: when the cells are smaller, only every
  // step-th is written (every cell names its tokens on hover, and a click enlarges the head).
  constexpr double kFont = 8;
  const double cell = std::clamp(260.0 / static_cast<double>(std::max(tq, tk)), 3.0, 16.0);
  const double font = std::clamp(cell * 0.95, kFont, 10.0);
  const std::size_t step = static_cast<std::size_t>(std::ceil((font + 1) / cell));
  std::size_t longest = 1;
  for (const auto& l : key_labels) longest = std::max(longest, l.size());
  for (const auto& l : query_labels) longest = std::max(longest, l.size());
  const double margin = 6 + font * 0.65 * static_cast<double>(std::min<std::size_t>(longest, 8));
  const double w = margin + cell * static_cast<double>(tk) + 4, h = 16 + margin + cell * static_cast<double>(tq) + 4;
  std::ostringstream svg;
  svg << "<svg class=\"heatmap\" data-layer=\"" << place.layer << "\" data-head=\"" << place.head << "\" xmlns=\"http://www.w3.org/2000/svg\" width=\""
      << w << "\" height=\"" << h << "\" font-family=\"monospace\"><text x=\"" << w / 2
      << "\" y=\"11\" text-anchor=\"middle\" font-family=\"sans-serif\" font-size=\"11\">" << escape(place.title) << "</text>";
  const double x0 = margin, y0 = 16 + margin;
  svg << "<image class=\"cells\" x=\"" << x0 << "\" y=\"" << y0 << "\" width=\"" << cell * static_cast<double>(tk) << "\" height=\""
      << cell * static_cast<double>(tq) << "\" preserveAspectRatio=\"none\" style=\"image-rendering:pixelated\" href=\"data:image/png;base64,"
      << base64(encode_pattern_png(pattern, tq, tk)) << "\"/>";
  for (std::size_t j = 0; j < tk; j += step) {
    const double x = x0 + (static_cast<double>(j) + 0.5) * cell;
    svg << "<text font-size=\"" << font << "\" text-anchor=\"start\" transform=\"translate(" << x + font * 0.35 << "," << y0 - 2
        << ") rotate(-90)\">" << escape(key_labels[j].substr(0, 8)) << "</text>";
  }
  for (std::size_t i = 0; i < tq; i += step) {
    svg << "<text font-size=\"" << font << "\" text-anchor=\"end\" x=\"" << x0 - 2 << "\" y=\""
        << y0 + (static_cast<double>(i) + 0.5) * cell + font * 0.35 << "\">" << escape(query_labels[i].substr(0, 8)) << "</text>";
  }
  svg << "</svg>";
  return svg.str();
}

std::string pattern_data(const PatternGrid& grid) {
  const std::size_t heads = grid.layers * grid.heads, cells = grid.tq * grid.tk;
  if (grid.values.size() != heads * cells) throw std::invalid_argument("pattern_data: values do not fill layers x heads x queries x keys");
  nlohmann::json j{{"title", grid.title}, {"layers", grid.layers}, {"heads", grid.heads}, {"tq", grid.tq}, {"tk", grid.tk},
                   {"queries", grid.queries}, {"keys", grid.keys}};
  std::vector<double> magnitude;
  std::vector<bool> signed_values;
  std::string bytes;
  bytes.reserve(2 * heads * cells);
  for (std::size_t h = 0; h < heads; ++h) {
    const double* p = grid.values.data() + h * cells;
    const PatternScale scale = pattern_scale(p, cells);
    magnitude.push_back(scale.magnitude);
    signed_values.push_back(scale.signed_values);
    for (std::size_t i = 0; i < cells; ++i) {  // w / m, or (w / m + 1) / 2 when signed, in 65535ths
      const double t = std::isfinite(p[i]) ? p[i] / scale.magnitude : 0;
      const auto q = static_cast<std::uint16_t>(std::lround(std::clamp(scale.signed_values ? (t + 1) / 2 : t, 0.0, 1.0) * 65535));
      bytes += static_cast<char>(q & 0xff), bytes += static_cast<char>(q >> 8);
    }
  }
  j["magnitude"] = magnitude;
  j["signed"] = signed_values;
  j["w"] = base64(bytes);
  if (grid.image) {
    const PatternImage& im = *grid.image;
    j["image"] = {{"src", "data:image/png;base64," + base64(im.png)}, {"width", im.width}, {"height", im.height},
                  {"patch", im.patch}, {"leading", im.leading}, {"scale", std::max<std::size_t>(1, 168 / std::max(im.width, im.height))}};
  }
  std::string text = j.dump();
  for (std::size_t at = text.find("</"); at != std::string::npos; at = text.find("</", at)) text.replace(at, 2, "<\\/");
  return "<script type=\"application/json\" class=\"attn-data\">" + text + "</script>";
}

std::string page_start(const std::string& title) {
  return "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>" + escape(title) + "</title>" + kStyle +
         "</head><body>\n<h1>" + escape(title) + "</h1>\n";
}

std::string page_end() {
  // The script's colour tables come from image.cpp's scales, so that its colours are the PNGs' colours.
  nlohmann::json tables{{"viridis", nlohmann::json::array()}, {"diverging", nlohmann::json::array()}};
  for (int i = 0; i < 256; ++i) {
    unsigned char v[3], d[3];
    viridis(i / 255.0, v);
    diverging(i / 127.5 - 1, d);
    tables["viridis"].push_back({v[0], v[1], v[2]});
    tables["diverging"].push_back({d[0], d[1], d[2]});
  }
  return "<script type=\"application/json\" id=\"attnlab-colours\">" + tables.dump() + "</script>\n<script>\n" + kReportScript +
         "</script>\n</body></html>\n";
}

}  // namespace attnlab::report
