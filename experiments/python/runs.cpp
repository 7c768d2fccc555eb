// attnlab.Run, attnlab.train and the analyses: a run folder's config, metrics, patterns and analysis as
// Python values; training from a config as `attnlab train` trains (the same function, the same bits); and
// every registered analysis part, on a run (writing analysis/ as `attnlab analyze` does) or on a model in
// memory.
#include <pybind11/stl.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include "experiments/analysis/part.hpp"
#include "experiments/python/arrays.hpp"
#include "experiments/python/bindings.hpp"
#include "experiments/runner/compare.hpp"
#include "experiments/runner/metrics_log.hpp"
#include "experiments/runner/run_folder.hpp"
#include "experiments/runner/train.hpp"
#include "framework/io/npy.hpp"
#include "framework/ops/parallel.hpp"

namespace attnlab::python {
namespace {

namespace fs = std::filesystem;

std::string run_folder(const std::string& dir) {
  if (!fs::is_directory(dir)) throw FileMissing(dir + " is not a folder; give a run folder (log.dir/name)");
  if (!fs::exists(dir + "/metrics.jsonl") && !fs::exists(dir + "/last.ckpt")) {
    throw FileMissing(dir + " is not a run folder: it has neither metrics.jsonl nor last.ckpt");
  }
  return dir;
}

std::string file_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw FileMissing(path + " does not exist");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The metrics as columns: step and split, then each number (NaN where a row has none).
py::dict metric_columns(const RunRecord& run) {
  py::dict d;
  std::vector<double> steps;
  std::vector<std::string> splits;
  for (const MetricRow& row : run.rows) steps.push_back(static_cast<double>(row.step)), splits.push_back(row.split);
  d["step"] = py::array(py::cast(steps));
  d["split"] = splits;
  for (const auto& [name, member] : MetricRow::columns()) {
    std::vector<double> values;
    for (const MetricRow& row : run.rows) values.push_back(row.*member);
    d[name] = py::array(py::cast(values));
  }
  return d;
}

py::dict analysis_dict(const AnalysisResult& r) {
  py::dict tables, out;
  for (const AnalysisTable& t : r.tables) {
    py::dict table;
    table["values"] = to_numpy(from_vector(t.values, {t.rows.size(), t.cols.size()}, DType::float64));
    table["rows"] = t.rows, table["cols"] = t.cols, table["row_axis"] = t.row_axis, table["col_axis"] = t.col_axis;
    table["title"] = t.title, table["section"] = t.section;
    table["examples"] = t.examples ? py::object(py::int_(*t.examples)) : py::object(py::none());
    if (!t.low.empty()) {  // the 95% bootstrap interval of each value
      table["low"] = to_numpy(from_vector(t.low, {t.rows.size(), t.cols.size()}, DType::float64));
      table["high"] = to_numpy(from_vector(t.high, {t.rows.size(), t.cols.size()}, DType::float64));
    }
    tables[py::str(t.name)] = table;
  }
  out["tables"] = tables, out["facts"] = r.facts, out["notes"] = r.notes;
  // What it was made of: the checkpoint and its step, and how far the run had trained (None in memory).
  const auto maybe = [](const std::optional<std::size_t>& s) { return s ? py::object(py::int_(*s)) : py::object(py::none()); };
  out["checkpoint"] = r.checkpoint.empty() ? py::object(py::none()) : py::object(py::str(r.checkpoint));
  out["step"] = maybe(r.step), out["run_step"] = maybe(r.run_step);
  return out;
}

// A part's options from Python keyword values, read through the part's schema (a ValueError names the key).
ComponentOptions part_options(const std::string& part, const py::dict& options) {
  ComponentOptions o(to_yaml(options, part), part);
  AnalysisRegistry::instance().find(part).options.check(o);
  return o;
}

// The stop a signal asked for, as Python's: KeyboardInterrupt for Ctrl-C, else a RuntimeError saying which.
void raise_if_stopped(const TrainResult& r) {
  if (!r.stop_signal) return;
  const std::string what = "training stopped by signal " + std::to_string(r.stop_signal) + " with " + r.run_dir +
                           "/last.ckpt written; attnlab.resume('" + r.run_dir + "') continues it";
  if (r.stop_signal == SIGINT) {
    PyErr_SetString(PyExc_KeyboardInterrupt, what.c_str());
    throw py::error_already_set();
  }
  throw std::runtime_error(what);
}

void bind_run_class(py::module_& m) {
  struct Run {
    std::string dir;
  };
  py::class_<Run>(m, "Run", "a run folder (log.dir/name): its config, metrics, patterns, analysis and checkpoints")
      .def(py::init([](const std::string& dir) { return Run{run_folder(dir)}; }), py::arg("dir"))
      .def_property_readonly("dir", [](const Run& r) { return r.dir; })
      .def_property_readonly("config", [](const Run& r) { return to_python(YAML::Load(run_config_text(r.dir))); },
                             "the resolved config (config.yaml, or the checkpoint's copy when it is missing or empty, as the command "
                             "line reads it) as a dict")
      .def_property_readonly("metrics", [](const Run& r) { return metric_columns(read_run(r.dir)); },
                             "metrics.jsonl as columns: step, split ('train', 'eval', 'final'), loss, token_accuracy, ...")
      .def_property_readonly("summary", [](const Run& r) { return py::module_::import("json").attr("loads")(file_text(r.dir + "/summary.json")); },
                             "summary.json as a dict (a finished run's figures)")
      .def("model", [](const Run& r, const std::string& checkpoint) { return model_from_run(r.dir, checkpoint); }, py::arg("checkpoint") = "best",
           "the model with the weights of best.ckpt or last.ckpt")
      .def_property_readonly("pattern_steps", [](const Run& r) {
             std::vector<std::size_t> steps;
             for (const PatternCapture& c : read_run(r.dir).captures) steps.push_back(c.step);
             return steps;
           },
           "the steps at which patterns were captured")
      .def("patterns", [](const Run& r, std::int64_t step_arg, std::int64_t probe_arg, const std::string& part) {
             const std::size_t step = checked_count(step_arg, "patterns", "step"), probe = checked_count(probe_arg, "patterns", "probe");
             const std::string file = r.dir + "/patterns/step_" + std::to_string(step) + "_probe_" + std::to_string(probe) +
                                      (part.empty() ? "" : "_" + part) + ".npy";
             if (!fs::exists(file)) throw FileMissing(file + " does not exist (pattern_steps lists the captured steps)");
             return to_numpy(read_npy(file));
           },
           py::arg("step"), py::arg("probe") = 0, py::arg("part") = "", "a captured pattern [layers, heads, T, T] (part: encoder, decoder, cross)")
      .def_property_readonly("analysis",
                             [](const Run& r) {
                               const AnalysisResult a = read_analysis(r.dir);
                               py::dict out = analysis_dict(a);
                               out["out_of_date"] = analysis_out_of_date(r.dir, a);  // as the report says it; "" when current
                               return out;
                             },
                             "analysis/summary.json: {tables: {name: {values, rows, cols, ...}}, facts, notes, checkpoint, step, "
                             "run_step, out_of_date (why the run has moved on since, as the report says; '' when current)}");
}

void bind_training(py::module_& m) {
  m.def("train",
        [](const py::object& config, const std::vector<std::string>& overrides, int threads) {
          const ExperimentConfig c = config_from(config, overrides);
          const int n = default_threads(checked_threads(threads, "train"), 1);
          TrainResult r;
          {
            py::gil_scoped_release free;  // progress lines as the command line prints them; Ctrl-C stops after the step
            r = train_experiment(c, n);
          }
          raise_if_stopped(r);
          return r.run_dir;
        },
        py::arg("config"), py::arg("overrides") = std::vector<std::string>{}, py::arg("threads") = 0,
        "trains the run a config (YAML path or dict) with key=value overrides describes, as `attnlab train` does; returns its folder");
  m.def("resume",
        [](const std::string& dir, const std::vector<std::string>& overrides, int threads) {
          const int n = default_threads(checked_threads(threads, "resume"), 1);
          TrainResult r;
          {
            py::gil_scoped_release free;
            r = resume_experiment(run_folder(dir), overrides, n);
          }
          raise_if_stopped(r);
          return r.run_dir;
        },
        py::arg("run"), py::arg("overrides") = std::vector<std::string>{}, py::arg("threads") = 0,
        "continues a run from its last.ckpt (train.steps=N to extend it), as `attnlab train --resume` does");
}

void bind_comparisons(py::module_& m) {
  // The runs of a comparison are processes of the attnlab program this module was built with.
  set_run_program(ATTNLAB_PROGRAM);
  m.def("compare",
        [](const std::string& config, const std::vector<std::string>& overrides, int jobs, int threads) {
          if (!fs::is_regular_file(config)) throw FileMissing(config + " is not a comparison file");
          if (!fs::exists(ATTNLAB_PROGRAM)) throw FileMissing(std::string(ATTNLAB_PROGRAM) + ", the program a comparison's runs are, is not there: build it");
          CompareOptions o;
          if (jobs < 1) throw py::value_error("compare: jobs must be 1 or more; got " + std::to_string(jobs));
          o.overrides = overrides, o.jobs = jobs, o.threads = checked_threads(threads, "compare");
          int status = 0;
          {
            py::gil_scoped_release free;
            status = run_comparison(config, o);
          }
          if (status == 130) {
            PyErr_SetString(PyExc_KeyboardInterrupt, "comparison stopped; finished runs are kept and the same call resumes it");
            throw py::error_already_set();
          }
          return status;
        },
        py::arg("config"), py::arg("overrides") = std::vector<std::string>{}, py::arg("jobs") = 1, py::arg("threads") = 0,
        "runs a comparison file as `attnlab compare` does (every variant x seed, summary and report); 0 when every run finished, 1 when some failed");
}

void bind_analyses(py::module_& m) {
  m.def("analysis_parts", [] {
    std::vector<std::string> names;
    for (const AnalysisPartInfo* part : analysis_parts_in_order()) names.push_back(part->name);
    return names;
  });
  m.def("analyze",
        [](const std::string& dir, const std::vector<std::string>& only, std::int64_t examples_arg, const std::string& checkpoint,
           const py::dict& options) {
          AnalyzeOptions o;
          o.only = only, o.examples = checked_examples(examples_arg, "analyze"), o.checkpoint = checkpoint;
          for (const auto& [part, values] : options) o.part_options[py::str(part)] = part_options(py::str(part), py::reinterpret_borrow<py::dict>(values));
          AnalysisResult r;
          {
            py::gil_scoped_release free;
            r = analyze_run(run_folder(dir), o);
          }
          return analysis_dict(r);
        },
        py::arg("run"), py::arg("only") = std::vector<std::string>{}, py::arg("examples") = 512, py::arg("checkpoint") = "best",
        py::arg("options") = py::dict(), "runs `attnlab analyze` on a run (writing analysis/ and the report); options: {part: {key: value}}");
  m.def("run_analysis",
        [](ModelHandle& h, const std::string& part, std::int64_t examples_arg, const py::kwargs& options) {
          const std::size_t examples = checked_examples(examples_arg, "run_analysis");
          const AnalysisPartInfo& info = AnalysisRegistry::instance().find(part);
          const std::string needs = info.needs(*h.model, *h.data);
          if (!needs.empty()) throw std::invalid_argument(part + " needs " + needs);
          const ComponentOptions o = part_options(part, options);
          LoadedRun run;
          run.config = h.config;  // a model in memory has no folder: emergence says so
          AnalysisInputs in{*h.model, *h.data, held_out_examples(*h.data, examples, h.config.train.batch_size, h.config.seed + 2)};
          check_finite_outputs(in, "the model");
          AnalysisResult result;
          // A folder of this call's own for what the part writes, gone after it (a fixed one under /tmp was
          // shared by every process, and kept).
          std::string folder = (fs::temp_directory_path() / "attnlab-analysis.XXXXXX").string();
          if (!::mkdtemp(folder.data())) throw std::runtime_error("run_analysis: cannot make a temporary folder " + folder);
          struct Remove {
            std::string dir;
            ~Remove() {
              std::error_code ignored;
              fs::remove_all(dir, ignored);
            }
          } remove{folder};
          info.run({in, run, folder, result}, o);
          return analysis_dict(result);
        },
        py::arg("model"), py::arg("part"), py::arg("examples") = 512,
        "one analysis part (attnlab.analysis_parts()) on a model in memory, its options as keywords: {tables, facts, notes}");
}

}  // namespace

void bind_runs(py::module_& m) {
  bind_run_class(m);
  bind_training(m);
  bind_comparisons(m);
  bind_analyses(m);
}

}  // namespace attnlab::python
