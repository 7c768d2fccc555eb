#include "framework/optim/optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>
#include <sstream>
#include <stdexcept>
#include <utility>

// GCC 12's avx512fintrin.h reads an undefined register in _mm512_sqrt_ps and warns (-Wuninitialized)
// wherever xsimd::sqrt is inlined (seen in sanitizer builds); silenced for the intrinsics' headers only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <xsimd/xsimd.hpp>
#pragma GCC diagnostic pop

#include "framework/ops/parallel.hpp"

namespace attnlab {
namespace {

// 1e-08, -1, 0.999: the shortest form of a number for messages.
std::string number(double value) {
  std::ostringstream os;
  os << value;
  return os.str();
}

void require(bool ok, const char* who, const char* rule, double value) {
  if (!ok) throw std::invalid_argument(std::string(who) + ": " + rule + ", got " + number(value));
}

const SGDOptions& validated(const SGDOptions& o) {
  require(o.momentum >= 0.0 && std::isfinite(o.momentum), "SGD", "momentum must be >= 0", o.momentum);
  require(o.dampening >= 0.0 && o.dampening <= 1.0, "SGD", "dampening must be in [0, 1]", o.dampening);
  require(o.weight_decay >= 0.0 && std::isfinite(o.weight_decay), "SGD", "weight_decay must be >= 0", o.weight_decay);
  if (o.nesterov && (o.momentum <= 0.0 || o.dampening != 0.0)) {
    throw std::invalid_argument("SGD: nesterov needs momentum > 0 and dampening 0, got momentum " + number(o.momentum) +
                                " and dampening " + number(o.dampening) +
                                "; set momentum (e.g. 0.9) and dampening 0, or nesterov false");
  }
  return o;
}

template <class Options>
const Options& validated_adam(const Options& o, const char* who) {
  require(o.beta1 >= 0.0 && o.beta1 < 1.0, who, "beta1 must be in [0, 1)", o.beta1);
  require(o.beta2 >= 0.0 && o.beta2 < 1.0, who, "beta2 must be in [0, 1)", o.beta2);
  require(o.eps > 0.0 && std::isfinite(o.eps), who, "eps must be > 0", o.eps);
  require(o.weight_decay >= 0.0 && std::isfinite(o.weight_decay), who, "weight_decay must be >= 0", o.weight_decay);
  return o;
}

Tensor count_scalar(std::size_t count) { return scalar(static_cast<double>(count), DType::int64); }

// Reads a step count entry; returns why it is not a valid count (empty when it is).
std::string read_count(const Tensor& t, std::size_t& count) {
  if (!t.defined()) return "is undefined";
  if (t.numel() != 1) return "has shape " + shape_str(t.shape()) + ", expected one element";
  const double value = t.item();
  if (!(value >= 0.0) || value != std::floor(value) || value > 9.0e15) {
    return "is " + number(value) + ", expected a non-negative integer";
  }
  count = static_cast<std::size_t>(value);
  return "";
}

// p -= lr * g with g the gradient plus L2 decay, through the momentum buffer when there is one.
template <class T>
void sgd_update(T* p, const T* grad, T* buffer, std::size_t n, const SGDOptions& o, double lr, bool first) {
  const T weight_decay = static_cast<T>(o.weight_decay);
  const T momentum = static_cast<T>(o.momentum);
  const T keep = static_cast<T>(1.0 - o.dampening);
  const T step = static_cast<T>(lr);
  for (std::size_t i = 0; i < n; ++i) {
    T g = grad[i];
    if (weight_decay != T(0)) g += weight_decay * p[i];
    if (buffer) {
      buffer[i] = first ? g : momentum * buffer[i] + keep * g;
      g = o.nesterov ? g + momentum * buffer[i] : buffer[i];
    }
    p[i] -= step * g;
  }
}

struct AdamStep {
  double lr, beta1, beta2, eps;
  double l2_decay;         // Adam: added to the gradient
  double decoupled_decay;  // AdamW: p *= 1 - lr * decoupled_decay first
  std::size_t t;           // the parameter's update count, from 1
};

// AdamStep's per-step constants in the parameter's type.
template <class T>
struct AdamConstants {
  explicit AdamConstants(const AdamStep& s)
      : step_size(static_cast<T>(s.lr / (1.0 - std::pow(s.beta1, static_cast<double>(s.t))))),
        bias_correction2_sqrt(static_cast<T>(std::sqrt(1.0 - std::pow(s.beta2, static_cast<double>(s.t))))),
        beta1(static_cast<T>(s.beta1)),
        beta2(static_cast<T>(s.beta2)),
        one_minus_beta1(static_cast<T>(1.0 - s.beta1)),
        one_minus_beta2(static_cast<T>(1.0 - s.beta2)),
        eps(static_cast<T>(s.eps)),
        l2(static_cast<T>(s.l2_decay)),
        shrink(static_cast<T>(1.0 - s.lr * s.decoupled_decay)),
        decoupled(s.decoupled_decay != 0.0) {}
  T step_size, bias_correction2_sqrt, beta1, beta2, one_minus_beta1, one_minus_beta2, eps, l2, shrink;
  bool decoupled;
};

// One Adam update of V = T (the scalar tail) or V = xsimd::batch<T> (several lanes at once).
template <class V, class T>
void adam_lanes(V& p, V g, V& exp_avg, V& exp_avg_sq, const AdamConstants<T>& c) {
  using std::sqrt;
  using xsimd::sqrt;
  if (c.decoupled) p = p * c.shrink;
  if (c.l2 != T(0)) g = g + c.l2 * p;
  exp_avg = c.beta1 * exp_avg + c.one_minus_beta1 * g;
  exp_avg_sq = c.beta2 * exp_avg_sq + c.one_minus_beta2 * g * g;
  p = p - c.step_size * exp_avg / (sqrt(exp_avg_sq) / c.bias_correction2_sqrt + c.eps);
}

// Through xsimd batches: a plain loop does not vectorise std::sqrt without -fno-math-errno (3x slower).
template <class T>
void adam_update(T* p, const T* grad, T* exp_avg, T* exp_avg_sq, std::size_t n, const AdamStep& s) {
  using Batch = xsimd::batch<T>;
  const AdamConstants<T> c(s);
  std::size_t i = 0;
  for (; i + Batch::size <= n; i += Batch::size) {
    Batch pb = Batch::load_unaligned(p + i);
    Batch mb = Batch::load_unaligned(exp_avg + i);
    Batch vb = Batch::load_unaligned(exp_avg_sq + i);
    adam_lanes(pb, Batch::load_unaligned(grad + i), mb, vb, c);
    pb.store_unaligned(p + i);
    mb.store_unaligned(exp_avg + i);
    vb.store_unaligned(exp_avg_sq + i);
  }
  for (; i < n; ++i) adam_lanes(p[i], grad[i], exp_avg[i], exp_avg_sq[i], c);
}

// Sum of squares in double, over eight independent accumulators so that the loop vectorises.
template <class T>
double sum_of_squares(const T* g, std::size_t n) {
  double lanes[8] = {};
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (std::size_t j = 0; j < 8; ++j) lanes[j] += static_cast<double>(g[i + j]) * static_cast<double>(g[i + j]);
  }
  double total = 0.0;
  for (double lane : lanes) total += lane;
  for (; i < n; ++i) total += static_cast<double>(g[i]) * static_cast<double>(g[i]);
  return total;
}

// The Adam and AdamW update of one parameter with its two state slots.
void adam_update(Tensor param, Tensor& exp_avg, Tensor& exp_avg_sq, const AdamStep& s, const char* who) {
  const Tensor grad = param.grad();
  dispatch_floating(param.dtype(), who, [&](auto tag) {
    using T = typename decltype(tag)::type;
    adam_update(param.data<T>(), grad.data<T>(), exp_avg.data<T>(), exp_avg_sq.data<T>(), param.numel(), s);
  });
}

}  // namespace

