// The drawing parts of attnlab's HTML reports, SVG and HTML written here, nothing from the network: line
// charts of curves, heatmap panels of attention patterns (a PNG with a pixel per cell inside an SVG whose
// axes carry the tokens), the colour bar, the patterns' data for the page's script (report.js: tooltips,
// the token view, enlarged heads, image views), and the page's frame, style and script.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace attnlab::report {

struct Series {
  std::string name;
  std::vector<std::pair<double, double>> points;  // (step, value); non-finite values are skipped
  std::string colour{};
  std::string dash{};    // an SVG stroke-dasharray ("5 3"); "" draws a solid line
  bool markers = false;  // a dot at every point (for few points, such as a metric against state size)
  std::string data{};    // data-* attributes of its line and legend entry, for the page's script (comparisons)
};

enum class YScale { linear, log, unit, signed_unit };  // unit: linear over [0, 1] (accuracies); signed_unit: over [-1, 1]

// Ten distinguishable colours (matplotlib's tab10), for series in order.
const char* colour(std::size_t i);
// Four line styles: solid, dashed, dotted, dash-dot ("" is solid).
const char* dash(std::size_t i);
// Series i's colour and dash: the ten colours solid, then dashed, then dotted, ..., so that no two of the
// first forty series look alike.
void style(Series& series, std::size_t i);
// Text for HTML: & < > " ' escaped.
std::string escape(const std::string& s);
// Text for HTML as escape() makes it, each `quoted` stretch (Markdown's inline code) set as <code>.
std::string inline_code(const std::string& s);
// `format` applied to v, or "-" for NaN.
std::string fmt(const char* format, double v);
std::string base64(const std::string& bytes);

// What the x values are: steps by default; `log` spaces them by decades (a state size, a width).
struct XAxis {
  std::string label = "step";
  bool log = false;
};

// The mean over runs of a curve ((step, value) points), at the steps every run has.
std::vector<std::pair<double, double>> mean_curve(const std::vector<std::vector<std::pair<double, double>>>& curves);
// A line chart; a legend below when there is more than one series.
std::string line_chart(const std::string& title, const std::vector<Series>& series, YScale scale = YScale::linear,
                       int width = 460, int height = 260, const XAxis& x_axis = {});
// The colour scale of the heatmaps: viridis of sqrt(weight) over [0, 1], or with `signed_values` the
// diverging scale of sign(w) sqrt(|w| / m), m each head's largest magnitude.
std::string colour_bar(bool signed_values = false);
// Which head a panel draws, for its title and for the script.
struct PanelPlace {
  std::size_t layer = 0, head = 0;
  std::string title;
};
// One pattern [tq, tk] as an SVG panel: the key tokens across the top, the query tokens down the left
// (every one, or every few when the cells are smaller than readable text).
std::string heatmap_panel(const double* pattern, std::size_t tq, std::size_t tk, const std::vector<std::string>& query_labels,
                          const std::vector<std::string>& key_labels, const PanelPlace& place);
// An image probe (ViT): the PNG bytes, its size in pixels, the patch side, and how many positions come
// before the patches (a CLS token).
struct PatternImage {
  std::string png;
  std::size_t width = 0, height = 0, patch = 0, leading = 0;
};
// One probe's patterns of one attention part, as the page's script reads them.
struct PatternGrid {
  std::string title;
  std::size_t layers = 0, heads = 0, tq = 0, tk = 0;
  std::vector<double> values;  // [layers, heads, tq, tk]
  std::vector<std::string> queries, keys;
  std::optional<PatternImage> image;
};
// The grid as <script type="application/json" class="attn-data">: the labels, each head's scale
// (pattern_scale) and its weights as base64 little-endian uint16 of w / m, or of (w / m + 1) / 2 when
// signed. Throws std::invalid_argument when the values do not fill the shape.
std::string pattern_data(const PatternGrid& grid);
// The start of a page: doctype, title, style, and the heading.
std::string page_start(const std::string& title);
// The end of a page: the colour tables and report.js, then </body></html>.
std::string page_end();
// report.js, embedded at build time (experiments/CMakeLists.txt).
extern const char* const kReportScript;

}  // namespace attnlab::report
