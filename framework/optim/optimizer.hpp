// Optimizers over a model's named parameters, with torch.optim's update formulas: SGD (momentum,
// dampening, Nesterov, L2 weight decay), Adam (L2 weight decay, bias correction) and AdamW (decoupled
// weight decay, by default on weight matrices only); their state for checkpoints; and global
// gradient-norm clipping (torch.nn.utils.clip_grad_norm_).
//
// An optimizer is an extension point like an attention kernel (attention/kernel.hpp): its class states its
// name, description and Options (with their schema) once, and one line registers it; a config names it by
// train.optimizer.name, and its options are the keys beside the name.
//
//   AdamWOptions options;
//   options.lr = 3e-4;
//   AdamW optimizer(model.named_parameters(), options);
//   for (std::size_t it = 0; it < steps; ++it) {
//     optimizer.zero_grad();
//     loss(model, batch).backward();
//     clip_grad_norm(model.parameters(), 1.0);
//     optimizer.set_lr(schedule.lr_at(it));
//     optimizer.step();
//   }
//
// Updates write the parameters' storage in place through raw pointers (no graph is recorded), with the
// optimizer state in each parameter's dtype (float32 or float64).
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "framework/io/component.hpp"
#include "framework/nn/module.hpp"
#include "framework/tensor/tensor.hpp"

namespace attnlab {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update of every parameter that has a gradient; parameters whose grad is undefined are skipped
  // (their state and per-parameter step count stay as they were), as in PyTorch.
  void step();
  // Drops the gradients of this optimizer's parameters (the next backward starts from zero).
  void zero_grad();

  double lr() const { return lr_; }
  // Schedules call this before step(); any finite lr >= 0 (a schedule may decay to 0).
  void set_lr(double lr);
  // How many times step() has run.
  std::size_t step_count() const { return step_count_; }
  const char* name() const { return name_; }
  // The parameters in the order given; a tensor listed under two names (tied weights) is kept once,
  // under its first name.
  const std::vector<NamedParameter>& parameters() const { return params_; }
  // Names of the per-parameter state buffers: {"momentum_buffer"} for SGD with momentum, {} without,
  // {"exp_avg", "exp_avg_sq"} for Adam and AdamW.
  const std::vector<std::string>& slot_names() const { return slot_names_; }

  // A snapshot (copies) of the state for checkpoints:
  //   "step"               int64 scalar, step_count()
  //   "<param>.step"       int64 scalar, the updates this parameter received (Adam's bias correction)
  //   "<param>.<slot>"     the parameter's shape and dtype, one per slot name
  std::map<std::string, Tensor> state_dict() const;
  // Copies a state_dict() in (buffers converted to each parameter's dtype). Missing, unexpected or
  // mis-shaped entries are an error naming every such entry; nothing changes unless all entries match.
  // The learning rate is not part of the state: schedules set it from the step count.
  void load_state_dict(const std::map<std::string, Tensor>& state);

 protected:
  // Checks lr and the parameters (defined, floating, leaves, unique names) and allocates zeroed state.
  Optimizer(const char* name, std::vector<NamedParameter> params, double lr, std::vector<std::string> slot_names);

  // Applies one update to parameter `index`, whose grad is defined. updates(index) already counts this
  // step (1 on the parameter's first update).
  virtual void update(std::size_t index) = 0;
  // Whether update(i) reads nothing that another update writes and writes only parameter i and its
  // slots, so that step() may run the updates of different parameters at once on attnlab's threads.
  // False unless an optimizer says so (SGD, Adam and AdamW do).
  virtual bool independent_updates() const { return false; }

  Tensor& slot(std::size_t index, std::size_t slot_index) { return state_[index].slots[slot_index]; }
  std::size_t updates(std::size_t index) const { return state_[index].updates; }

 private:
  struct ParamState {
    std::size_t updates = 0;
    std::vector<Tensor> slots;  // one per slot name, the parameter's shape and dtype
  };
  // Follows a parameter converted to another dtype after the optimizer was built (Module::to).
  void match_param_dtype(std::size_t index);
  // update(i) for each of `due`, on several threads when the updates are independent.
  void update_all(const std::vector<std::size_t>& due);

  const char* name_;
  std::vector<NamedParameter> params_;
  std::vector<std::string> slot_names_;
  std::vector<ParamState> state_;
  double lr_;
  std::size_t step_count_ = 0;
};

// torch.optim.SGD: g = grad + weight_decay * p; with momentum, buf = g on a parameter's first update and
// buf = momentum * buf + (1 - dampening) * g after, then g = g + momentum * buf (nesterov) or g = buf;
// p -= lr * g.
struct SGDOptions {
  double lr = 1e-3;
  double momentum = 0.0;      // >= 0
  double dampening = 0.0;     // in [0, 1]
  bool nesterov = false;      // needs momentum > 0 and dampening 0
  double weight_decay = 0.0;  // >= 0, L2 added to the gradient
};

