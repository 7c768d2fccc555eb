#include "experiments/runner/metrics_log.hpp"

#include <charconv>
#include <functional>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "experiments/runner/file_fields.hpp"
#include "experiments/runner/run_folder.hpp"
#include "framework/io/atomic_file.hpp"
#include "framework/io/json_errors.hpp"

namespace attnlab {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// A number for JSON: null when it is not finite (JSON has no NaN or infinity).
json number(double v) { return json_number(v); }
double number(const json& v) { return number_from_json(v); }

}  // namespace

std::string HeadMetricRow::name() const {
  return (part.empty() ? "" : part + " ") + "L" + std::to_string(layer) + "H" + std::to_string(head);
}

namespace {

json row_json(const MetricRow& r) {
  json j{{"step", r.step}, {"split", r.split}};
  for (const auto& [name, member] : MetricRow::columns()) j[name] = number(r.*member);
  return j;
}

json capture_json(const PatternCapture& c) {
  json heads = json::array();
  for (const HeadMetricRow& h : c.heads) {
    json head{{"layer", h.layer}, {"head", h.head}};
    if (!h.part.empty()) head["part"] = h.part;
    for (const auto& [name, member] : head_metric_fields()) head[name] = number(h.metrics.*member);
    heads.push_back(std::move(head));
  }
  return json{{"step", c.step}, {"split", "patterns"}, {"heads", std::move(heads)}};
}

PatternCapture capture_from(const json& j) {
  PatternCapture c;
  c.step = j.at("step").get<std::size_t>();
  for (const json& h : j.at("heads")) {
    HeadMetricRow head;
    head.layer = h.at("layer").get<std::size_t>();
    head.head = h.at("head").get<std::size_t>();
    head.part = h.value("part", "");
    for (const auto& [name, member] : head_metric_fields()) head.metrics.*member = h.contains(name) ? number(h.at(name)) : kNaN;
    c.heads.push_back(head);
  }
  return c;
}

MetricRow row_from(const json& j) {
  MetricRow r;
  r.step = j.at("step").get<std::size_t>();
  r.split = j.at("split").get<std::string>();
  for (const auto& [name, member] : MetricRow::columns()) r.*member = j.contains(name) ? number(j.at(name)) : kNaN;
  return r;
}

// The step of a metrics.jsonl line (npos when the line is not a row).
// A row's step and split ("train", "eval", "patterns", ...); npos for a line that is not a row.
using RowKey = std::pair<std::size_t, std::string>;

RowKey jsonl_key(const std::string& line) {
  try {
    const json row = json::parse(line);
    return {row.at("step").get<std::size_t>(), row.value("split", "")};
  } catch (const std::exception&) {
    return {std::string::npos, ""};
  }
}

RowKey csv_key(const std::string& line) {  // "step,split,..."
  std::size_t step = std::string::npos;
  const auto [end, error] = std::from_chars(line.data(), line.data() + line.size(), step);
  if (error != std::errc() || end == line.data() + line.size() || *end != ',') return {std::string::npos, ""};
  const std::string rest(end + 1, line.data() + line.size());
  return {step, rest.substr(0, rest.find(','))};
}

// The lines of `path` (after `header_lines`) whose step is at most `step`, and of `step` itself only its
// training row when `step_evaluations_dropped`; nullopt when there is no such file. A line that is no row
// is refused with its file and line (a resume must not drop the user's rows unseen), but for the last
// line, which a kill may have cut short.
std::optional<std::string> rows_up_to(const std::string& path, std::size_t step, bool step_evaluations_dropped, std::size_t header_lines,
                                      const std::function<RowKey(const std::string&)>& key_of_line) {
  if (!fs::exists(path)) return std::nullopt;
  const std::string text = read_file(path, "metrics log");
  std::istringstream in(text);
  std::string kept, line;
  for (std::size_t i = 0; std::getline(in, line); ++i) {
    if (i < header_lines) {
      kept += line + "\n";
      continue;
    }
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;  // a blank line (CRLF's too)
    const RowKey key = key_of_line(line);
    if (key.first == std::string::npos) {
      if (in.peek() == std::char_traits<char>::eof()) continue;  // the last line, cut short
      throw std::runtime_error(path + ":" + std::to_string(i + 1) + ": not a metrics row, so the resume cannot tell whether it comes before "
                               "the checkpoint; restore the line or remove it, then resume again");
    }
    if (key.first < step || (key.first == step && (!step_evaluations_dropped || key.second == "train"))) kept += line + "\n";
  }
  return kept;
}

std::string csv_header() {
  std::string header = "step,split";
  for (const auto& [name, member] : MetricRow::columns()) header += std::string(",") + name;
  return header + "\n";
}

}  // namespace

