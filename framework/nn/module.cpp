#include "framework/nn/module.hpp"

#include <algorithm>
#include <cstring>
#include <set>
#include <stdexcept>

namespace attnlab {

const EnumNames<ParamKind>& param_kind_names() {
  static const EnumNames<ParamKind> names{
      {"weight", ParamKind::weight}, {"embedding", ParamKind::embedding}, {"bias", ParamKind::bias}, {"norm", ParamKind::norm}};
  return names;
}

const char* param_kind_name(ParamKind kind) { return enum_name(param_kind_names(), kind); }

ParamKind parse_param_kind(const std::string& name) { return parse_enum(param_kind_names(), name, "parameter kind"); }

void Module::check_new_name(const std::string& name) const {
  if (name.empty() || name.find('.') != std::string::npos) {
    throw std::invalid_argument("Module: invalid name '" + name + "' (must be non-empty, without '.')");
  }
  bool taken = false;
  for (const auto& p : parameters_) taken |= p.name == name;
  for (const auto& b : buffers_) taken |= b.first == name;
  for (const auto& c : children_) taken |= c.first == name;
  for (const auto& g : generators_) taken |= g.first == name;
  if (taken) throw std::invalid_argument("Module: the name '" + name + "' is registered twice");
}

Tensor Module::register_parameter(const std::string& name, Tensor tensor, ParamKind kind) {
  check_new_name(name);
  if (!tensor.defined()) throw std::invalid_argument("Module: parameter '" + name + "' is undefined");
  tensor.set_requires_grad(true);
  parameters_.push_back({name, tensor, kind});
  return tensor;
}

Tensor Module::register_buffer(const std::string& name, Tensor tensor) {
  check_new_name(name);
  if (!tensor.defined()) throw std::invalid_argument("Module: buffer '" + name + "' is undefined");
  buffers_.emplace_back(name, tensor);
  return tensor;
}

void Module::register_generator(const std::string& name, Generator* generator) {
  check_new_name(name);
  if (!generator) throw std::invalid_argument("Module: generator '" + name + "' is null");
  generators_.emplace_back(name, generator);
}

void Module::collect_generators(const std::string& prefix, std::vector<std::pair<std::string, Generator*>>& out) const {
  for (const auto& [name, g] : generators_) out.emplace_back(prefix + name, g);
  for (const auto& [name, child] : children_) child->collect_generators(prefix + name + ".", out);
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> module) {
  check_new_name(name);
  if (!module) throw std::invalid_argument("Module: child '" + name + "' is null");
  module->train(training_);
  children_.emplace_back(name, std::move(module));
}

void Module::collect_parameters(const std::string& prefix, std::vector<NamedParameter>& out) const {
  for (const auto& p : parameters_) out.push_back({prefix + p.name, p.tensor, p.kind});
  for (const auto& [name, child] : children_) child->collect_parameters(prefix + name + ".", out);
}

void Module::collect_buffers(const std::string& prefix, std::vector<std::pair<std::string, Tensor>>& out) const {
  for (const auto& [name, tensor] : buffers_) out.emplace_back(prefix + name, tensor);
  for (const auto& [name, child] : children_) child->collect_buffers(prefix + name + ".", out);
}

std::vector<NamedParameter> Module::named_parameters() const {
  std::vector<NamedParameter> all;
  collect_parameters("", all);
  // A tensor registered twice (tied weights) is listed once, under its first name, as in PyTorch.
  std::vector<NamedParameter> out;
  for (auto& p : all) {
    const bool seen = std::any_of(out.begin(), out.end(), [&](const NamedParameter& q) { return q.tensor.same(p.tensor); });
    if (!seen) out.push_back(std::move(p));
  }
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& p : named_parameters()) out.push_back(p.tensor);
  return out;
}

