#include "experiments/runner/experiment.hpp"

#include <stdexcept>

#include "framework/io/atomic_file.hpp"
#include "framework/io/npy.hpp"

namespace attnlab {

Experiment::Experiment(ExperimentConfig c) : config(std::move(c)) {
  data = data::make_data_source(config.task, task_format(config));  // data first: a bad file fails before anything is written
  Generator init(config.seed);
  model = make_model(config.model, data->shape(), init);
}

void load_init_from(Experiment& x) {
  const std::string& from = x.config.model.init_from;
  if (from.empty()) return;
  const std::string where = "model.init_from " + from + ": ";
  try {
    x.model->load_weights(import_npy_folder(from));
  } catch (const FileMissing& e) {
    throw FileMissing(where + e.what());
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(where + e.what());
  } catch (const std::exception& e) {
    throw std::runtime_error(where + e.what());
  }
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