// ---- Optimizer ----

Optimizer::Optimizer(const char* name, std::vector<NamedParameter> params, double lr,
                     std::vector<std::string> slot_names)
    : name_(name), slot_names_(std::move(slot_names)), lr_(lr) {
  require(lr > 0.0 && std::isfinite(lr), name_, "lr must be > 0", lr);
  if (params.empty()) throw std::invalid_argument(std::string(name_) + ": the parameter list is empty");
  std::set<std::string> names;
  std::set<const TensorImpl*> tensors;
  for (NamedParameter& p : params) {
    const std::string who = std::string(name_) + ": parameter '" + p.name + "'";
    if (p.name.empty()) throw std::invalid_argument(std::string(name_) + ": a parameter has an empty name");
    if (!p.tensor.defined()) throw std::invalid_argument(who + " is undefined");
    if (!is_floating(p.tensor.dtype())) {
      throw std::invalid_argument(who + " is " + dtype_name(p.tensor.dtype()) +
                                  "; only float32 and float64 tensors can be optimized");
    }
    if (!p.tensor.is_leaf()) {
      throw std::invalid_argument(who + " is not a leaf (an op produced it); pass the tensors a module registers");
    }
    if (!names.insert(p.name).second) throw std::invalid_argument(who + " is listed twice");
    if (!tensors.insert(p.tensor.impl().get()).second) continue;  // tied weights: updated once, first name
    params_.push_back(std::move(p));
  }
  state_.resize(params_.size());
  for (std::size_t i = 0; i < params_.size(); ++i) {
    for (std::size_t s = 0; s < slot_names_.size(); ++s) {
      state_[i].slots.push_back(zeros(params_[i].tensor.shape(), params_[i].tensor.dtype()));
    }
  }
}

