// The parts of the `attnlab` Python module (module.cpp puts them together): models with their data
// (models.cpp) and run folders, training, comparisons and analyses (runs.cpp).
#pragma once

#include <pybind11/pybind11.h>

#include <memory>
#include <stdexcept>
#include <string>

#include "datasets/source.hpp"
#include "experiments/runner/config.hpp"
#include "framework/io/atomic_file.hpp"
#include "framework/models/model.hpp"

namespace attnlab::python {

namespace py = pybind11;

// A model as a notebook holds it: the config it was built from, its data and the model.
struct ModelHandle {
  ExperimentConfig config;
  std::shared_ptr<data::DataSource> data;
  std::shared_ptr<Model> model;
};

// A config from a YAML file's path or a dict, with key=value overrides, checked as `attnlab train` checks it.
ExperimentConfig config_from(const py::object& config, const std::vector<std::string>& overrides);
// The model and data of a config (initial weights from its seed), or of a run with its checkpoint's weights.
ModelHandle model_from_config(const ExperimentConfig& config);
// `threads` as a call `who` got it, in [0, kMaxThreads] (0: every core this process may use), or a
// ValueError naming the call.
int checked_threads(int threads, const std::string& who);
// A count or size argument `name` of the call `who` (taken as a signed integer, so that a negative one is
// a ValueError naming it, not pybind's signature dump).
std::size_t checked_count(std::int64_t value, const std::string& who, const std::string& name);
// A number of examples (`name`: an analysis's `examples`, held_out's `size`), in [1, kMaxExamples] as
// analyze's --examples.
std::size_t checked_examples(std::int64_t value, const std::string& who, const std::string& name = "examples");
ModelHandle model_from_run(const std::string& run_dir, const std::string& checkpoint);

void bind_models(py::module_& m);
void bind_runs(py::module_& m);

}  // namespace attnlab::python
