#include "experiments/runner/experiment.hpp"

#include "framework/io/npy.hpp"

namespace attnlab {

Experiment::Experiment(ExperimentConfig c) : config(std::move(c)) {
  data = data::make_data_source(config.task, task_format(config));  // data first: a bad file fails before anything is written
  Generator init(config.seed);
  model = make_model(config.model, data->shape(), init);
}

std::unique_ptr<Optimizer> make_optimizer(const OptimizerChoice& o, Module& model) {
  return OptimizerRegistry::instance().find(o.name).build(model.named_parameters(), o.options);
}

LrSchedule make_schedule(const TrainConfig& t) {
  ScheduleOptions s = t.schedule;
  s.lr = t.optimizer.lr();
  return LrSchedule(s);
}

}  // namespace attnlab