// ---- rows ----

MetricRow::MetricRow() : loss(kNaN), token_accuracy(kNaN), exact_match(kNaN), lr(kNaN), tokens_per_s(kNaN), elapsed_s(kNaN) {}

const std::vector<std::pair<const char*, double MetricRow::*>>& MetricRow::columns() {
  static const std::vector<std::pair<const char*, double MetricRow::*>> columns{
      {"loss", &MetricRow::loss}, {"token_accuracy", &MetricRow::token_accuracy}, {"exact_match", &MetricRow::exact_match},
      {"lr", &MetricRow::lr},     {"tokens_per_s", &MetricRow::tokens_per_s},     {"elapsed_s", &MetricRow::elapsed_s}};
  return columns;
}

double MetricRow::value(const std::string& column) const {
  for (const auto& [name, member] : columns())
    if (column == name) return this->*member;
  return kNaN;
}

// ---- summary.json ----

RunSummary::RunSummary()
    : final_eval_loss(kNaN), final_token_accuracy(kNaN), final_exact_match(kNaN), best_eval_loss(kNaN), allreduce_ms_per_step(kNaN),
      allreduce_share(kNaN) {}

void write_summary(const std::string& run_dir, const RunSummary& s) {
  json j{{"name", s.name},
               {"status", s.status},
               {"steps", s.steps},
               {"params", s.params},
               {"train_seconds", number(s.train_seconds)},
               {"tokens_per_s", number(s.tokens_per_s)},
               {"peak_rss_mb", number(s.peak_rss_mb)},
               {"state_size", number(s.state_size)},
               {"openblas_core", s.openblas_core},
               {"cpu_vendor", s.cpu_vendor},
               {"compiler", s.compiler},
               {"final_eval_loss", number(s.final_eval_loss)},
               {"final_token_accuracy", number(s.final_token_accuracy)},
               {"final_exact_match", number(s.final_exact_match)},
               {"final_scored_tokens", s.final_scored_tokens},
               {"best_eval_loss", number(s.best_eval_loss)}};
  if (s.processes > 1) {
    j["data_parallel"] = {{"processes", s.processes},
                          {"allreduce_bytes", s.allreduce_bytes},
                          {"allreduce_calls_per_step", s.allreduce_calls_per_step},
                          {"allreduce_ms_per_step", number(s.allreduce_ms_per_step)},
                          {"allreduce_share", number(s.allreduce_share)}};
  }
  write_file_atomically(run_dir + "/summary.json", j.dump(2) + "\n");
}

std::optional<RunSummary> read_summary(const std::string& run_dir) {
  const std::string path = run_dir + "/summary.json";
  if (!fs::exists(path)) return std::nullopt;
  try {
    const json j = json::parse(read_file(path, "run summary"));
    RunSummary s;
    s.name = j.at("name").get<std::string>();
    s.status = j.at("status").get<std::string>();
    s.steps = j.at("steps").get<std::size_t>();
    s.params = j.at("params").get<std::size_t>();
    s.final_scored_tokens = j.at("final_scored_tokens").get<std::size_t>();
    s.train_seconds = number(j.at("train_seconds"));
    s.tokens_per_s = number(j.at("tokens_per_s"));
    s.peak_rss_mb = number(j.at("peak_rss_mb"));
    if (j.contains("openblas_core")) s.openblas_core = j.at("openblas_core").get<std::string>();  // written since 2026-11-27
    if (j.contains("cpu_vendor")) s.cpu_vendor = j.at("cpu_vendor").get<std::string>();  // older summaries lack it
    if (j.contains("compiler")) s.compiler = j.at("compiler").get<std::string>();        // written since 2026-12-07
    s.state_size = j.contains("state_size") ? number(j.at("state_size")) : kNaN;  // written since the state size existed
    s.final_eval_loss = number(j.at("final_eval_loss"));
    s.final_token_accuracy = number(j.at("final_token_accuracy"));
    s.final_exact_match = number(j.at("final_exact_match"));
    s.best_eval_loss = number(j.at("best_eval_loss"));
    if (j.contains("data_parallel")) {
      const json& d = j.at("data_parallel");
      s.processes = d.at("processes").get<std::size_t>();
      s.allreduce_bytes = d.at("allreduce_bytes").get<std::size_t>();
      s.allreduce_calls_per_step = d.at("allreduce_calls_per_step").get<std::size_t>();
      s.allreduce_ms_per_step = number(d.at("allreduce_ms_per_step"));
      s.allreduce_share = number(d.at("allreduce_share"));
    }
    return s;
  } catch (const json::exception& e) {
    throw std::runtime_error(path + " is not a run summary: " + json_error_text(e) +
                             " (attnlab train writes it when a run ends; delete it and resume the run to write it again)");
  }
}

