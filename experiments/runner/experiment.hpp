// What a config builds, in the order that writes nothing until everything is known to work: the data
// source (files read and checked first), the model (one factory from model.kind, its starting weights),
// the optimizer and the learning-rate schedule. Shared by train, eval, sample and export.
#pragma once

#include <memory>

#include "datasets/source.hpp"
#include "experiments/runner/config.hpp"
#include "framework/optim/optimizer.hpp"
#include "framework/optim/schedule.hpp"

namespace attnlab {

struct Experiment {
  // Builds the data and the model from `config` (the model's initial weights from config.seed).
  explicit Experiment(ExperimentConfig config);
  ExperimentConfig config;
  std::unique_ptr<data::DataSource> data;
  std::shared_ptr<Model> model;
};

// A new model's starting weights from model.init_from's folder (an `attnlab export`), when the config names
// one: train's new runs and Python's Model.from_config. Errors name the key and keep their kind (a folder
// that is not there is FileMissing, a mis-shaped weight invalid_argument).
void load_init_from(Experiment& x);

// The optimizer a config names, over the model's parameters.
std::unique_ptr<Optimizer> make_optimizer(const OptimizerChoice& config, Module& model);
// The schedule: its options with the optimizer's lr as the peak.
LrSchedule make_schedule(const TrainConfig& config);

}  // namespace attnlab
