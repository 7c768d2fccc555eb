// The Analysis section of a run's report: what `attnlab analyze` wrote to analysis/summary.json, each
// table as a labelled heatmap with its values, the facts, the notes and the rollout maps.
#include <cstdio>
#include <algorithm>
#include <cmath>
#include <optional>
#include <set>
#include <sstream>

#include "experiments/runner/analysis_summary.hpp"
#include "experiments/runner/file_fields.hpp"
#include "experiments/runner/report.hpp"
#include "experiments/runner/report_svg.hpp"
#include "framework/io/atomic_file.hpp"
#include "framework/io/image.hpp"

namespace attnlab {
namespace {

using report::escape;
using report::fmt;

// "layer 1" for a cell's tooltip; the label alone when the axis has no name.
std::string axis_label(const std::string& axis, const std::string& label) { return axis.empty() ? label : axis + " " + label; }

// A value as the tables and facts show it: short_number's, "-" where there is none (NaN: a detector
// score that never crossed its threshold, a first step that never came).
std::string shown(double v) { return std::isnan(v) ? "-" : short_number(v); }

// One table as an SVG grid: the column axis's name and labels across the top, the row axis's name and
// labels down the left, each cell coloured (diverging around 0 for signed values, viridis otherwise,
// scaled to the largest magnitude) and, when the grid is small, its value written in it. Hovering a cell
// shows the table's title, the cell's row and column, its value and its interval (report.js).
std::string table_heatmap(const AnalysisTable& t) {
  const std::size_t rows = t.rows.size(), cols = t.cols.size();
  const bool numbers = cols <= 16;
  const double cw = numbers ? 54 : std::clamp(640.0 / static_cast<double>(cols), 6.0, 20.0), ch = numbers ? 20 : std::max(cw, 12.0);
  std::size_t longest = 1, top = 1;
  for (const auto& l : t.rows) longest = std::max(longest, l.size());
  for (const auto& l : t.cols) top = std::max(top, l.size());
  const bool row_name = !t.row_axis.empty(), col_name = !t.col_axis.empty();
  const double left = 8 + 6.2 * static_cast<double>(longest) + (row_name ? 16 : 0);
  const double head = 8 + 6.2 * static_cast<double>(top) + (col_name ? 16 : 0);
  const double width = left + cw * static_cast<double>(cols) + 8, height = head + ch * static_cast<double>(rows) + 8;
  const double m = table_scale(t.values);
  std::ostringstream svg;
  svg << "<svg class=\"table\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
      << "\" font-family=\"monospace\" font-size=\"10\">";
  if (col_name)
    svg << "<text x=\"" << left + cw * static_cast<double>(cols) / 2 << "\" y=\"12\" text-anchor=\"middle\" font-family=\"sans-serif\" "
        << "font-size=\"11\" fill=\"#555\">" << escape(t.col_axis) << " &#8594;</text>";
  if (row_name)
    // Turned to read upwards, so the arrow before the name points down the rows.
    svg << "<text transform=\"translate(12," << head + ch * static_cast<double>(rows) / 2 << ") rotate(-90)\" text-anchor=\"middle\" "
        << "font-family=\"sans-serif\" font-size=\"11\" fill=\"#555\">&#8592; " << escape(t.row_axis) << "</text>";
  for (std::size_t c = 0; c < cols; ++c) {
    const double x = left + (static_cast<double>(c) + 0.5) * cw;
    svg << "<text transform=\"translate(" << x + 3 << "," << head - 3 << ") rotate(-90)\">" << escape(t.cols[c]) << "</text>";
  }
  for (std::size_t r = 0; r < rows; ++r) {
    const double y = head + static_cast<double>(r) * ch;
    svg << "<text x=\"" << left - 3 << "\" y=\"" << y + ch / 2 + 3 << "\" text-anchor=\"end\">" << escape(t.rows[r]) << "</text>";
    for (std::size_t c = 0; c < cols; ++c) {
      const double v = t.at(r, c);
      unsigned char rgb[3];
      table_colour(v, m, t.signed_values, rgb);
      const double x = left + static_cast<double>(c) * cw;
      const std::string tip = t.title + "\n" + axis_label(t.row_axis, t.rows[r]) + ", " + axis_label(t.col_axis, t.cols[c]) + ": " +
                              fmt("%.4g", v) +
                              (t.low.empty() ? "" : "\n95% interval " + fmt("%.4g", t.low[r * cols + c]) + " to " + fmt("%.4g", t.high[r * cols + c]));
      svg << "<rect x=\"" << x << "\" y=\"" << y << "\" width=\"" << cw << "\" height=\"" << ch << "\" fill=\"rgb(" << int(rgb[0]) << ","
          << int(rgb[1]) << "," << int(rgb[2]) << ")\" data-tip=\"" << escape(tip) << "\"/>";
      if (numbers) {
        const bool dark = (0.299 * rgb[0] + 0.587 * rgb[1] + 0.114 * rgb[2]) < 110;
        svg << "<text x=\"" << x + cw / 2 << "\" y=\"" << y + ch / 2 + 3 << "\" text-anchor=\"middle\" pointer-events=\"none\" fill=\""
            << (dark ? "#fff" : "#000") << "\">" << shown(v) << "</text>";
      }
    }
  }
  svg << "</svg>";
  return svg.str();
}

// "baseline.exact_match" as people read it: "baseline exact match".
std::string fact_words(const std::string& key) {
  std::string out = key;
  for (char& ch : out)
    if (ch == '.' || ch == '_') ch = ' ';
  return out;
}

// The facts grouped under their parts' headings (the key's first word names the part), each with its
// value; hovering one shows its key in summary.json and Python's Run.analysis().facts.
std::string facts_table(const AnalysisResult& r) {
  std::ostringstream html;
  html << "<h3>Facts</h3><p class=\"note\">Single numbers the parts found (docs/analysis.md defines each); hover a fact for "
       << "its key in analysis/summary.json.</p><table class=\"facts\">";
  std::optional<std::string> group;  // the part whose facts the rows below the last heading hold
  for (const auto& [key, value] : r.facts) {
    const std::size_t dot = key.find('.');
    const std::string part = dot == std::string::npos ? "" : key.substr(0, dot), rest = dot == std::string::npos ? key : key.substr(dot + 1);
    if (part != group) {
      group = part;
      const auto title = r.titles.find(part);
      html << "<tr><th colspan=\"2\">" << escape(part.empty() ? "The analysis" : title != r.titles.end() ? title->second : fact_words(part)) << "</th></tr>";
    }
    html << "<tr data-tip=\"" << escape(key) << "\"><td>" << escape(fact_words(rest)) << "</td><td>" << shown(value) << "</td></tr>";
  }
  html << "</table>\n";
  return html.str();
}

}  // namespace

std::string analysis_section(const std::string& run_dir) {
  if (!has_analysis(run_dir)) return "";
  AnalysisResult r;
  try {
    r = read_analysis(run_dir);
  } catch (const std::runtime_error& e) {  // a damaged analysis takes its section, not the report
    return "<h2>Analysis</h2><p class=\"note\">" + escape(e.what()) + "</p>";
  }
  std::ostringstream html;
  const std::string of = r.checkpoint.empty() ? "" : " of " + r.checkpoint + (r.step ? " at step " + std::to_string(*r.step) : "");
  html << "<h2>Analysis</h2><p class=\"note\">Written by <code>attnlab analyze</code> on "
       << fmt("%.0f", r.facts.count("examples") ? r.facts.at("examples") : NAN) << " held-out examples" << escape(of)
       << " (each table says what it is over); every table is also in analysis/ as CSV, .npy and PNG. docs/analysis.md defines each one.</p>";
  const std::string stale = analysis_out_of_date(run_dir, r);
  if (!stale.empty()) html << "<p class=\"stale\">This analysis is out of date: " << escape(stale) << ". Run <code>attnlab analyze " << escape(run_dir) << "</code> again.</p>";
  if (!r.notes.empty()) {
    html << "<ul class=\"note\">";
    for (const std::string& n : r.notes) html << "<li>" << escape(n) << "</li>";
    html << "</ul>";
  }
  // Section by section, in the order the analysis ran its parts: the part's heading, its tables, then its
  // images (files named after it: "rollout_probe_0.png").
  const auto image_section = [&](const std::string& image) {
    std::string best;
    for (const auto& [name, title] : r.titles)
      if (image.rfind(name + "_", 0) == 0 && name.size() > best.size()) best = name;
    return best;
  };
  std::vector<std::string> sections;
  for (const AnalysisTable& t : r.tables)
    if (std::find(sections.begin(), sections.end(), t.section) == sections.end()) sections.push_back(t.section);
  for (const std::string& image : r.images)
    if (std::find(sections.begin(), sections.end(), image_section(image)) == sections.end()) sections.push_back(image_section(image));
  for (const std::string& section : sections) {
    const auto title = r.titles.find(section);  // the part's own heading (experiments/analysis/part.hpp)
    html << "<h3>" << escape(title != r.titles.end() ? title->second : section.empty() ? "Images" : section) << "</h3>";
    for (const AnalysisTable& t : r.tables) {
      if (t.section != section) continue;
      const std::string over = t.examples && *t.examples ? " (over " + std::to_string(*t.examples) + " examples)" : "";
      html << "<figure class=\"analysis\"><figcaption>" << escape(t.title + over) << " <a href=\"analysis/" << escape(t.name) << ".csv\">csv</a> "
           << "<a href=\"analysis/" << escape(t.name) << ".npy\">npy</a></figcaption>" << table_heatmap(t) << "</figure>\n";
    }
    std::string images;
    for (const std::string& image : r.images)
      if (image_section(image) == section) images += "<img src=\"analysis/" + escape(image) + "\" alt=\"" + escape(image) + "\">";
    if (!images.empty()) html << "<div class=\"charts\">" << images << "</div>";
  }
  return html.str() + facts_table(r);
}

namespace {

struct Spread {
  double mean = NAN, std = NAN;
  std::size_t n = 0;
};

Spread spread(const std::vector<double>& values) {
  Spread s;
  double sum = 0, sq = 0;
  for (double v : values)
    if (std::isfinite(v)) sum += v, sq += v * v, ++s.n;
  if (s.n == 0) return s;
  s.mean = sum / static_cast<double>(s.n);
  s.std = s.n > 1 ? std::sqrt(std::max(0.0, (sq - static_cast<double>(s.n) * s.mean * s.mean) / static_cast<double>(s.n - 1))) : 0.0;
  return s;
}

// The cell-wise mean of one table over runs (tables of other shapes are left out).
const AnalysisTable* mean_table(const std::vector<AnalysisResult>& runs, const std::string& name, AnalysisTable& mean) {
  std::vector<const AnalysisTable*> found;
  for (const AnalysisResult& r : runs)
    for (const AnalysisTable& t : r.tables)
      if (t.name == name && (found.empty() || t.values.size() == found[0]->values.size())) found.push_back(&t);
  if (found.empty()) return nullptr;
  mean = *found[0];
  for (std::size_t i = 0; i < mean.values.size(); ++i) {
    std::vector<double> cell;
    for (const AnalysisTable* t : found) cell.push_back(t->values[i]);
    mean.values[i] = spread(cell).mean;
  }
  mean.title += " (mean over " + std::to_string(found.size()) + " seed" + (found.size() == 1 ? "" : "s") + ")";
  return &mean;
}

}  // namespace

std::string comparison_analysis_section(const std::string& dir, const std::vector<ComparisonVariant>& variants) {
  std::vector<std::vector<AnalysisResult>> results(variants.size());
  std::set<std::string> facts;
  for (std::size_t v = 0; v < variants.size(); ++v)
    for (const std::string& r : variants[v].run_dirs)
      if (has_analysis(dir + "/" + r)) {
        try {
          results[v].push_back(read_analysis(dir + "/" + r));
        } catch (const std::runtime_error& e) {  // one damaged analysis leaves its run out of the comparison's table
          std::fprintf(stderr, "attnlab: warning: %s\n", e.what());
          continue;
        }
        for (const auto& [name, value] : results[v].back().facts) facts.insert(name);
      }
  if (facts.empty()) return "";
  std::ostringstream html, csv;
  csv << "fact,variant,mean,std,runs\n";
  html << "<h2>Analysis side by side</h2><p class=\"note\">From each run's <code>attnlab analyze</code> (analysis/summary.json): "
       << "mean &plusmn; standard deviation over seeds; <a href=\"analysis_summary.csv\">analysis_summary.csv</a>. "
       << "docs/analysis.md defines each fact.</p><table><tr><th>fact</th>";
  for (const ComparisonVariant& v : variants) html << "<th>" << escape(v.name) << "</th>";
  html << "</tr>";
  for (const std::string& fact : facts) {
    html << "<tr data-tip=\"" << escape(fact) << "\"><td>" << escape(fact_words(fact)) << "</td>";
    for (std::size_t v = 0; v < variants.size(); ++v) {
      std::vector<double> values;
      for (const AnalysisResult& r : results[v]) values.push_back(r.facts.count(fact) ? r.facts.at(fact) : NAN);
      const Spread s = spread(values);
      html << "<td>" << shown(s.mean) << (s.n > 1 ? " &plusmn; " + shown(s.std) : "") << (s.n < values.size() && s.n ? "*" : "") << "</td>";
      csv << csv_field(fact) << "," << csv_field(variants[v].name) << "," << csv_number(s.mean) << "," << csv_number(s.std) << "," << s.n << "\n";
    }
    html << "</tr>";
  }
  html << "</table><p class=\"note\">* some seeds have no value (e.g. a detector score that never crossed the threshold).</p>";
  // The headline tables each part marked (AnalysisTable::compared), in the order the runs hold them.
  std::vector<std::string> compared;
  for (const auto& runs : results)
    for (const AnalysisResult& r : runs)
      for (const AnalysisTable& t : r.tables)
        if (t.compared && std::find(compared.begin(), compared.end(), t.name) == compared.end()) compared.push_back(t.name);
  for (const std::string& name : compared) {
    std::ostringstream row;
    bool any = false;
    for (std::size_t v = 0; v < variants.size(); ++v) {
      AnalysisTable mean;
      const AnalysisTable* t = mean_table(results[v], name, mean);
      row << "<div class=\"variant\" data-variant=\"" << v << "\"><h3>" << escape(variants[v].name) << "</h3>" << (t ? table_heatmap(*t) : "<p class=\"note\">none</p>") << "</div>";
      if (t && !any) html << "<h3>" << escape(t->title) << "</h3>", any = true;
    }
    if (any) html << "<div class=\"variants\">" << row.str() << "</div>";
  }
  write_file_atomically(dir + "/analysis_summary.csv", csv.str());
  return html.str();
}

}  // namespace attnlab
