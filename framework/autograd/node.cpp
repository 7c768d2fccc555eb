#include "framework/autograd/node.hpp"

#include <stdexcept>
#include <utility>

namespace attnlab {
namespace {

thread_local bool t_grad_enabled = true;

// What a dying node still owns. Its destruction can free earlier nodes, so it is queued here and freed
// in a loop by the outermost ~Node on this thread instead of by nested destructor calls.
struct Remains {
  std::vector<Edge> edges;
  Node::BackwardFn backward;
  Node::MultiBackwardFn multi_backward;
};
thread_local std::vector<Remains> t_teardown_queue;
thread_local bool t_tearing_down = false;

}  // namespace

bool grad_enabled() { return t_grad_enabled; }
NoGradGuard::NoGradGuard() : previous_(t_grad_enabled) { t_grad_enabled = false; }
NoGradGuard::~NoGradGuard() { t_grad_enabled = previous_; }

Node::Node(const char* name, std::vector<Tensor> inputs, std::size_t outputs, MultiBackwardFn backward)
    : Node(name, std::move(inputs), BackwardFn()) {
  outputs_ = outputs;
  multi_backward_ = std::move(backward);
}

Node::Node(const char* name, std::vector<Tensor> inputs, BackwardFn backward)
    : name_(name), backward_(std::move(backward)) {
  edges_.reserve(inputs.size());
  for (Tensor& input : inputs) {
    Edge edge;
    if (input.defined()) {
      edge.shape = input.shape();
      edge.dtype = input.dtype();
      edge.requires_grad = input.requires_grad();
      if (edge.requires_grad) {
        edge.node = input.grad_fn();
        edge.output_nr = input.impl()->output_nr;
        if (!edge.node) edge.leaf = input.impl();
      }
    }
    edges_.push_back(std::move(edge));
  }
}

Node::~Node() {
  if (edges_.empty() && released()) return;
  t_teardown_queue.push_back(Remains{std::move(edges_), std::move(backward_), std::move(multi_backward_)});
  if (t_tearing_down) return;
  t_tearing_down = true;
  while (!t_teardown_queue.empty()) {
    Remains last = std::move(t_teardown_queue.back());
    t_teardown_queue.pop_back();
    // `last` dies here; nodes it frees queue their own remains instead of recursing.
  }
  t_tearing_down = false;
}

std::vector<Tensor> Node::apply(const std::vector<Tensor>& grad_outputs) const {
  if (released()) {
    throw std::runtime_error(
        std::string("backward: trying to backward through the graph a second time (the saved values of '") +
        name_ + "' were freed by an earlier backward); pass retain_graph=true to the first backward() "
                "to run backward more than once");
  }
  return multi_backward_ ? multi_backward_(grad_outputs) : backward_(grad_outputs[0]);
}

void Node::release() {
  BackwardFn dead = std::move(backward_);
  MultiBackwardFn dead_too = std::move(multi_backward_);
  backward_ = nullptr;
  multi_backward_ = nullptr;
}

void record(Tensor& out, const char* name, std::vector<Tensor> inputs, Node::BackwardFn backward) {
  auto& impl = *out.impl();
  impl.grad_fn = std::make_shared<Node>(name, std::move(inputs), std::move(backward));
  impl.output_nr = 0;  // the node's only output (a tensor recorded before as output k of another node is not any more)
  impl.requires_grad = true;
}

void record(std::vector<Tensor>& outs, const char* name, std::vector<Tensor> inputs, Node::MultiBackwardFn backward) {
  auto node = std::make_shared<Node>(name, std::move(inputs), outs.size(), std::move(backward));
  for (std::size_t i = 0; i < outs.size(); ++i) {
    auto& impl = *outs[i].impl();
    impl.grad_fn = node;
    impl.output_nr = i;
    impl.requires_grad = true;
  }
}

}  // namespace attnlab