std::size_t Module::parameter_count() const {
  std::size_t n = 0;
  for (const auto& p : named_parameters()) n += p.tensor.numel();
  return n;
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers() const {
  std::vector<std::pair<std::string, Tensor>> out;
  collect_buffers("", out);
  return out;
}

void Module::zero_grad() {
  for (auto& p : named_parameters()) p.tensor.zero_grad();
}

void Module::train(bool training) {
  training_ = training;
  for (auto& [name, child] : children_) child->train(training);
}

bool Module::any_training() const {
  if (training_) return true;
  for (const auto& [name, child] : children_)
    if (child->any_training()) return true;
  return false;
}

std::map<std::string, Tensor> Module::state_dict() const {
  std::map<std::string, Tensor> out;
  for (const auto& p : named_parameters()) out.emplace(p.name, p.tensor.detach());
  for (const auto& [name, tensor] : named_buffers()) out.emplace(name, tensor.detach());
  std::vector<std::pair<std::string, Generator*>> generators;
  collect_generators("", generators);
  for (const auto& [name, g] : generators) {
    const std::vector<std::int64_t> state = g->state();
    out.emplace(name, from_indices(state, {state.size()}));
  }
  return out;
}

void Module::load_state_dict(const std::map<std::string, Tensor>& state) { load(state, LoadMode::state); }

void Module::load_weights(const std::map<std::string, Tensor>& weights) { load(weights, LoadMode::weights); }

void Module::load(const std::map<std::string, Tensor>& state, LoadMode mode) {
  const bool everything = mode == LoadMode::state;
  const char* source = everything ? "the state" : "the weights";
  std::map<std::string, Tensor> own;  // what will be copied, by name
  std::set<std::string> optional;     // buffers, when loading weights
  for (const auto& p : named_parameters()) own.emplace(p.name, p.tensor);
  for (const auto& [name, tensor] : named_buffers()) {
    own.emplace(name, tensor);
    if (!everything) optional.insert(name);
  }
  std::vector<std::pair<std::string, Generator*>> generators;
  collect_generators("", generators);
  if (everything) {
    for (const auto& [name, g] : generators) own.emplace(name, zeros({7}, DType::int64));
  }
  std::string problems;
  for (auto it = own.begin(); it != own.end();) {
    const auto& [name, tensor] = *it;
    auto given = state.find(name);
    if (given == state.end() && optional.count(name)) {
      it = own.erase(it);  // a buffer the weights do not carry keeps its value
      continue;
    }
    if (given == state.end()) {
      problems += "\n  missing: " + name + " " + shape_str(tensor.shape());
    } else if (!given->second.defined()) {
      problems += "\n  undefined: " + name;
    } else if (given->second.shape() != tensor.shape()) {
      problems += "\n  shape mismatch: " + name + " is " + shape_str(tensor.shape()) + " in the model but " +
                  shape_str(given->second.shape()) + " in " + source;
    }
    ++it;
  }
  for (const auto& entry : state) {
    const std::string& name = entry.first;
    const Tensor& tensor = entry.second;
    if (own.count(name)) continue;
    const bool generator = std::any_of(generators.begin(), generators.end(), [&](const auto& g) { return g.first == name; });
    problems += "\n  unexpected: " + name + (tensor.defined() ? " " + shape_str(tensor.shape()) : "") +
                (everything  ? " (the model has no parameter, buffer or generator of that name)"
                 : generator ? " (a generator state; weights carry parameters and buffers only)"
                             : " (the model has no parameter or buffer of that name)");
  }
  if (!problems.empty()) {
    throw std::invalid_argument(everything ? "load_state_dict: the state does not match the model:" + problems
                                           : "load_weights: the weights do not match the model (were they exported from a model "
                                             "of another config?):" + problems);
  }
  if (!everything) generators.clear();  // weights leave generator states as they are
  for (const auto& [name, g] : generators) {
    const Tensor saved = state.at(name).to(DType::int64);
    const std::int64_t* p = saved.data<std::int64_t>();
    g->set_state(std::vector<std::int64_t>(p, p + saved.numel()));
    own.erase(name);
  }
  for (auto& [name, tensor] : own) {
    const Tensor given = state.at(name).to(tensor.dtype()).clone();  // clone: contiguous, exactly numel elements
    std::memcpy(tensor.storage()->data(), given.storage()->data(), given.numel() * element_size(given.dtype()));
  }
}

void Module::to(DType dtype) {
  for (auto& p : named_parameters()) {
    if (p.tensor.dtype() != dtype) p.tensor.set_data(p.tensor.detach().to(dtype));
  }
  for (auto& [name, tensor] : named_buffers()) {
    if (is_floating(tensor.dtype()) && tensor.dtype() != dtype) tensor.set_data(tensor.detach().to(dtype));
  }
}

}  // namespace attnlab
