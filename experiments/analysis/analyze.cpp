// `attnlab analyze RUN`: loads a run's checkpoint, runs the parts asked for on its held-out split, and
// writes analysis/ whole (a new folder renamed into place) and the run's report.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <stdexcept>

#include "experiments/analysis/analysis.hpp"
#include "experiments/runner/experiment.hpp"
#include "experiments/runner/report.hpp"
#include "experiments/runner/run_folder.hpp"
#include "experiments/runner/stop_signals.hpp"
#include "framework/io/atomic_file.hpp"

namespace attnlab {
namespace {

namespace fs = std::filesystem;

bool wanted(const AnalyzeOptions& o, const std::string& part) {
  return o.only.empty() || std::find(o.only.begin(), o.only.end(), part) != o.only.end();
}

void check_options(const AnalyzeOptions& o) {
  for (const std::string& part : o.only) {
    if (std::find(analysis_parts().begin(), analysis_parts().end(), part) == analysis_parts().end()) {
      std::string known;
      for (const std::string& p : analysis_parts()) known += (known.empty() ? "" : ", ") + p;
      throw std::invalid_argument("--only: '" + part + "' is not among [" + known + "]");
    }
  }
  if (o.checkpoint != "best" && o.checkpoint != "last") throw std::invalid_argument("--checkpoint must be best or last, got '" + o.checkpoint + "'");
  if (!(o.rollout.discard_ratio >= 0 && o.rollout.discard_ratio < 1)) throw std::invalid_argument("--discard-ratio must be in [0, 1)");
  if (o.pairs == 0) throw std::invalid_argument("--pairs must be at least 1");
}

// With --only, what the earlier analysis found in the other parts is kept (its tables and facts, its
// notes and the rollout images), so that re-running one part never loses the rest.
void keep_other_parts(const std::string& run_dir, const std::string& fresh, const AnalyzeOptions& o, AnalysisResult& result) {
  if (o.only.empty() || !has_analysis(run_dir)) return;
  const AnalysisResult earlier = read_analysis(run_dir);
  // A table belongs to its section; a fact or note to the part its name starts with ("patching.",
  // "rollout:"), except the baseline (ablation's) and the repeated-tokens test (the detectors').
  const auto part_of = [](const std::string& name) {
    const std::string head = name.substr(0, name.find_first_of(".:"));
    return head == "baseline" ? std::string("ablation") : head == "repeated_tokens" ? std::string("detectors") : head;
  };
  for (const AnalysisTable& t : earlier.tables)
    if (!wanted(o, t.section)) result.tables.push_back(t);
  for (const auto& [name, value] : earlier.facts)
    if (!wanted(o, part_of(name)) && !result.facts.count(name)) result.facts[name] = value;
  for (const std::string& note : earlier.notes)
    if (!wanted(o, part_of(note))) result.notes.push_back(note);
  const auto rank = [](const AnalysisTable& t) {
    const auto& parts = analysis_parts();
    return std::find(parts.begin(), parts.end(), t.section) - parts.begin();
  };
  std::stable_sort(result.tables.begin(), result.tables.end(), [&](const AnalysisTable& a, const AnalysisTable& b) { return rank(a) < rank(b); });
  if (!wanted(o, "rollout")) {
    for (const std::string& image : earlier.images) fs::copy_file(run_dir + "/analysis/" + image, fresh + "/" + image);
    result.images = earlier.images;
    if (fs::exists(run_dir + "/analysis/rollout_maps.npy")) fs::copy_file(run_dir + "/analysis/rollout_maps.npy", fresh + "/rollout_maps.npy");
  }
}

}  // namespace

const std::vector<std::string>& analysis_parts() {
  static const std::vector<std::string> parts{"ablation", "patching", "attribution", "detectors", "rollout", "probes", "emergence"};
  return parts;
}

AnalysisResult analyze_run(const std::string& run_dir, const AnalyzeOptions& o) {
  check_options(o);
  const LoadedRun run = load_run(run_dir, o.checkpoint);  // clears what an earlier, killed analysis left
  Experiment x(run.config);
  load_run_model(*x.model, run);
  const TrainConfig& t = run.config.train;
  AnalysisInputs in{*x.model, *x.data, held_out_examples(*x.data, o.examples, t.batch_size, run.config.seed + 2)};
  const std::string dir = run_dir + "/analysis", fresh = temporary_path(dir);
  fs::remove_all(fresh);
  create_folders(fresh, "the analysis folder");
  AnalysisResult result;
  // Ctrl-C or SIGTERM stops it after the part under way; the earlier analysis stays as it was.
  const StopSignals stop;
  const auto part = [&](const std::string& name, const std::function<void()>& run_part) {
    if (!wanted(o, name)) return;
    test_stop_point("part:" + name);
    if (stop.requested()) throw StoppedBySignal("attnlab analyze: stopped by " + std::string(stop.name()) + " before " + name + "; " + dir +
                                                    " is as it was", stop.signal());
    run_part();
  };
  try {
    part("ablation", [&] { head_ablation(in, result), layer_ablation(in, result); });
    part("patching", [&] {
      Generator gen(run.config.seed + 3);
      activation_patching(*x.model, *x.data, x.data->patching_pairs(o.pairs, gen), result);
    });
    part("attribution", [&] { logit_attribution(in, result), logit_lens(in, result); });
    part("detectors", [&] { head_detectors(in, result), repeated_tokens_test(in, run.config.seed + 4, result); });
    part("rollout", [&] { rollout_maps(in, o.rollout, fresh, result); });
    part("probes", [&] { residual_probes(in, run.config.seed + 5, result); });
    part("emergence", [&] { emergence(run_dir, o.emergence_threshold, result); });
    if (stop.requested()) throw StoppedBySignal("attnlab analyze: stopped by " + std::string(stop.name()) + "; " + dir + " is as it was", stop.signal());
    result.facts["examples"] = 0;
    for (const Batch& b : in.batches) result.facts["examples"] += static_cast<double>(b.input.size(0));
    keep_other_parts(run_dir, fresh, o, result);
    write_analysis(fresh, result);
    replace_folder(fresh, dir);
  } catch (...) {
    fs::remove_all(fresh);  // the earlier analysis, if any, stays whole
    throw;
  }
  try {
    write_run_report(run_dir);
  } catch (const std::exception& e) {  // the analysis is in place: a report that cannot be written is not its failure
    std::fprintf(stderr, "attnlab: warning: report.html not written: %s\n", e.what());
  }
  return result;
}

}  // namespace attnlab