class SGD : public Optimizer {
 public:
  static constexpr const char* kName = "sgd";
  static constexpr const char* kDescription = "torch.optim.SGD: momentum, dampening, Nesterov momentum, L2 weight decay on every parameter";
  using Options = SGDOptions;
  static Schema<Options> options_schema();
  static void check(const Options& options, const ConfigNode& node);  // nesterov's needs, at its key
  SGD(std::vector<NamedParameter> params, const SGDOptions& options = {});
  const SGDOptions& options() const { return options_; }

 private:
  void update(std::size_t index) override;
  bool independent_updates() const override { return true; }
  SGDOptions options_;
};

// torch.optim.Adam: g = grad + weight_decay * p; m = beta1 m + (1 - beta1) g; v = beta2 v + (1 - beta2) g^2;
// p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps), t the parameter's update count.
struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;         // in [0, 1)
  double beta2 = 0.999;       // in [0, 1)
  double eps = 1e-8;          // > 0
  double weight_decay = 0.0;  // >= 0, L2 added to the gradient
};

class Adam : public Optimizer {
 public:
  static constexpr const char* kName = "adam";
  static constexpr const char* kDescription = "torch.optim.Adam: bias-corrected moments, L2 weight decay on every parameter";
  using Options = AdamOptions;
  static Schema<Options> options_schema();
  Adam(std::vector<NamedParameter> params, const AdamOptions& options = {});
  const AdamOptions& options() const { return options_; }

 private:
  void update(std::size_t index) override;
  bool independent_updates() const override { return true; }
  AdamOptions options_;
};

// torch.optim.AdamW: p -= lr * weight_decay * p on the decayed parameters, then Adam's update without
// L2. By default only weight matrices decay; add ParamKind::embedding, norm or bias to decay_kinds to
// decay those too.
struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;          // in [0, 1)
  double beta2 = 0.999;        // in [0, 1)
  double eps = 1e-8;           // > 0
  double weight_decay = 1e-2;  // >= 0
  std::set<ParamKind> decay_kinds = {ParamKind::weight};
};

class AdamW : public Optimizer {
 public:
  static constexpr const char* kName = "adamw";
  static constexpr const char* kDescription = "torch.optim.AdamW: Adam with decoupled weight decay on the parameter kinds in decay_kinds";
  using Options = AdamWOptions;
  static Schema<Options> options_schema();
  AdamW(std::vector<NamedParameter> params, const AdamWOptions& options = {});
  const AdamWOptions& options() const { return options_; }
  // Names of the parameters that weight decay applies to (their kind is in decay_kinds), in order.
  std::vector<std::string> decayed_names() const;
  bool decays(std::size_t index) const { return decayed_[index]; }

 private:
  void update(std::size_t index) override;
  bool independent_updates() const override { return true; }
  AdamWOptions options_;
  std::vector<bool> decayed_;
};

// An optimizer as the registry knows it, built from its class's declarations by optimizer_info<O>().
struct OptimizerInfo {
  std::string name;
  std::string description;
  OptionsSpec options;
  std::function<double(const ComponentOptions&)> lr;  // its peak learning rate (a schedule starts from it)
  std::function<std::unique_ptr<Optimizer>(std::vector<NamedParameter>, const ComponentOptions&)> build;
};

// name -> OptimizerInfo ("optimizer 'x' is not among [...]").
using OptimizerRegistry = Registry<OptimizerInfo>;
template <>
OptimizerRegistry& OptimizerRegistry::instance();

template <class O>
OptimizerInfo optimizer_info() {
  OptimizerInfo info;
  info.name = O::kName;
  info.description = O::kDescription;
  info.options = options_spec<O>();
  info.lr = [](const ComponentOptions& options) { return read_options<O>(options).lr; };
  info.build = [](std::vector<NamedParameter> params, const ComponentOptions& options) {
    return std::unique_ptr<Optimizer>(std::make_unique<O>(std::move(params), read_options<O>(options)));
  };
  return info;
}

// Global L2 norm of the gradients of `params` (accumulated in double; parameters without a grad and
// repeated tensors count once or not at all). When it exceeds max_norm, every gradient is scaled in
// place by max_norm / (norm + 1e-6). Returns the norm before clipping. A non-finite norm (inf or NaN
// in some gradient) is returned without scaling anything, so the caller can detect it and skip the
// step; torch would scale the gradients to NaN. max_norm must be > 0 (infinity only measures).
double clip_grad_norm(const std::vector<Tensor>& params, double max_norm);

}  // namespace attnlab

#define ATTNLAB_OPTIMIZER_CONCAT_(a, b) a##b
#define ATTNLAB_OPTIMIZER_CONCAT(a, b) ATTNLAB_OPTIMIZER_CONCAT_(a, b)
// One line below an optimizer's definition registers it under its kName.
#define ATTNLAB_REGISTER_OPTIMIZER(Optimizer)                                          \
  static const bool ATTNLAB_OPTIMIZER_CONCAT(attnlab_optimizer_registered_, Optimizer) = \
      ::attnlab::OptimizerRegistry::instance().add(::attnlab::optimizer_info<Optimizer>())
