#include "experiments/runner/experiment.hpp"

#include "framework/io/npy.hpp"

namespace attnlab {

Experiment::Experiment(ExperimentConfig c) : config(std::move(c)) {
  data = data::make_data_source(config.task, task_format(config));  // data first: a bad file fails before anything is written
  Generator init(config.seed);
  model = make_model(config.model, data->shape(), init);
}

std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& o, Module& model) {
  if (o.name == "sgd") {
    SGDOptions s;
    s.lr = o.lr;
    s.momentum = o.momentum;
    s.weight_decay = o.weight_decay;
    return std::make_unique<SGD>(model.named_parameters(), s);
  }
  if (o.name == "adam") {
    AdamOptions a;
    a.lr = o.lr, a.beta1 = o.beta1, a.beta2 = o.beta2, a.eps = o.eps, a.weight_decay = o.weight_decay;
    return std::make_unique<Adam>(model.named_parameters(), a);
  }
  AdamWOptions a;
  a.lr = o.lr, a.beta1 = o.beta1, a.beta2 = o.beta2, a.eps = o.eps, a.weight_decay = o.weight_decay;
  a.decay_kinds = o.decay_kinds;
  return std::make_unique<AdamW>(model.named_parameters(), a);
}

LrSchedule make_schedule(const TrainConfig& t) {
  ScheduleOptions s = t.schedule;
  s.lr = t.optimizer.lr;
  return LrSchedule(s);
}

}  // namespace attnlab
