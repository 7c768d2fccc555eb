// The report's drawing helpers: the patterns' data as the page's script reads it, chart ticks inside the
// frame and written for people, and inline code. What a user sees in a browser is tested in
// tests/report/test_reports_in_browser.py.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <regex>
#include <string>
#include <vector>

#include "experiments/runner/report_svg.hpp"

namespace attnlab {
namespace {

using report::PatternGrid;

// base64 back to bytes (the page's atob).
std::string unbase64(const std::string& text) {
  static const std::string table = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  unsigned buffer = 0;
  int bits = 0;
  for (char c : text) {
    if (c == '=') break;
    buffer = (buffer << 6) | static_cast<unsigned>(table.find(c));
    bits += 6;
    if (bits >= 8) bits -= 8, out += static_cast<char>((buffer >> bits) & 0xff);
  }
  return out;
}

// Decodes the JSON of pattern_data as report.js does: w / m, or (2 q - 1) m when signed.
std::vector<double> decoded(const std::string& html, nlohmann::json& j) {
  const std::string open = "class=\"attn-data\">";
  const std::size_t from = html.find(open) + open.size(), to = html.rfind("</script>");
  std::string text = html.substr(from, to - from);
  for (std::size_t at = text.find("<\\/"); at != std::string::npos; at = text.find("<\\/", at)) text.replace(at, 3, "</");
  j = nlohmann::json::parse(text);
  const std::string bytes = unbase64(j["w"].get<std::string>());
  const std::size_t heads = j["layers"].get<std::size_t>() * j["heads"].get<std::size_t>(), cells = bytes.size() / 2 / heads;
  std::vector<double> out;
  for (std::size_t i = 0; i < bytes.size() / 2; ++i) {
    const double q = (static_cast<unsigned char>(bytes[2 * i]) | (static_cast<unsigned char>(bytes[2 * i + 1]) << 8)) / 65535.0;
    const std::size_t head = i / cells;
    const double m = j["magnitude"][head].get<double>();
    out.push_back(j["signed"][head].get<bool>() ? (2 * q - 1) * m : q * m);
  }
  return out;
}

TEST(ReportPatternData, WeightsComeBackWithinOneStepOfTheirHeadsScale) {
  PatternGrid g;
  g.title = "probe 0";
  g.layers = 1, g.heads = 2, g.tq = 2, g.tk = 3;
  g.values = {1, 0, 0, 0.25, 0.75, 0,        // head 0: a distribution per row, scale [0, 1]
              -3, 1.5, 0, 2, -0.001, 0.6};   // head 1: signed mixing, scale its largest |w| = 3
  g.queries = {"a", "</script><b>"};          // a label that would end the script
  g.keys = {"x", "y", "z"};
  const std::string html = report::pattern_data(g);
  EXPECT_EQ(html.find("</script><b>"), std::string::npos) << "a label closed the script element";
  nlohmann::json j;
  const std::vector<double> back = decoded(html, j);
  ASSERT_EQ(back.size(), g.values.size());
  EXPECT_EQ(j["queries"][1], "</script><b>");
  EXPECT_EQ(j["signed"][0], false);
  EXPECT_EQ(j["signed"][1], true);
  EXPECT_DOUBLE_EQ(j["magnitude"][1].get<double>(), 3.0);
  for (std::size_t i = 0; i < back.size(); ++i) {
    const double step = i < 6 ? 1.0 / 65535 : 2 * 3.0 / 65535;
    EXPECT_NEAR(back[i], g.values[i], step) << i;
  }
}

TEST(ReportPatternData, ValuesThatDoNotFillTheShapeAreRefused) {
  PatternGrid g;
  g.layers = 1, g.heads = 1, g.tq = 2, g.tk = 2;
  g.values = {1, 0, 0};
  EXPECT_THROW(report::pattern_data(g), std::invalid_argument);
}

// Every tick label of a chart lies inside its width (a label is about 6.4 px per character at 11 px).
TEST(ReportCharts, TickLabelsStayInsideTheFrameAndReadAsPeopleWriteThem) {
  std::vector<std::pair<double, double>> points;
  for (double step = 100; step <= 3000; step += 100) points.emplace_back(step, 1 / step);
  const std::string svg = report::line_chart("loss", {{"train", points, report::colour(0)}}, report::YScale::linear, 420, 240);
  const std::regex label("<text x=\"([0-9.]+)\" y=\"[0-9.]+\" text-anchor=\"(start|middle|end)\">([^<]*)</text>");
  bool saw_3000 = false;
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), label); it != std::sregex_iterator(); ++it) {
    const double x = std::stod((*it)[1]), half = 3.2 * static_cast<double>((*it)[3].length());
    const std::string anchor = (*it)[2];
    const double right = anchor == "end" ? x : anchor == "middle" ? x + half : x + 2 * half;
    EXPECT_LE(right, 420) << (*it)[3];
    EXPECT_EQ((*it)[3].str().find("e+"), std::string::npos) << (*it)[3];
    saw_3000 |= (*it)[3] == "3000";
  }
  EXPECT_TRUE(saw_3000) << svg;
}

