// Emergence over training, from the run's captured patterns: the step each head's previous-token and
// induction score (attnlab's, logged at every capture) first reached a threshold, the best head's
// TransformerLens detector scores at every capture, and the step the held-out metric jumped.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <regex>

#include "experiments/analysis/detectors.hpp"
#include "experiments/analysis/part.hpp"
#include "experiments/runner/metrics_log.hpp"
#include "framework/io/npy.hpp"

namespace attnlab {
namespace {

namespace fs = std::filesystem;

// The step of each pattern capture under patterns/ ("step_S_probe_P<suffix>.npy"), and the probes.
std::map<std::size_t, std::vector<std::size_t>> captured(const std::string& patterns, const std::string& suffix) {
  std::map<std::size_t, std::vector<std::size_t>> steps;
  const std::regex name("step_([0-9]{1,18})_probe_([0-9]{1,9})" + suffix + "\\.npy");  // longer digits: not a capture's
  std::smatch m;
  for (const auto& entry : fs::directory_iterator(patterns)) {
    const std::string file = entry.path().filename().string();
    if (std::regex_match(file, m, name)) steps[std::stoul(m[1])].push_back(std::stoul(m[2]));
  }
  return steps;
}

// The first eval step at which `column` has come half of the way from its first value to its best.
double metric_jump_step(const RunRecord& run, const std::string& column) {
  const auto curve = run.eval_curve(column);
  if (curve.size() < 2) return NAN;
  double best = curve[0].second;
  for (const auto& [step, v] : curve) best = std::max(best, v);
  const double half = curve[0].second + 0.5 * (best - curve[0].second);
  if (!(best > curve[0].second)) return NAN;
  for (const auto& [step, v] : curve)
    if (v >= half) return step;
  return NAN;
}

// attnlab's own head metrics as the run logged them at each capture: per part and metric, the first step
// each head's score reached `threshold`.
void metric_emergence(const RunRecord& run, double threshold, AnalysisResult& out) {
  const std::pair<const char*, double HeadMetrics::*> metrics[] = {{"previous_token", &HeadMetrics::previous_token},
                                                                   {"induction", &HeadMetrics::induction}};
  std::map<std::string, std::pair<std::size_t, std::size_t>> shape;  // part -> (layers, heads)
  for (const PatternCapture& c : run.captures)
    for (const HeadMetricRow& h : c.heads) {
      auto& s = shape[h.part];
      s = {std::max(s.first, h.layer + 1), std::max(s.second, h.head + 1)};
    }
  for (const auto& [part, size] : shape) {
    if (part == "cross") continue;  // no tokens to repeat across two sequences
    for (const auto& [name, member] : metrics) {
      std::vector<double> first(size.first * size.second, NAN);
      for (const PatternCapture& c : run.captures)
        for (const HeadMetricRow& h : c.heads) {
          double& f = first[h.layer * size.second + h.head];
          if (h.part == part && std::isnan(f) && h.metrics.*member >= threshold) f = static_cast<double>(c.step);
        }
      out.add({"emergence_" + part_prefix(part) + name, "emergence",
               std::string("First captured step at which the head's ") + name + " score (attnlab's, patterns.hpp) reached " +
                   std::to_string(threshold).substr(0, 4) + part_title(part) + " (blank: never)",
               "layer", "head", numbered(size.first), numbered(size.second), first, false, false, 0});
      out.facts["emergence." + part_prefix(part) + name + ".first_step"] = finite_extreme(first, false);
    }
  }
}

// TransformerLens's detector scores of the best head at each capture, from the saved patterns.
void detector_series(const std::string& patterns, const std::string& part, AnalysisResult& out) {
  const std::string suffix = part.empty() ? "" : "_" + part, side = part == "decoder" ? "_target_" : "_";
  const auto steps = captured(patterns, suffix);
  std::vector<std::string> rows;
  std::vector<double> values;
  for (const auto& [step, probes] : steps) {
    std::unique_ptr<DetectorSums> sums;  // sized by the first probe's [layers, heads, T, T]
    for (std::size_t p : probes) {
      const std::string tokens_file = patterns + "/probe_" + std::to_string(p) + side + "tokens.npy";
      if (!fs::exists(tokens_file)) return;  // images: no tokens to define the detectors
      const Tensor pattern = read_npy(patterns + "/step_" + std::to_string(step) + "_probe_" + std::to_string(p) + suffix + ".npy");
      const Tensor tokens = read_npy(tokens_file);
      const std::vector<std::int64_t> ids(tokens.data<std::int64_t>(), tokens.data<std::int64_t>() + tokens.numel());
      const std::size_t heads = pattern.size(0) * pattern.size(1), t = pattern.size(2);
      if (!sums) sums = std::make_unique<DetectorSums>(heads);
      const std::vector<double> v = pattern.to_vector();
      for (std::size_t k = 0; k < heads; ++k) sums->add(k, v.data() + k * t * t, t, ids, t);
    }
    rows.push_back(std::to_string(step));
    for (DetectorKind kind : detector_kinds()) values.push_back(finite_extreme(sums->mean(kind), true));
  }
  if (rows.empty()) return;
  std::vector<std::string> cols;
  for (DetectorKind kind : detector_kinds()) cols.push_back(detector_name(kind));
  out.add({"emergence_" + part_prefix(part) + "detectors", "emergence",
           "TransformerLens detector score of the best head at each captured step (mean over the probes)" + part_title(part), "step",
           "detector", rows, cols, values, false, false, 0});
}

}  // namespace

void emergence(const std::string& run_dir, const ExperimentConfig& config, double threshold, AnalysisResult& out) {
  const std::string patterns = run_dir + "/patterns";
  if (!fs::is_directory(patterns)) {
    out.notes.push_back("emergence: the run captured no patterns: " + why_no_patterns(config));
    return;
  }
  const RunRecord run = read_run(run_dir);
  out.facts["emergence.metric_jump_step"] = metric_jump_step(run, "token_accuracy");
  out.facts["emergence.threshold"] = threshold;
  metric_emergence(run, threshold, out);
  const std::vector<std::string> signed_parts = signed_pattern_parts(config);
  for (const std::string& part : {std::string(), std::string("encoder"), std::string("decoder")}) {
    if (std::find(signed_parts.begin(), signed_parts.end(), part) == signed_parts.end()) detector_series(patterns, part, out);
    else out.notes.push_back(signed_pattern_note(part, "emergence"));  // a part the model has: kernel_uses names it
  }
}

namespace {

class EmergencePart {
 public:
  static constexpr const char* kName = "emergence";
  static constexpr const char* kDescription =
      "from the captured patterns: the step each head's previous-token and induction score reached a threshold, and the held-out metric's jump";
  static constexpr const char* kTitle = "Emergence over training";
  static constexpr int kOrder = 70;
  struct Options {
    double threshold = 0.5;
  };
  static Schema<Options> options_schema() {
    Schema<Options> s;
    s.field("threshold", &Options::threshold, "the previous-token or induction score (attnlab's) that counts as formed", Range::closed(0, 1));
    return s;
  }
  static std::string needs(const Model&, const data::DataSource& data) { return needs_token_inputs(data); }
  static void run(const PartInputs& p, const Options& o) { emergence(p.run.dir, p.run.config, o.threshold, p.result); }
};

}  // namespace

ATTNLAB_REGISTER_ANALYSIS(EmergencePart);

}  // namespace attnlab
