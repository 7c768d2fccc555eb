// Module: the base of every layer and model. A module registers its parameters, buffers and child
// modules by name, so every weight has a dotted name ("blocks.0.attn.qkv.weight") used by optimizers
// (weight-decay groups), checkpoints and logs.
//
//   class Block : public Module {
//    public:
//     Block(std::size_t d, Generator& gen) {
//       norm = register_module("norm", std::make_shared<LayerNorm>(d));
//       proj = register_module("proj", std::make_shared<Linear>(d, d, true, gen));
//     }
//     Tensor forward(const Tensor& x) { return x + proj->forward(norm->forward(x)); }
//     std::shared_ptr<LayerNorm> norm;
//     std::shared_ptr<Linear> proj;
//   };
//
// Forward signatures differ between modules, so forward is not virtual here.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "framework/autograd/grad_mode.hpp"
#include "framework/tensor/enum_names.hpp"
#include "framework/tensor/random.hpp"
#include "framework/tensor/tensor.hpp"

namespace attnlab {

// What a parameter is, for optimizers that treat kinds differently (AdamW decays only `weight`s unless
// configured otherwise).
enum class ParamKind {
  weight,     // a weight matrix (Linear, projections)
  bias,       // additive biases
  norm,       // LayerNorm gain and shift
  embedding,  // token and position embeddings, CLS tokens
};
const EnumNames<ParamKind>& param_kind_names();
const char* param_kind_name(ParamKind kind);
// "weight" | "bias" | "norm" | "embedding", else an error listing them.
ParamKind parse_param_kind(const std::string& name);

struct NamedParameter {
  std::string name;
  Tensor tensor;
  ParamKind kind;
};

class Module {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // Parameters of this module and all descendants, in registration order, depth first.
  std::vector<Tensor> parameters() const;
  std::vector<NamedParameter> named_parameters() const;
  std::size_t parameter_count() const;
  // Named buffers (non-trainable state saved with the module, such as sinusoidal tables).
  std::vector<std::pair<std::string, Tensor>> named_buffers() const;
  // Direct children.
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& children() const { return children_; }

  void zero_grad();
  // train(false) is eval(); propagated to every descendant.
  void train(bool training = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  // Whether this module or any module inside it is in train mode.
  bool any_training() const;

  // Parameters, buffers and generator states by dotted name; parameter and buffer tensors share
  // storage with the module's.
  std::map<std::string, Tensor> state_dict() const;
  // Copies values in by name (converting dtype when it differs). Missing, unexpected or mis-shaped
  // entries are an error naming every such entry; nothing is copied unless all entries match.
  void load_state_dict(const std::map<std::string, Tensor>& state);
  // Weights exchanged with other tools (a folder from `attnlab export`, read by import_npy_folder):
  // every parameter is required; buffers (sinusoidal and rotary tables, the performer's random
  // `projection`) are loaded when present and keep their values otherwise; generator states keep
  // theirs. Missing parameters, unknown names and shape mismatches are an error naming every such
  // entry (with both shapes); nothing is copied unless all entries match.
  void load_weights(const std::map<std::string, Tensor>& weights);
  // Converts every parameter and buffer in place (float64 for gradient checks); gradients are dropped.
  void to(DType dtype);

 protected:
  // Registers and returns `tensor` as a parameter (set to require grad).
  Tensor register_parameter(const std::string& name, Tensor tensor, ParamKind kind = ParamKind::weight);
  Tensor register_buffer(const std::string& name, Tensor tensor);
  // A random generator whose state belongs to the module's state (dropout masks, feature redraws), so
  // that a checkpoint restores it: it appears in state_dict() as an int64 tensor "<name>".
  void register_generator(const std::string& name, Generator* generator);
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    add_child(name, module);
    return module;
  }

 private:
  void add_child(const std::string& name, std::shared_ptr<Module> module);
  enum class LoadMode { state, weights };
  void load(const std::map<std::string, Tensor>& state, LoadMode mode);
  void check_new_name(const std::string& name) const;
  void collect_parameters(const std::string& prefix, std::vector<NamedParameter>& out) const;
  void collect_buffers(const std::string& prefix, std::vector<std::pair<std::string, Tensor>>& out) const;
  void collect_generators(const std::string& prefix, std::vector<std::pair<std::string, Generator*>>& out) const;

  std::vector<NamedParameter> parameters_;
  std::vector<std::pair<std::string, Tensor>> buffers_;
  std::vector<std::pair<std::string, Generator*>> generators_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

// Eval mode and no graph while alive (evaluation, decoding, sampling); the module's train/eval mode comes
// back however the scope is left. A module whose every part is in eval mode already is not written to,
// so that several threads may evaluate one model at once (Python's models are kept in eval mode).
class EvalScope {
 public:
  explicit EvalScope(Module& module) : module_(module), training_(module.is_training()), switched_(module.any_training()) {
    if (switched_) module_.eval();
  }
  ~EvalScope() {
    if (switched_) module_.train(training_);
  }
  EvalScope(const EvalScope&) = delete;
  EvalScope& operator=(const EvalScope&) = delete;

 private:
  Module& module_;
  bool training_;
  bool switched_;  // some part was in train mode: eval() now, train(training_) at the end
  NoGradGuard no_grad_;
};

// Numbered children ("0", "1", ...): the blocks of a stack, named as their parameters are ("blocks.0.attn...").
class ModuleList : public Module {
 public:
  void add(std::shared_ptr<Module> module) { register_module(std::to_string(size_++), std::move(module)); }

 private:
  std::size_t size_ = 0;
};

}  // namespace attnlab