TEST(ReportCharts, ANarrowLogRangeStillHasTicks) {
  const std::string svg = report::line_chart("loss", {{"train", {{1, 3.3}, {2, 3.5}, {3, 3.6}}, report::colour(0)}}, report::YScale::log);
  EXPECT_NE(svg.find(">3.4</text>"), std::string::npos) << svg;
}

TEST(ReportCharts, FortySeriesLookAlikeNowhere) {
  std::vector<std::pair<std::string, std::string>> seen;
  for (std::size_t i = 0; i < 40; ++i) {
    report::Series s;
    report::style(s, i);
    for (const auto& other : seen) EXPECT_FALSE(other.first == s.colour && other.second == s.dash) << i;
    seen.emplace_back(s.colour, s.dash);
  }
}

TEST(ReportText, BackticksBecomeCodeAndTheRestIsEscaped) {
  EXPECT_EQ(report::inline_code("Base: `a<b>.yaml`; seeds: 2"), "Base: <code>a&lt;b&gt;.yaml</code>; seeds: 2");
  EXPECT_EQ(report::inline_code("one ` alone"), "one ` alone");
}

}  // namespace
}  // namespace attnlab

namespace attnlab {
namespace {

// At 64 to 256 tokens the labels stay at least 8 px tall and never overlap: every step-th is written.
TEST(ReportHeatmaps, LabelsOfLongProbesAreThinnedNotShrunk) {
  for (std::size_t n : {8, 64, 256}) {
    const std::vector<double> pattern(n * n, 1.0 / static_cast<double>(n));
    std::vector<std::string> labels;
    for (std::size_t i = 0; i < n; ++i) labels.push_back("t" + std::to_string(i));
    const std::string svg = report::heatmap_panel(pattern.data(), n, n, labels, labels, {0, 0, "layer 0 head 0"});
    const std::regex row("<text font-size=\"([0-9.]+)\" text-anchor=\"end\" x=\"[0-9.]+\" y=\"([0-9.]+)\">t([0-9]+)</text>");
    std::vector<double> ys;
    for (auto it = std::sregex_iterator(svg.begin(), svg.end(), row); it != std::sregex_iterator(); ++it) {
      EXPECT_GE(std::stod((*it)[1]), 8.0) << n;
      ys.push_back(std::stod((*it)[2]));
    }
    ASSERT_GE(ys.size(), n / 3) << n;
    EXPECT_EQ(svg.find(">t0</text>") != std::string::npos, true);
    for (std::size_t i = 1; i < ys.size(); ++i) EXPECT_GE(ys[i] - ys[i - 1], 8.0) << n << " row label " << i;
    EXPECT_NE(svg.find("data-layer=\"0\" data-head=\"0\""), std::string::npos);
  }
}

}  // namespace
}  // namespace attnlab

namespace attnlab {
namespace {

// One capture at step 1000: the ticks around it are told apart, not all "1000".
TEST(ReportCharts, TicksAroundASinglePointAreDistinct) {
  const std::string svg = report::line_chart("entropy", {{"L0H0", {{1000, 0.5}}, report::colour(0)}}, report::YScale::linear);
  const std::regex label("text-anchor=\"(start|middle|end)\">([^<]*)</text>");
  std::vector<std::string> x;
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), label); it != std::sregex_iterator(); ++it) x.push_back((*it)[2]);
  ASSERT_GE(x.size(), 3u) << svg;
  for (std::size_t i = 1; i < x.size(); ++i) EXPECT_NE(x[i], x[i - 1]) << svg;
}

}  // namespace
}  // namespace attnlab