void Optimizer::set_lr(double lr) {
  require(lr >= 0.0 && std::isfinite(lr), name_, "set_lr: lr must be finite and >= 0", lr);
  lr_ = lr;
}

void Optimizer::zero_grad() {
  for (NamedParameter& p : params_) p.tensor.zero_grad();
}

void Optimizer::match_param_dtype(std::size_t index) {
  const Tensor& param = params_[index].tensor;
  for (Tensor& slot : state_[index].slots) {
    if (slot.shape() != param.shape()) {
      throw std::logic_error(std::string(name_) + ": parameter '" + params_[index].name + "' changed shape from " +
                             shape_str(slot.shape()) + " to " + shape_str(param.shape()) +
                             " after the optimizer was built; build a new optimizer");
    }
    if (slot.dtype() != param.dtype()) slot = slot.to(param.dtype());
  }
}

void Optimizer::step() {
  std::vector<std::size_t> due;
  due.reserve(params_.size());
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const Tensor grad = params_[i].tensor.grad();
    if (!grad.defined()) continue;
    if (grad.shape() != params_[i].tensor.shape() || grad.dtype() != params_[i].tensor.dtype()) {
      throw std::logic_error(std::string(name_) + ": the gradient of '" + params_[i].name + "' is " +
                             shape_str(grad.shape()) + " " + dtype_name(grad.dtype()) + " but the parameter is " +
                             shape_str(params_[i].tensor.shape()) + " " + dtype_name(params_[i].tensor.dtype()));
    }
    match_param_dtype(i);
    ++state_[i].updates;
    due.push_back(i);
  }
  update_all(due);
  ++step_count_;
}

// Independent updates are dealt out in contiguous runs of parameters with about equal numbers of
// elements, one run per thread (the optimizer was a serial 2% of a toy step on either thread count).
// Each parameter is updated whole by one thread, so the values are the same on any number of threads.
void Optimizer::update_all(const std::vector<std::size_t>& due) {
  constexpr std::size_t kMinElements = std::size_t{1} << 15;  // below this one thread does it all
  const std::size_t threads = static_cast<std::size_t>(num_threads());
  std::vector<std::size_t> start(due.size() + 1, 0);  // elements before each due parameter
  const bool shared = threads > 1 && due.size() > 1 && independent_updates();
  for (std::size_t j = 0; shared && j < due.size(); ++j) start[j + 1] = start[j] + params_[due[j]].tensor.numel();
  if (!shared || start.back() < kMinElements) {
    for (std::size_t i : due) update(i);
    return;
  }
  parallel_for(threads, 1, [&](std::size_t r0, std::size_t r1) {
    // run r: the parameters whose first element falls in [total r / threads, total (r + 1) / threads)
    for (std::size_t j = 0; j < due.size(); ++j) {
      const std::size_t run = std::min(threads - 1, start[j] * threads / start.back());  // empty ones at the end too
      if (run >= r0 && run < r1) update(due[j]);
    }
  });
}

std::map<std::string, Tensor> Optimizer::state_dict() const {
  std::map<std::string, Tensor> out;
  out.emplace("step", count_scalar(step_count_));
  for (std::size_t i = 0; i < params_.size(); ++i) {
    out.emplace(params_[i].name + ".step", count_scalar(state_[i].updates));
    for (std::size_t s = 0; s < slot_names_.size(); ++s) {
      out.emplace(params_[i].name + "." + slot_names_[s], state_[i].slots[s].clone());
    }
  }
  return out;
}

