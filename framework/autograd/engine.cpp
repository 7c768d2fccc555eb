// The backward engine: reverse topological order with an explicit stack and dependency counts, no
// recursion, gradients accumulated (never assigned) into leaves, graph released as it runs.
#include <algorithm>
#include <atomic>
#include <stdexcept>
#include <unordered_map>
#include <vector>

#include "framework/autograd/node.hpp"

namespace attnlab {
namespace {

template <class T>
void add_into(T* dst, const T* src, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] += src[i];
}

std::atomic<GradientAdder> g_gradient_adder{nullptr};

// dst += src in place (both floating, same shape and dtype, checked by the caller), through the installed
// adder if any.
void add_inplace(Tensor& dst, const Tensor& src) {
  if (const GradientAdder adder = g_gradient_adder.load(std::memory_order_acquire)) {
    adder(dst, src);
    return;
  }
  dispatch_floating(dst.dtype(), "backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    add_into(dst.data<T>(), src.data<T>(), dst.numel());
  });
}

// Whether nothing else holds t or its storage: a gradient nobody shares may be added into in place.
// (add's backward, for one, hands the same tensor to both its inputs; reshape shares storage.)
bool sole_owner(const Tensor& t) { return t.impl().use_count() == 1 && t.storage().use_count() == 1; }

// a + b, into whichever of the two nobody else holds, else into a fresh tensor (either may be shared
// with another gradient). a and b are taken by value so that the caller's handles do not count.
Tensor sum_of(Tensor a, Tensor b) {
  if (sole_owner(a)) {
    add_inplace(a, b);
    return a;
  }
  if (sole_owner(b)) {
    add_inplace(b, a);
    return b;
  }
  Tensor out = a.clone();
  add_inplace(out, b);
  return out;
}

void check_gradient(const Node& node, std::size_t i, const Edge& input, const Tensor& grad) {
  if (grad.shape() != input.shape || grad.dtype() != input.dtype) {
    throw std::logic_error(std::string("backward of '") + node.name() + "' returned a gradient of shape " +
                           shape_str(grad.shape()) + " (" + dtype_name(grad.dtype()) + ") for input " +
                           std::to_string(i) + " of shape " + shape_str(input.shape) + " (" +
                           dtype_name(input.dtype) + ")");
  }
}

// The one place gradients reach leaves: leaf.grad += grad. The first gradient becomes leaf.grad when
// nothing else holds it, else a copy of it does, because the engine's gradients may be shared (add
// passes its output gradient to both inputs) and later passes add into leaf.grad in place. A gradient
// the user installed with set_grad is theirs to share.
void accumulate_leaf(const Tensor& leaf, Tensor grad) {
  Tensor current = leaf.grad();
  if (!current.defined()) {
    const_cast<Tensor&>(leaf).set_grad(sole_owner(grad) ? std::move(grad) : grad.clone());
  } else {
    add_inplace(current, grad);
  }
}

// For every node reachable from the root, how many edges from other reachable nodes lead to it.
std::unordered_map<Node*, int> count_dependencies(Node* root) {
  std::unordered_map<Node*, int> dependencies{{root, 0}};
  std::vector<Node*> stack{root};
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    for (const Edge& edge : node->edges()) {
      Node* next = edge.node.get();
      if (!next) continue;
      auto [it, inserted] = dependencies.try_emplace(next, 0);
      ++it->second;
      if (inserted) stack.push_back(next);
    }
  }
  return dependencies;
}

}  // namespace

void set_gradient_adder(GradientAdder adder) { g_gradient_adder.store(adder, std::memory_order_release); }

void Tensor::backward(const Tensor& grad, bool retain_graph) const {
  check_defined("backward");
  if (!requires_grad()) {
    throw std::runtime_error(
        "backward: this tensor does not require grad (no input of its graph requires grad, or it was "
        "computed under a NoGradGuard)");
  }
  Tensor seed = grad;
  if (!seed.defined()) {
    if (numel() != 1) {
      throw std::runtime_error("backward: a gradient can be implied only for a one-element output; this one has shape " +
                               shape_str(shape()) + ", so pass the output gradient explicitly");
    }
    seed = ones(shape(), dtype());
  } else if (seed.shape() != shape() || seed.dtype() != dtype()) {
    throw std::invalid_argument("backward: the output gradient has shape " + shape_str(seed.shape()) + " (" +
                                dtype_name(seed.dtype()) + ") but the output has shape " + shape_str(shape()) +
                                " (" + dtype_name(dtype()) + ")");
  }
  NoGradGuard no_grad;
  if (is_leaf()) {
    accumulate_leaf(*this, seed);
    return;
  }

  Node* root = grad_fn().get();
  std::unordered_map<Node*, int> dependencies = count_dependencies(root);
  std::vector<Node*> stack;

  // Run nodes once all their consumers have contributed their gradient: one per output of the node.
  std::unordered_map<Node*, std::vector<Tensor>> pending;
  pending[root].resize(root->outputs());
  pending[root][impl()->output_nr] = seed;
  stack.push_back(root);
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    auto found = pending.find(node);
    std::vector<Tensor> grad_outputs = std::move(found->second);
    pending.erase(found);

    // A node whose consumers gave it no gradient still reports "none" to its inputs, so that their
    // dependency counts reach zero.
    const auto& inputs = node->edges();
    std::vector<Tensor> grads(inputs.size());
    if (std::any_of(grad_outputs.begin(), grad_outputs.end(), [](const Tensor& g) { return g.defined(); })) {
      grads = node->apply(grad_outputs);
      grad_outputs.clear();
    }
    if (!retain_graph) node->release();
    if (grads.size() != inputs.size()) {
      throw std::logic_error(std::string("backward of '") + node->name() + "' returned " +
                             std::to_string(grads.size()) + " gradients for " + std::to_string(inputs.size()) +
                             " inputs");
    }
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      const Edge& input = inputs[i];
      if (!input.requires_grad) continue;
      Node* next = input.node.get();
      if (grads[i].defined()) check_gradient(*node, i, input, grads[i]);
      if (!next) {
        if (grads[i].defined()) accumulate_leaf(Tensor(input.leaf), std::move(grads[i]));
        continue;
      }
      std::vector<Tensor>& slots = pending[next];
      if (slots.empty()) slots.resize(next->outputs());
      Tensor& slot = slots[input.output_nr];
      if (grads[i].defined()) slot = slot.defined() ? sum_of(std::move(slot), std::move(grads[i])) : std::move(grads[i]);
      if (--dependencies[next] == 0) stack.push_back(next);
    }
  }
}

}  // namespace attnlab
