// `attnlab analyze RUN`: loads a run's checkpoint, runs the parts asked for on its held-out split, and
// writes analysis/ whole (a new folder renamed into place) and the run's report.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <stdexcept>

#include "experiments/analysis/analysis.hpp"
#include "experiments/runner/experiment.hpp"
#include "experiments/runner/memory_estimate.hpp"
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

namespace {

// What one part of the analysis reads and writes.
struct PartInputs {
  const AnalysisInputs& in;
  Experiment& x;
  const LoadedRun& run;
  const AnalyzeOptions& options;
  const std::string& fresh;  // the analysis folder being written
  AnalysisResult& result;
};

// A part: its name, what it needs of the data ("" when it applies; else what it needs, said to the user),
// and what it does.
struct AnalysisPart {
  std::string name;
  std::function<std::string(const data::DataSource&)> needs;
  std::function<void(const PartInputs&)> run;
};

std::string tokens_needed(const data::DataSource& data) {
  return data.token_inputs() ? "" : "token inputs (it compares the tokens at each position); this run reads images";
}

const std::vector<AnalysisPart>& parts() {
  static const std::vector<AnalysisPart> list{
      {"ablation", {}, [](const PartInputs& p) { head_ablation(p.in, p.result), layer_ablation(p.in, p.result); }},
      {"patching", {},
       [](const PartInputs& p) {
         Generator gen(p.run.config.seed + 3);
         activation_patching(*p.x.model, *p.x.data, p.x.data->patching_pairs(p.options.pairs, gen), p.result);
       }},
      {"attribution", {}, [](const PartInputs& p) { logit_attribution(p.in, p.result), logit_lens(p.in, p.result); }},
      {"detectors", tokens_needed,
       [](const PartInputs& p) { head_detectors(p.in, p.result), repeated_tokens_test(p.in, p.run.config.seed + 4, p.result); }},
      {"rollout",
       [](const data::DataSource& data) {
         return data.token_inputs() ? "image inputs (it follows attention back to the patches of an image); this run reads tokens" : "";
       },
       [](const PartInputs& p) { rollout_maps(p.in, p.options.rollout, p.fresh, p.result); }},
      {"probes", {}, [](const PartInputs& p) { residual_probes(p.in, p.run.config.seed + 5, p.result); }},
      {"emergence", tokens_needed, [](const PartInputs& p) { emergence(p.run.dir, p.options.emergence_threshold, p.result); }},
  };
  return list;
}

// Patching forwards its pairs as one batch, every head's output and residual stream cached: refused
// before anything is drawn when that batch would not fit in memory (as training refuses its batch).
void check_pairs_fit(const ExperimentConfig& config, std::size_t pairs) {
  ExperimentConfig one_batch = config;
  one_batch.train.batch_size = pairs;
  one_batch.log.patterns = false;
  const MemoryEstimate m = estimate_memory(one_batch);
  const double needs = m.activations + m.data, limit = physical_memory_bytes() / 2;  // a training step's, about the forward with its caches
  if (needs <= limit) return;
  const double fit = std::floor(static_cast<double>(pairs) * limit / needs);
  throw std::invalid_argument("--pairs " + std::to_string(pairs) + ": patching forwards them as one batch, about " +
                              std::to_string(static_cast<long long>(needs / (1 << 20))) + " MiB with its caches, more than half of this machine's " +
                              std::to_string(static_cast<long long>(physical_memory_bytes() / (1 << 20))) + " MiB; give at most " +
                              std::to_string(static_cast<long long>(fit)));
}

std::string what_it_needs(const AnalysisPart& part, const data::DataSource& data) { return part.needs ? part.needs(data) : ""; }

// With --only, every part asked for must apply to the run: an error naming what it needs and the parts
// that do apply. Without it, the parts that do not apply are skipped with a note.
void check_applicable(const AnalyzeOptions& o, const data::DataSource& data, const std::string& run_dir, AnalysisResult& result) {
  std::string applicable;
  for (const AnalysisPart& part : parts())
    if (what_it_needs(part, data).empty()) applicable += (applicable.empty() ? "" : ", ") + part.name;
  for (const AnalysisPart& part : parts()) {
    const std::string needs = what_it_needs(part, data);
    if (needs.empty() || !wanted(o, part.name)) continue;
    if (!o.only.empty()) {
      throw std::invalid_argument("--only " + part.name + ": " + part.name + " needs " + needs + "; the parts that apply to " + run_dir + ": " +
                                  applicable);
    }
    result.notes.push_back(part.name + ": skipped: it needs " + needs);
  }
}

}  // namespace

const std::vector<std::string>& analysis_parts() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const AnalysisPart& part : parts()) out.push_back(part.name);
    return out;
  }();
  return names;
}

AnalysisResult analyze_run(const std::string& run_dir, const AnalyzeOptions& o) {
  check_options(o);
  if (!fs::is_directory(run_dir)) throw std::runtime_error(run_dir + " is not a folder; give a run folder (log.dir/name)");
  const RunFolderLock lock(run_dir, "attnlab analyze");  // one writer: not while the run trains or another analysis runs
  const LoadedRun run = load_run(run_dir, o.checkpoint);  // clears what an earlier, killed analysis left
  Experiment x(run.config);
  AnalysisResult result;
  check_applicable(o, *x.data, run_dir, result);
  if (wanted(o, "patching")) check_pairs_fit(run.config, o.pairs);
  load_run_model(*x.model, run);
  const TrainConfig& t = run.config.train;
  AnalysisInputs in{*x.model, *x.data, held_out_examples(*x.data, o.examples, t.batch_size, run.config.seed + 2)};
  const std::string dir = run_dir + "/analysis", fresh = temporary_path(dir);
  fs::remove_all(fresh);
  create_folders(fresh, "the analysis folder");
  // Ctrl-C or SIGTERM stops it after the part under way; the earlier analysis stays as it was.
  const StopSignals stop;
  try {
    for (const AnalysisPart& part : parts()) {
      if (!wanted(o, part.name) || !what_it_needs(part, *x.data).empty()) continue;
      test_stop_point("part:" + part.name);
      if (stop.requested()) {
        throw StoppedBySignal("attnlab analyze: stopped by " + std::string(stop.name()) + " before " + part.name + "; " + dir + " is as it was",
                              stop.signal());
      }
      const auto started = std::chrono::steady_clock::now();
      std::printf("attnlab analyze: %s ...", part.name.c_str());
      std::fflush(stdout);
      part.run({in, x, run, o, fresh, result});
      std::printf(" %.1f s\n", std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
      std::fflush(stdout);
    }
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