void Optimizer::load_state_dict(const std::map<std::string, Tensor>& state) {
  for (std::size_t i = 0; i < params_.size(); ++i) match_param_dtype(i);
  std::set<std::string> expected;
  std::string problems;
  auto read_step = [&](const std::string& key, std::size_t& count) {
    expected.insert(key);
    auto it = state.find(key);
    if (it == state.end()) {
      problems += "\n  missing: " + key + " (a step count)";
      return;
    }
    const std::string why = read_count(it->second, count);
    if (!why.empty()) problems += "\n  bad step count: " + key + " " + why;
  };

  std::size_t step_count = 0;
  std::vector<std::size_t> updates(params_.size(), 0);
  read_step("step", step_count);
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const Tensor& param = params_[i].tensor;
    read_step(params_[i].name + ".step", updates[i]);
    for (const std::string& slot_name : slot_names_) {
      const std::string key = params_[i].name + "." + slot_name;
      expected.insert(key);
      auto it = state.find(key);
      if (it == state.end()) {
        problems += "\n  missing: " + key + " " + shape_str(param.shape());
      } else if (!it->second.defined() || !is_floating(it->second.dtype())) {
        problems += "\n  not a float32 or float64 tensor: " + key;
      } else if (it->second.shape() != param.shape()) {
        problems += "\n  shape mismatch: " + key + " is " + shape_str(it->second.shape()) +
                    " in the state but the parameter is " + shape_str(param.shape());
      }
    }
  }
  for (const auto& [key, tensor] : state) {
    if (!expected.count(key)) problems += "\n  unexpected: " + key;
  }
  if (!problems.empty()) {
    throw std::invalid_argument(std::string(name_) +
                                " load_state_dict: the state does not match this optimizer (saved from another "
                                "model or optimizer type?):" + problems);
  }

  for (std::size_t i = 0; i < params_.size(); ++i) {
    state_[i].updates = updates[i];
    for (std::size_t s = 0; s < slot_names_.size(); ++s) {
      Tensor& slot = state_[i].slots[s];
      const Tensor source = state.at(params_[i].name + "." + slot_names_[s]).to(slot.dtype());
      std::memcpy(slot.storage()->data(), source.storage()->data(), slot.numel() * element_size(slot.dtype()));
    }
  }
  step_count_ = step_count;
}

// ---- SGD ----

SGD::SGD(std::vector<NamedParameter> params, const SGDOptions& options)
    : Optimizer("SGD", std::move(params), validated(options).lr,
                options.momentum != 0.0 ? std::vector<std::string>{"momentum_buffer"} : std::vector<std::string>{}),
      options_(options) {}

void SGD::update(std::size_t index) {
  Tensor param = parameters()[index].tensor;
  const Tensor grad = param.grad();
  const bool has_momentum = options_.momentum != 0.0;
  dispatch_floating(param.dtype(), "SGD", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* buffer = has_momentum ? slot(index, 0).data<T>() : nullptr;
    sgd_update(param.data<T>(), grad.data<T>(), buffer, param.numel(), options_, lr(), updates(index) == 1);
  });
}

// ---- Adam ----

Adam::Adam(std::vector<NamedParameter> params, const AdamOptions& options)
    : Optimizer("Adam", std::move(params), validated_adam(options, "Adam").lr, {"exp_avg", "exp_avg_sq"}),
      options_(options) {}

void Adam::update(std::size_t index) {
  const AdamStep s{lr(), options_.beta1, options_.beta2, options_.eps, options_.weight_decay, 0.0, updates(index)};
  adam_update(parameters()[index].tensor, slot(index, 0), slot(index, 1), s, "Adam");
}

// ---- AdamW ----

AdamW::AdamW(std::vector<NamedParameter> params, const AdamWOptions& options)
    : Optimizer("AdamW", std::move(params), validated_adam(options, "AdamW").lr, {"exp_avg", "exp_avg_sq"}),
      options_(options) {
  for (const NamedParameter& p : parameters()) decayed_.push_back(options_.decay_kinds.count(p.kind) > 0);
}

std::vector<std::string> AdamW::decayed_names() const {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < parameters().size(); ++i) {
    if (decayed_[i]) out.push_back(parameters()[i].name);
  }
  return out;
}

