// The drawing parts of attnlab's HTML reports, all static SVG and HTML written here (no script, nothing
// from the network): line charts of curves, heatmap panels of attention patterns (a PNG with a pixel per
// cell inside an SVG whose axes carry the tokens), the colour bar, and the page's frame and style.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace attnlab::report {

struct Series {
  std::string name;
  std::vector<std::pair<double, double>> points;  // (step, value); non-finite values are skipped
  std::string colour;
  bool dashed = false;
  bool markers = false;  // a dot at every point (for few points, such as a metric against state size)
};

enum class YScale { linear, log, unit, signed_unit };  // unit: linear over [0, 1] (accuracies); signed_unit: over [-1, 1]

// Ten distinguishable colours (matplotlib's tab10), for series in order.
const char* colour(std::size_t i);
// Text for HTML: & < > " ' escaped.
std::string escape(const std::string& s);
// `format` applied to v, or "-" for NaN.
std::string fmt(const char* format, double v);
std::string base64(const std::string& bytes);

// What the x values are: steps by default; `log` spaces them by decades (a state size, a width).
struct XAxis {
  std::string label = "step";
  bool log = false;
};

// A line chart; a legend below when there is more than one series.
std::string line_chart(const std::string& title, const std::vector<Series>& series, YScale scale = YScale::linear,
                       int width = 460, int height = 260, const XAxis& x_axis = {});
// The sqrt colour scale of the heatmaps, 0 to 1.
std::string colour_bar();
// One pattern [tq, tk] as an SVG panel: the key tokens across the top, the query tokens down the left.
std::string heatmap_panel(const double* pattern, std::size_t tq, std::size_t tk, const std::vector<std::string>& query_labels,
                          const std::vector<std::string>& key_labels, const std::string& title);
// The start of a page: doctype, title, style, and the heading.
std::string page_start(const std::string& title);

}  // namespace attnlab::report
