// Node: one recorded op in the autograd graph. It holds one edge per input (to the node that produced it,
// or to the leaf that accumulates its gradient; never the input's data) and a backward closure that maps
// the gradient of the op's output (of each of its outputs, for an op with several) to one gradient per
// input (undefined where an input needs none). Closures capture saved arrays by value or detached aliases,
// never the op's own output handle, so a graph never keeps itself alive.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "framework/autograd/grad_mode.hpp"
#include "framework/tensor/tensor.hpp"

namespace attnlab {

class Node;

// How the backward engine adds one gradient into another where two meet (dst += src; floating tensors of
// one shape and dtype, contiguous): a loop on the calling thread until a room above installs another.
// framework/ops installs one split across its thread pool (on two threads the GPT step's residual-stream
// sums, [768, 128] each, were the longest work the caller did while the worker waited). An adder must
// give the loop's bits: each element is dst + src, rounded once.
using GradientAdder = void (*)(Tensor& dst, const Tensor& src);
void set_gradient_adder(GradientAdder adder);

// Where the gradient of one input of a node goes.
struct Edge {
  std::shared_ptr<Node> node;          // the op that produced the input; null for a leaf
  std::size_t output_nr = 0;           // which of node's outputs the input is
  std::shared_ptr<TensorImpl> leaf;    // the leaf whose .grad receives the gradient, when node is null
  Shape shape;                         // the input's shape and dtype, to check the gradient against
  DType dtype = DType::float32;
  bool requires_grad = false;          // false: the backward's gradient for this input is ignored
};

class Node {
 public:
  using BackwardFn = std::function<std::vector<Tensor>(const Tensor& grad_output)>;
  // For an op with several outputs: their gradients in order, undefined for an output that got none.
  using MultiBackwardFn = std::function<std::vector<Tensor>(const std::vector<Tensor>& grad_outputs)>;

  Node(const char* name, std::vector<Tensor> inputs, BackwardFn backward);
  Node(const char* name, std::vector<Tensor> inputs, std::size_t outputs, MultiBackwardFn backward);
  // Iterative: destroying a long chain of nodes does not recurse once per node.
  ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  const char* name() const { return name_; }
  const std::vector<Edge>& edges() const { return edges_; }
  std::size_t outputs() const { return outputs_; }
  bool released() const { return !backward_ && !multi_backward_; }

  // Runs the backward closure on the gradients of the outputs (one per output); throws if an earlier
  // backward released it.
  std::vector<Tensor> apply(const std::vector<Tensor>& grad_outputs) const;
  // Frees the saved values (the closure); the edges stay so a second backward can say what happened.
  void release();

 private:
  const char* name_;
  std::vector<Edge> edges_;
  std::size_t outputs_ = 1;
  BackwardFn backward_;             // one output
  MultiBackwardFn multi_backward_;  // several
};

// True when an op over these inputs must record a node: grad mode is on and some input requires grad.
inline bool needs_grad(std::initializer_list<const Tensor*> inputs) {
  if (!grad_enabled()) return false;
  for (const Tensor* t : inputs)
    if (t->defined() && t->requires_grad()) return true;
  return false;
}

// Makes `out` the result of a recorded op: attaches a node and marks it as requiring grad.
void record(Tensor& out, const char* name, std::vector<Tensor> inputs, Node::BackwardFn backward);
// The same for an op with several outputs, which share one node (output i is its output_nr i).
void record(std::vector<Tensor>& outs, const char* name, std::vector<Tensor> inputs, Node::MultiBackwardFn backward);

}  // namespace attnlab