void AdamW::update(std::size_t index) {
  const double decay = decayed_[index] ? options_.weight_decay : 0.0;
  const AdamStep s{lr(), options_.beta1, options_.beta2, options_.eps, 0.0, decay, updates(index)};
  adam_update(parameters()[index].tensor, slot(index, 0), slot(index, 1), s, "AdamW");
}

// ---- their options and registration ----

template <>
OptimizerRegistry& OptimizerRegistry::instance() {
  static OptimizerRegistry registry("optimizer");
  return registry;
}

Schema<SGDOptions> SGD::options_schema() {
  Schema<SGDOptions> s;
  s.field("lr", &SGDOptions::lr, "peak learning rate (the schedule's)", Range::greater_than(0.0));
  s.field("momentum", &SGDOptions::momentum, "momentum", Range::at_least(0.0));
  s.field("dampening", &SGDOptions::dampening, "dampening of the momentum", Range::closed(0.0, 1.0));
  s.field("nesterov", &SGDOptions::nesterov, "Nesterov momentum (needs momentum > 0 and dampening 0)");
  s.field("weight_decay", &SGDOptions::weight_decay, "L2 weight decay added to every parameter's gradient", Range::at_least(0.0));
  return s;
}

void SGD::check(const Options& options, const ConfigNode& node) {
  try {
    validated(options);
  } catch (const std::invalid_argument& e) {
    node.fail("nesterov", e.what());  // the one rule across keys the schema's ranges leave
  }
}

// Adam's and AdamW's shared keys.
template <class O>
void adam_fields(Schema<O>& s, const char* weight_decay_doc) {
  s.field("lr", &O::lr, "peak learning rate (the schedule's)", Range::greater_than(0.0));
  s.field("beta1", &O::beta1, "first-moment decay", Range::closed_open(0.0, 1.0));
  s.field("beta2", &O::beta2, "second-moment decay", Range::closed_open(0.0, 1.0));
  s.field("eps", &O::eps, "added to the second moment's root", Range::greater_than(0.0));
  s.field("weight_decay", &O::weight_decay, weight_decay_doc, Range::at_least(0.0));
}

Schema<AdamOptions> Adam::options_schema() {
  Schema<AdamOptions> s;
  adam_fields(s, "L2 weight decay added to every parameter's gradient");
  return s;
}

Schema<AdamWOptions> AdamW::options_schema() {
  Schema<AdamWOptions> s;
  adam_fields(s, "decoupled weight decay, on the parameters of the kinds in decay_kinds");
  s.choices("decay_kinds", &AdamWOptions::decay_kinds, param_kind_names(),
            "which parameters decay: `weight` (Linear matrices), `embedding` (token and position embeddings, CLS tokens), `bias`, "
            "`norm` (LayerNorm gains and shifts). nanoGPT decays every tensor of two or more dimensions: `[weight, embedding]`");
  return s;
}

ATTNLAB_REGISTER_OPTIMIZER(SGD);
ATTNLAB_REGISTER_OPTIMIZER(Adam);
ATTNLAB_REGISTER_OPTIMIZER(AdamW);

// ---- gradient clipping ----

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm) {
  require(max_norm > 0.0, "clip_grad_norm", "max_norm must be > 0", max_norm);
  // Each gradient once, even when a tied tensor is listed twice.
  std::vector<Tensor> grads;
  std::set<const Storage*> seen;
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (!params[i].defined()) {
      throw std::invalid_argument("clip_grad_norm: parameter " + std::to_string(i) + " is undefined");
    }
    const Tensor grad = params[i].grad();
    if (grad.defined() && seen.insert(grad.storage().get()).second) grads.push_back(grad);
  }

  double total = 0.0;
  for (const Tensor& grad : grads) {
    dispatch_floating(grad.dtype(), "clip_grad_norm", [&](auto tag) {
      using T = typename decltype(tag)::type;
      total += sum_of_squares(grad.data<T>(), grad.numel());
    });
  }
  const double norm = std::sqrt(total);
  if (!std::isfinite(norm) || norm <= max_norm) return norm;

  const double scale = max_norm / (norm + 1e-6);
  for (Tensor grad : grads) {
    dispatch_floating(grad.dtype(), "clip_grad_norm", [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* g = grad.data<T>();
      const T s = static_cast<T>(scale);
      for (std::size_t i = 0, n = grad.numel(); i < n; ++i) g[i] *= s;
    });
  }
  return norm;
}

}  // namespace attnlab
