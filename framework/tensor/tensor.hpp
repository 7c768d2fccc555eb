// Tensor: a cheap handle (shared pointer) to a contiguous row-major array with its dtype, shape,
// requires_grad flag, accumulated gradient and the autograd node that produced it.
//
// Copying a Tensor copies the handle, not the data: `Tensor b = a;` makes b and a the same tensor.
// Use clone() for a copy of the data.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "framework/tensor/dtype.hpp"
#include "framework/tensor/shape.hpp"
#include "framework/tensor/storage.hpp"

namespace attnlab {

class Node;
class Generator;

// Options for the factories, chainable: TensorOptions().dtype(DType::float64).requires_grad(true).
class TensorOptions {
 public:
  TensorOptions() = default;
  TensorOptions(DType dtype) : dtype_(dtype) {}  // NOLINT: implicit on purpose, zeros(s, DType::float64)
  TensorOptions& dtype(DType d) { dtype_ = d; return *this; }
  TensorOptions& requires_grad(bool r) { requires_grad_ = r; return *this; }
  DType dtype() const { return dtype_; }
  bool requires_grad() const { return requires_grad_; }

 private:
  DType dtype_ = DType::float32;
  bool requires_grad_ = false;
};

struct TensorImpl;

class Tensor {
 public:
  Tensor() = default;  // an undefined tensor: defined() is false
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const;
  std::size_t dim() const { return shape().size(); }
  std::size_t numel() const;
  // Size of one axis; negative axes count from the end.
  std::size_t size(std::int64_t axis) const;
  DType dtype() const;

  // Raw contiguous data; T must match dtype() (checked).
  template <class T> T* data();
  template <class T> const T* data() const;
  // The single value of a one-element tensor, converted to double.
  double item() const;
  // All values converted to double, row-major (for tests and printing).
  std::vector<double> to_vector() const;
  // One element by multi-index, converted to double.
  double at(const std::vector<std::size_t>& index) const;

  // Autograd state.
  bool requires_grad() const;
  // Only on leaves (tensors no op produced); floating dtypes only.
  Tensor& set_requires_grad(bool requires_grad = true);
  bool is_leaf() const;
  // The accumulated gradient (undefined until a backward reaches this leaf).
  Tensor grad() const;
  // Makes `grad` this tensor's gradient (an alias, as PyTorch's `.grad = g`: later backward passes
  // accumulate into it in place).
  void set_grad(const Tensor& grad);
  // Drops the accumulated gradient (the next backward starts from zero).
  void zero_grad();
  const std::shared_ptr<Node>& grad_fn() const;
  void set_grad_fn(std::shared_ptr<Node> node);

  // Reverse-mode differentiation from this tensor. Without `grad`, the tensor must hold one element and
  // the seed gradient is 1. With retain_graph false the graph's saved values are released as it runs.
  // Defined in framework/autograd/engine.cpp.
  void backward(const Tensor& grad = Tensor(), bool retain_graph = false) const;

  // Makes this leaf hold `source`'s storage, shape and dtype (every handle to it sees the change); the
  // accumulated gradient is dropped. For in-place dtype conversion of parameters.
  void set_data(const Tensor& source);
  // A tensor sharing this one's storage, cut from the graph, with requires_grad false.
  Tensor detach() const;
  // A copy of the data (no graph; requires_grad false).
  Tensor clone() const;
  // Converts to another dtype; differentiable between float32 and float64. Same dtype returns *this.
  Tensor to(DType dtype) const;

  // The storage (shared by views) and whether two handles are the same tensor.
  const std::shared_ptr<Storage>& storage() const;
  bool same(const Tensor& other) const { return impl_ == other.impl_; }
  const std::shared_ptr<TensorImpl>& impl() const { return impl_; }

  std::string to_string() const;

 private:
  void check_defined(const char* what) const;
  std::shared_ptr<TensorImpl> impl_;
};

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  bool requires_grad = false;
  Tensor grad;
  std::shared_ptr<Node> grad_fn;
  std::size_t output_nr = 0;  // which output of grad_fn this tensor is (ops with several outputs)
};

// Boolean tensors store one byte per element, read and written as bool.
template <> bool* Tensor::data<bool>();
template <> const bool* Tensor::data<bool>() const;

// ---- factories ----
// Uninitialised memory: every element must be written before it is read.
Tensor empty(const Shape& shape, TensorOptions options = {});
Tensor zeros(const Shape& shape, TensorOptions options = {});
Tensor ones(const Shape& shape, TensorOptions options = {});
Tensor full(const Shape& shape, double value, TensorOptions options = {});
Tensor scalar(double value, TensorOptions options = {});
// 0, 1, ..., n-1 (as a 1-D tensor of the given dtype); arange(start, end, step) like numpy.
Tensor arange(std::int64_t n, TensorOptions options = {});
Tensor arange(double start, double end, double step, TensorOptions options = {});
// From row-major values; their count must match the shape.
Tensor from_vector(const std::vector<double>& values, const Shape& shape, TensorOptions options = {});
// int64 indices (token ids, class targets).
Tensor from_indices(const std::vector<std::int64_t>& values, const Shape& shape);
Tensor from_mask(const std::vector<bool>& values, const Shape& shape);
// Standard normal (times stddev, plus mean) and uniform [low, high) from an explicit generator.
Tensor randn(const Shape& shape, Generator& gen, TensorOptions options = {}, double mean = 0.0,
             double stddev = 1.0);
Tensor uniform(const Shape& shape, Generator& gen, double low = 0.0, double high = 1.0,
               TensorOptions options = {});
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);

}  // namespace attnlab
