// Named activations, in the spirit of TransformerLens's hook points: a model passes its activations
// through named points ("blocks.1.attn.hook_pattern"), and a caller asks, per forward, for any set of
// them to be cached (returned as tensors) or replaced (a function receives the activation and returns
// the one that flows on: zero a head, patch in another run's value). Pattern capture, ablation and
// patching are all built on this one mechanism.
//
// When nothing is asked, a model runs with an empty HookScope: every point is an inline test of a null
// pointer, and the activations that cost something to form (patterns, per-head results) are not formed.
//
//   HookRequest request;
//   request.cache = {"blocks.*.attn.hook_pattern"};
//   request.replace = {{"blocks.0.attn.hook_z", [](const Tensor& z, const std::string&) { return z * 0.0; }}};
//
// Names may hold '*', which matches any run of characters. Every name or pattern asked for must match
// a point the forward passed, or the forward fails naming the points the model has.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "framework/tensor/tensor.hpp"

namespace attnlab {

// A name or pattern asked for that matches none of the model's points (the message lists them); the
// Python module raises it as KeyError.
class UnknownActivation : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// Receives an activation and its name; returns the activation that flows on (same shape and dtype).
using ActivationFn = std::function<Tensor(const Tensor& value, const std::string& name)>;

struct HookRequest {
  std::vector<std::string> cache;                              // names or patterns to return
  std::vector<std::pair<std::string, ActivationFn>> replace;   // names or patterns, and what replaces them
  bool empty() const { return cache.empty() && replace.empty(); }
};

// '*' matches any run of characters (dots included); everything else matches itself.
bool hook_name_matches(const std::string& pattern, const std::string& name);

// The hooks of one forward: what was asked, and what was cached.
class ActivationHooks {
 public:
  explicit ActivationHooks(HookRequest request);
  // Whether `name` is cached or replaced (models form costly activations only when it is).
  bool wants(const std::string& name);
  // The activation that flows on: replaced by every matching replacement in order, then cached (the
  // cache holds what flowed on).
  Tensor apply(const std::string& name, const Tensor& value);
  // Throws UnknownActivation for a requested name or pattern that no point matched, listing the
  // points this forward passed.
  void check_all_matched() const;
  std::map<std::string, Tensor> take_cache() { return std::move(cache_); }

 private:
  HookRequest request_;
  std::vector<bool> cache_matched_, replace_matched_;
  std::set<std::string> seen_;
  std::map<std::string, Tensor> cache_;
};

// A prefix into the hooks of a forward ("blocks.1.attn."), passed down through the modules. Default-
// constructed, it is inactive and free.
class HookScope {
 public:
  HookScope() = default;
  HookScope(ActivationHooks* hooks, std::string prefix) : hooks_(hooks), prefix_(std::move(prefix)) {}
  bool active() const { return hooks_ != nullptr; }
  bool wants(const char* name) const { return hooks_ && hooks_->wants(prefix_ + name); }
  // The activation named prefix + name after the hooks (the value itself when inactive).
  Tensor operator()(const char* name, const Tensor& value) const { return hooks_ ? hooks_->apply(prefix_ + name, value) : value; }
  // The scope of a child ("attn" -> "blocks.1.attn."); inactive when this one is.
  HookScope child(const std::string& part) const { return hooks_ ? HookScope(hooks_, prefix_ + part + ".") : HookScope(); }

 private:
  ActivationHooks* hooks_ = nullptr;
  std::string prefix_;
};

}  // namespace attnlab