// ---- the log ----

void check_resumable_metrics(const std::string& run_dir, std::size_t step, bool evaluation_owed) {
  rows_up_to(run_dir + "/metrics.jsonl", step, evaluation_owed, 0, jsonl_key);
  rows_up_to(run_dir + "/metrics.csv", step, evaluation_owed, 1, csv_key);
}

MetricsLog::MetricsLog(const std::string& run_dir, std::optional<std::size_t> after_step, bool evaluation_owed) {
  const std::string jsonl = run_dir + "/metrics.jsonl", csv = run_dir + "/metrics.csv";
  if (after_step) {  // both read and checked before either is rewritten
    const std::optional<std::string> jsonl_rows = rows_up_to(jsonl, *after_step, evaluation_owed, 0, jsonl_key);
    const std::optional<std::string> csv_rows = rows_up_to(csv, *after_step, evaluation_owed, 1, csv_key);
    if (jsonl_rows) write_file_atomically(jsonl, *jsonl_rows);
    if (csv_rows) write_file_atomically(csv, *csv_rows);
  }
  if (!fs::exists(csv)) write_file_atomically(csv, csv_header());
  jsonl_.open(jsonl, std::ios::app);
  csv_.open(csv, std::ios::app);
  if (!jsonl_ || !csv_) throw std::runtime_error("cannot append to the metrics of " + run_dir);
}

void MetricsLog::write(const MetricRow& row) {
  jsonl_ << row_json(row).dump() << "\n";
  csv_ << row.step << "," << row.split;
  for (const auto& [name, member] : MetricRow::columns()) csv_ << "," << csv_number(row.*member);
  csv_ << "\n";
  jsonl_.flush();
  csv_.flush();
}

void MetricsLog::write(const PatternCapture& capture) {
  jsonl_ << capture_json(capture).dump() << "\n";
  jsonl_.flush();
}

// ---- reading a run ----

std::vector<std::pair<double, double>> RunRecord::eval_curve(const std::string& column) const {
  std::vector<std::pair<double, double>> out;
  for (const MetricRow& r : rows)
    if (r.split == "eval") out.emplace_back(static_cast<double>(r.step), r.value(column));
  return out;
}

std::vector<std::pair<double, double>> RunRecord::train_loss_curve() const {
  std::vector<std::pair<double, double>> out;
  for (const MetricRow& r : rows)
    if (r.split == "train") out.emplace_back(static_cast<double>(r.step), r.loss);
  return out;
}

double RunRecord::final_value(const std::string& column) const {
  for (auto r = rows.rbegin(); r != rows.rend(); ++r)
    if (r->split == "final") return r->value(column);
  const auto curve = eval_curve(column);
  return curve.empty() ? kNaN : curve.back().second;
}

RunRecord read_run(const std::string& run_dir) {
  RunRecord run;
  run.dir = run_dir;
  run.config_text = run_config_text(run_dir);
  std::ifstream in(run_dir + "/metrics.jsonl");
  if (!in) {
    const std::string message = "cannot read " + run_dir + "/metrics.jsonl";
    if (!fs::exists(run_dir + "/metrics.jsonl")) throw FileMissing(message + ": it is not there");
    throw std::runtime_error(message);
  }
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].empty()) continue;
    try {
      const json j = json::parse(lines[i]);
      if (j.at("split").get<std::string>() == "patterns") {
        run.captures.push_back(capture_from(j));
      } else {
        run.rows.push_back(row_from(j));
      }
    } catch (const json::exception& e) {
      const std::string where = run_dir + "/metrics.jsonl:" + std::to_string(i + 1) + ": ";
      if (i + 1 == lines.size() && dynamic_cast<const json::parse_error*>(&e)) {  // a kill while the line was written
        std::fprintf(stderr, "attnlab: %sthe last line is cut short (%s); read without it\n", where.c_str(), json_error_text(e).c_str());
        continue;
      }
      throw std::runtime_error(where + "not a metrics row: " + json_error_text(e) +
                               " (attnlab train writes one JSON object per line; restore the line or remove it)");
    }
  }
  run.summary = read_summary(run_dir);
  return run;
}

}  // namespace attnlab
