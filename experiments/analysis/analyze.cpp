// `attnlab analyze RUN`: loads a run's checkpoint, runs the parts asked for on its held-out split, and
// writes analysis/ whole (a new folder renamed into place) and the run's report.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <stdexcept>

#include "experiments/analysis/part.hpp"
#include "experiments/runner/experiment.hpp"
#include "experiments/runner/report.hpp"
#include "experiments/runner/run_folder.hpp"
#include "experiments/runner/stop_signals.hpp"
#include "framework/io/atomic_file.hpp"

namespace attnlab {
template <>
AnalysisRegistry& AnalysisRegistry::instance() {
  static AnalysisRegistry registry("analysis part");
  return registry;
}

std::vector<const AnalysisPartInfo*> analysis_parts_in_order() {
  std::vector<const AnalysisPartInfo*> parts;
  for (const std::string& name : AnalysisRegistry::instance().names()) parts.push_back(&AnalysisRegistry::instance().find(name));
  std::stable_sort(parts.begin(), parts.end(), [](const AnalysisPartInfo* a, const AnalysisPartInfo* b) { return a->order < b->order; });
  return parts;
}

namespace {

namespace fs = std::filesystem;

bool wanted(const AnalyzeOptions& o, const std::string& part) {
  return o.only.empty() || std::find(o.only.begin(), o.only.end(), part) != o.only.end();
}

// A part's options as the command line gave them (an empty mapping: its defaults).
ComponentOptions options_of(const AnalyzeOptions& o, const std::string& part) {
  const auto it = o.part_options.find(part);
  return it == o.part_options.end() ? ComponentOptions() : it->second;
}

void check_options(const AnalyzeOptions& o) {
  for (const std::string& part : o.only) {
    try {
      AnalysisRegistry::instance().find(part);
    } catch (const std::invalid_argument& e) {  // "analysis part 'x' is not among [...]; did you mean 'y'?"
      throw std::invalid_argument(std::string("--only: ") + e.what());
    }
  }
  for (const auto& [part, options] : o.part_options) {
    AnalysisRegistry::instance().find(part).options.check(options);
    if (!o.only.empty() && std::find(o.only.begin(), o.only.end(), part) == o.only.end()) {  // they would go unread
      std::string only;
      for (const std::string& p : o.only) only += (only.empty() ? "" : ",") + p;
      throw std::invalid_argument("options of the " + part + " part were given, but --only " + only + " leaves it out; add " + part +
                                  " to --only or drop them");
    }
  }
  if (o.checkpoint != "best" && o.checkpoint != "last") throw std::invalid_argument("--checkpoint must be best or last, got '" + o.checkpoint + "'");
}

// The part a fact, note or file belongs to: the registered part its name begins with ("patching.x",
// "rollout: ...", "rollout_probe_0.png"); "" for the analysis's own ("examples").
std::string part_of(const std::string& name) {
  std::string best;
  for (const std::string& part : AnalysisRegistry::instance().names()) {
    const bool begins = name.rfind(part, 0) == 0 && (name.size() == part.size() || std::string(".:_").find(name[part.size()]) != std::string::npos);
    if (begins && part.size() > best.size()) best = part;
  }
  return best;
}

// With --only, the parts kept from the earlier analysis must be of the same checkpoint at the same step:
// after a resume (or with another --checkpoint) they would describe another model beside the new ones.
// `last`: the step last.ckpt holds now.
void check_same_model(const std::string& run_dir, const AnalyzeOptions& o, const LoadedRun& run, std::optional<std::size_t> last) {
  if (o.only.empty() || !has_analysis(run_dir)) return;
  const AnalysisResult earlier = read_analysis(run_dir);
  if (earlier.checkpoint.empty()) return;
  const auto step = [](std::optional<std::size_t> s) { return s ? std::to_string(*s) : std::string("?"); };
  std::string differs;
  if (earlier.checkpoint != run.checkpoint_file || earlier.step != run.state.step) {
    differs = "is of " + earlier.checkpoint + " at step " + step(earlier.step) + ", and this analysis would be of " + run.checkpoint_file +
              " at step " + std::to_string(run.state.step);
  } else if (earlier.run_step && earlier.run_step != last) {
    differs = "was made when the run had trained to step " + step(earlier.run_step) + ", and it has trained to step " + step(last) + " since";
  }
  if (differs.empty()) return;
  throw std::invalid_argument("--only: " + run_dir + "/analysis " + differs + ": the parts kept from it would describe another model or " +
                              "history. Run attnlab analyze " + run_dir + " without --only to analyse every part again");
}

// With --only, what the earlier analysis found in the other parts is kept (its tables, facts, notes,
// images and files), so that re-running one part never loses the rest.
void keep_other_parts(const std::string& run_dir, const std::string& fresh, const AnalyzeOptions& o, AnalysisResult& result) {
  if (o.only.empty() || !has_analysis(run_dir)) return;
  const AnalysisResult earlier = read_analysis(run_dir);
  const auto kept = [&](const std::string& part) { return !part.empty() && !wanted(o, part); };
  for (const AnalysisTable& t : earlier.tables)
    if (kept(t.section)) result.tables.push_back(t);
  for (const auto& [name, value] : earlier.facts)
    if (kept(part_of(name)) && !result.facts.count(name)) result.facts[name] = value;
  for (const std::string& note : earlier.notes)
    if (kept(part_of(note))) result.notes.push_back(note);
  for (const std::string& image : earlier.images)
    if (kept(part_of(image))) result.images.push_back(image);
  for (const auto& entry : fs::directory_iterator(run_dir + "/analysis")) {  // images and the parts' other files (rollout_maps.npy)
    const std::string file = entry.path().filename().string();
    if (kept(part_of(file)) && !fs::exists(fresh + "/" + file)) fs::copy_file(entry.path(), fresh + "/" + file);
  }
  for (const auto& [part, title] : earlier.titles)
    if (kept(part)) result.titles.emplace(part, title);
  std::map<std::string, int> order;
  for (const AnalysisPartInfo* part : analysis_parts_in_order()) order[part->name] = part->order;
  std::stable_sort(result.tables.begin(), result.tables.end(),
                   [&](const AnalysisTable& a, const AnalysisTable& b) { return order[a.section] < order[b.section]; });
}

// With --only, every part asked for must apply to the run: an error naming what it needs and the parts
// that do apply. Without it, the parts that do not apply are skipped with a note.
void check_applicable(const AnalyzeOptions& o, const Model& model, const data::DataSource& data, const std::string& run_dir,
                      AnalysisResult& result) {
  std::string applicable;
  for (const AnalysisPartInfo* part : analysis_parts_in_order())
    if (part->needs(model, data).empty()) applicable += (applicable.empty() ? "" : ", ") + part->name;
  for (const AnalysisPartInfo* part : analysis_parts_in_order()) {
    const std::string needs = part->needs(model, data);
    if (needs.empty() || !wanted(o, part->name)) continue;
    if (!o.only.empty()) {
      throw std::invalid_argument("--only " + part->name + ": " + part->name + " needs " + needs + "; the parts that apply to " + run_dir +
                                  ": " + applicable);
    }
    result.notes.push_back(part->name + ": skipped: it needs " + needs);
  }
}

// Runs one part, its tables put in its section and its heading recorded for the report.
// `index` of `count`: its place among the parts this analysis runs, for the progress line.
void run_part(const AnalysisPartInfo& part, const PartInputs& p, const ComponentOptions& options, std::size_t index, std::size_t count) {
  const auto started = std::chrono::steady_clock::now();
  std::printf("attnlab analyze: [%zu/%zu] %s ...", index, count, part.name.c_str());
  std::fflush(stdout);
  const std::size_t before = p.result.tables.size();
  part.run(p, options);
  for (std::size_t i = before; i < p.result.tables.size(); ++i) {
    p.result.tables[i].section = part.name;
    if (!p.result.tables[i].examples) p.result.tables[i].examples = example_count(p.in.batches);
  }
  p.result.titles[part.name] = part.title;
  std::printf(" %.1f s\n", std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  std::fflush(stdout);
}

}  // namespace

AnalysisResult analyze_run(const std::string& run_dir, const AnalyzeOptions& o) {
  check_options(o);
  RunFolder::check_is_run(run_dir);  // before the lock, which would leave its file in any folder
  const RunFolderLock lock(run_dir, "attnlab analyze");  // one writer: not while the run trains or another analysis runs
  const LoadedRun run = load_run(run_dir, o.checkpoint);  // clears what an earlier, killed analysis left
  const std::optional<std::size_t> last_step = checkpoint_step(run_dir + "/last.ckpt");
  check_same_model(run_dir, o, run, last_step);
  Experiment x(run.config);
  AnalysisResult result;
  result.checkpoint = run.checkpoint_file, result.step = run.state.step, result.run_step = last_step;
  check_applicable(o, *x.model, *x.data, run_dir, result);
  for (const AnalysisPartInfo* part : analysis_parts_in_order())
    if (wanted(o, part->name)) part->check_run(options_of(o, part->name), run.config);
  load_run_model(*x.model, run, x.data.get());
  const TrainConfig& t = run.config.train;
  AnalysisInputs in{*x.model, *x.data, held_out_examples(*x.data, o.examples, t.batch_size, run.config.seed + 2)};
  check_finite_outputs(in, run_dir + "/" + run.checkpoint_file + " (step " + std::to_string(run.state.step) + ")");
  const std::string dir = run_dir + "/analysis", fresh = temporary_path(dir);
  fs::remove_all(fresh);
  create_folders(fresh, "the analysis folder");
  // Ctrl-C or SIGTERM stops it after the part under way; the earlier analysis stays as it was.
  const StopSignals stop;
  std::vector<const AnalysisPartInfo*> parts;
  for (const AnalysisPartInfo* part : analysis_parts_in_order())
    if (wanted(o, part->name) && part->needs(*x.model, *x.data).empty()) parts.push_back(part);
  std::string names;
  for (const AnalysisPartInfo* part : parts) names += (names.empty() ? "" : ", ") + part->name;
  std::printf("attnlab analyze: %s, %zu held-out examples; %zu part%s: %s\n", run_dir.c_str(), example_count(in.batches), parts.size(),
              parts.size() == 1 ? "" : "s", names.c_str());
  try {
    for (std::size_t i = 0; i < parts.size(); ++i) {
      const AnalysisPartInfo* part = parts[i];
      test_stop_point("part:" + part->name);
      if (stop.requested()) {
        throw StoppedBySignal("attnlab analyze: stopped by " + std::string(stop.name()) + " before " + part->name + "; " + dir + " is as it was",
                              stop.signal());
      }
      run_part(*part, {in, run, fresh, result}, options_of(o, part->name), i + 1, parts.size());
    }
    if (stop.requested()) throw StoppedBySignal("attnlab analyze: stopped by " + std::string(stop.name()) + "; " + dir + " is as it was", stop.signal());
    result.facts["examples"] = static_cast<double>(example_count(in.batches));
    keep_other_parts(run_dir, fresh, o, result);
    write_analysis(fresh, result);
    replace_folder(fresh, dir);
  } catch (...) {
    fs::remove_all(fresh);  // the earlier analysis, if any, stays whole
    throw;
  }
  try {
    write_run_report(run_dir);
    result.report_written = true;
  } catch (const std::exception& e) {  // the analysis is in place: a report that cannot be written is not its failure
    std::fprintf(stderr, "attnlab: warning: report.html not written: %s\n", e.what());
  }
  return result;
}

}  // namespace attnlab
