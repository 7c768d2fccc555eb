#include "experiments/runner/analysis_summary.hpp"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "experiments/runner/file_fields.hpp"
#include "experiments/runner/run_folder.hpp"
#include "framework/io/atomic_file.hpp"
#include "framework/io/json_errors.hpp"
#include "framework/io/image.hpp"
#include "framework/io/npy.hpp"

namespace attnlab {
namespace {

using json = nlohmann::ordered_json;

// One table as CSV (the row label, then a column per col), .npy [rows, cols] and a PNG heatmap with its
// title, axes, labels and colour bar.
void write_table(const std::string& dir, const AnalysisTable& t) {
  std::ostringstream csv;
  csv << csv_field(t.row_axis.empty() ? "row" : t.row_axis);
  for (const std::string& c : t.cols) csv << "," << csv_field(c);
  csv << "\n";
  for (std::size_t r = 0; r < t.rows.size(); ++r) {
    csv << csv_field(t.rows[r]);
    for (std::size_t c = 0; c < t.cols.size(); ++c) csv << "," << csv_number(t.at(r, c));
    csv << "\n";
  }
  write_file_atomically(dir + "/" + t.name + ".csv", csv.str());
  write_npy(dir + "/" + t.name + ".npy", from_vector(t.values, {t.rows.size(), t.cols.size()}, DType::float64));
  write_table_png(dir + "/" + t.name + ".png", {t.title, t.row_axis, t.col_axis, t.rows, t.cols, t.values, t.signed_values});
}

json numbers_json(const std::vector<double>& numbers) {
  json out = json::array();
  for (double v : numbers) out.push_back(json_number(v));
  return out;
}

json table_json(const AnalysisTable& t) {
  const json values = numbers_json(t.values);
  return {{"name", t.name}, {"section", t.section}, {"title", t.title}, {"row_axis", t.row_axis}, {"col_axis", t.col_axis},
          {"rows", t.rows}, {"cols", t.cols}, {"values", values}, {"signed", t.signed_values}, {"compared", t.compared},
          {"examples", t.examples ? json(*t.examples) : json()}, {"low", numbers_json(t.low)}, {"high", numbers_json(t.high)}};
}

AnalysisTable table_from_json(const json& j) {
  AnalysisTable t;
  t.name = j.at("name").get<std::string>();
  t.section = j.at("section").get<std::string>();
  t.title = j.at("title").get<std::string>();
  t.row_axis = j.at("row_axis").get<std::string>();
  t.col_axis = j.at("col_axis").get<std::string>();
  t.rows = j.at("rows").get<std::vector<std::string>>();
  t.cols = j.at("cols").get<std::vector<std::string>>();
  for (const json& v : j.at("values")) t.values.push_back(number_from_json(v));
  t.signed_values = j.at("signed").get<bool>();
  t.compared = j.value("compared", false);  // summaries before it have none: their runs show facts only until analysed again
  if (j.contains("examples") && !j.at("examples").is_null()) t.examples = j.at("examples").get<std::size_t>();
  for (const json& v : j.value("low", json::array())) t.low.push_back(number_from_json(v));
  for (const json& v : j.value("high", json::array())) t.high.push_back(number_from_json(v));
  if ((!t.low.empty() || !t.high.empty()) && (t.low.size() != t.values.size() || t.high.size() != t.values.size())) {
    throw std::invalid_argument("table '" + t.name + "' has intervals for other than its values");
  }
  if (t.values.size() != t.rows.size() * t.cols.size()) throw std::invalid_argument("table '" + t.name + "' holds the wrong number of values");
  return t;
}

}  // namespace

void write_analysis(const std::string& dir, const AnalysisResult& result) {
  json tables = json::array(), facts = json::object();
  for (const AnalysisTable& t : result.tables) {
    write_table(dir, t);
    tables.push_back(table_json(t));
  }
  for (const auto& [name, value] : result.facts) facts[name] = json_number(value);
  json summary{{"tables", tables}, {"facts", facts}, {"notes", result.notes}, {"images", result.images}, {"titles", result.titles}};
  if (!result.checkpoint.empty()) summary["checkpoint"] = result.checkpoint;
  if (result.step) summary["step"] = *result.step;
  if (result.run_step) summary["run_step"] = *result.run_step;
  write_file_atomically(dir + "/summary.json", summary.dump(1) + "\n");
}

AnalysisResult read_analysis(const std::string& run_dir) {
  const std::string file = run_dir + "/analysis/summary.json";
  std::ifstream in(file);
  if (!in) throw RunFileMissing(file + " does not exist: run attnlab analyze " + run_dir);
  try {
    const json j = json::parse(in);
    AnalysisResult r;
    for (const json& t : j.at("tables")) r.tables.push_back(table_from_json(t));
    for (const auto& [name, value] : j.at("facts").items()) r.facts[name] = number_from_json(value);
    r.notes = j.at("notes").get<std::vector<std::string>>();
    r.images = j.at("images").get<std::vector<std::string>>();
    if (j.contains("titles")) r.titles = j.at("titles").get<std::map<std::string, std::string>>();
    r.checkpoint = j.value("checkpoint", "");
    if (j.contains("step")) r.step = j.at("step").get<std::size_t>();
    if (j.contains("run_step")) r.run_step = j.at("run_step").get<std::size_t>();
    return r;
  } catch (const json::exception& e) {
    throw std::runtime_error(file + " is not an analysis summary: " + json_error_text(e) + "; run attnlab analyze " + run_dir + " again, " +
                             "without --only (which keeps the other parts of this file)");
  } catch (const std::exception& e) {
    throw std::runtime_error(file + " is not an analysis summary: " + e.what() + "; run attnlab analyze " + run_dir + " again, " +
                             "without --only (which keeps the other parts of this file)");
  }
}

bool has_analysis(const std::string& run_dir) { return std::filesystem::exists(run_dir + "/analysis/summary.json"); }

// The run may have moved on since (a resume writes its checkpoints again, and captures more patterns).
std::string analysis_out_of_date(const std::string& run_dir, const AnalysisResult& r) {
  if (r.checkpoint.empty() || !r.step) return "";
  const std::optional<std::size_t> now = checkpoint_step(run_dir + "/" + r.checkpoint), last = checkpoint_step(run_dir + "/last.ckpt");
  if (now != r.step) return r.checkpoint + (now ? " now holds step " + std::to_string(*now) : std::string(" is gone or unreadable")) + ", not step " + std::to_string(*r.step);
  if (r.run_step && last != r.run_step) return "the run has trained on since (last.ckpt holds step " + (last ? std::to_string(*last) : std::string("?")) + ")";
  return "";
}

}  // namespace attnlab
