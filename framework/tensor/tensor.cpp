#include "framework/tensor/tensor.hpp"

#include <cmath>
#include <cstring>
#include <sstream>
#include <stdexcept>

#include "framework/autograd/node.hpp"
#include "framework/tensor/random.hpp"

namespace attnlab {
namespace {

Tensor make_tensor(const Shape& shape, DType dtype, bool zero) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(dtype, shape_numel(shape), zero);
  impl->shape = shape;
  return Tensor(std::move(impl));
}

template <class F>
void for_each_value(const Tensor& t, F&& f) {
  const void* p = t.storage()->data();
  const std::size_t n = t.numel();
  switch (t.dtype()) {
    case DType::float32: for (std::size_t i = 0; i < n; ++i) f(static_cast<const float*>(p)[i]); break;
    case DType::float64: for (std::size_t i = 0; i < n; ++i) f(static_cast<const double*>(p)[i]); break;
    case DType::int64: for (std::size_t i = 0; i < n; ++i) f(static_cast<const std::int64_t*>(p)[i]); break;
    case DType::boolean: for (std::size_t i = 0; i < n; ++i) f(static_cast<const std::uint8_t*>(p)[i]); break;
  }
}

// Writes values produced by next() into a fresh tensor of any dtype.
template <class F>
Tensor fill_with(const Shape& shape, TensorOptions options, F&& next) {
  Tensor t = make_tensor(shape, options.dtype(), false);
  void* p = t.storage()->data();
  const std::size_t n = t.numel();
  switch (options.dtype()) {
    case DType::float32: for (std::size_t i = 0; i < n; ++i) static_cast<float*>(p)[i] = static_cast<float>(next(i)); break;
    case DType::float64: for (std::size_t i = 0; i < n; ++i) static_cast<double*>(p)[i] = next(i); break;
    case DType::int64: for (std::size_t i = 0; i < n; ++i) static_cast<std::int64_t*>(p)[i] = static_cast<std::int64_t>(next(i)); break;
    case DType::boolean: for (std::size_t i = 0; i < n; ++i) static_cast<std::uint8_t*>(p)[i] = next(i) != 0.0; break;
  }
  if (options.requires_grad()) t.set_requires_grad(true);
  return t;
}

}  // namespace

void Tensor::check_defined(const char* what) const {
  if (!impl_) throw std::logic_error(std::string(what) + ": the tensor is undefined");
}

const Shape& Tensor::shape() const {
  check_defined("shape");
  return impl_->shape;
}
std::size_t Tensor::numel() const { return shape_numel(shape()); }
std::size_t Tensor::size(std::int64_t axis) const { return shape()[normalize_axis(axis, dim(), "size")]; }
DType Tensor::dtype() const {
  check_defined("dtype");
  return impl_->storage->dtype();
}
const std::shared_ptr<Storage>& Tensor::storage() const {
  check_defined("storage");
  return impl_->storage;
}

template <class T>
T* Tensor::data() {
  if (dtype() != dtype_of<T>::value) {
    throw std::invalid_argument(std::string("data<") + dtype_name(dtype_of<T>::value) + ">() on a " +
                                dtype_name(dtype()) + " tensor");
  }
  return static_cast<T*>(impl_->storage->data());
}
template <class T>
const T* Tensor::data() const {
  return const_cast<Tensor*>(this)->data<T>();
}
template float* Tensor::data<float>();
template double* Tensor::data<double>();
template std::int64_t* Tensor::data<std::int64_t>();
template const float* Tensor::data<float>() const;
template const double* Tensor::data<double>() const;
template const std::int64_t* Tensor::data<std::int64_t>() const;
// Boolean tensors are stored one byte per element.
template <>
bool* Tensor::data<bool>() {
  if (dtype() != DType::boolean) throw std::invalid_argument(std::string("data<bool>() on a ") + dtype_name(dtype()) + " tensor");
  return static_cast<bool*>(impl_->storage->data());
}
template <>
const bool* Tensor::data<bool>() const {
  return const_cast<Tensor*>(this)->data<bool>();
}

double Tensor::item() const {
  if (numel() != 1) throw std::invalid_argument("item: the tensor has shape " + shape_str(shape()) + ", not one element");
  return to_vector()[0];
}

std::vector<double> Tensor::to_vector() const {
  std::vector<double> out;
  out.reserve(numel());
  for_each_value(*this, [&](auto v) { out.push_back(static_cast<double>(v)); });
  return out;
}

double Tensor::at(const std::vector<std::size_t>& index) const {
  if (index.size() != dim()) {
    throw std::invalid_argument("at: index of rank " + std::to_string(index.size()) + " for a tensor of shape " +
                                shape_str(shape()));
  }
  std::size_t offset = 0;
  for (std::size_t i = 0; i < index.size(); ++i) {
    if (index[i] >= shape()[i]) throw std::out_of_range("at: index out of range for shape " + shape_str(shape()));
    offset = offset * shape()[i] + index[i];
  }
  const void* p = storage()->data();
  switch (dtype()) {
    case DType::float32: return static_cast<const float*>(p)[offset];
    case DType::float64: return static_cast<const double*>(p)[offset];
    case DType::int64: return static_cast<double>(static_cast<const std::int64_t*>(p)[offset]);
    case DType::boolean: return static_cast<const std::uint8_t*>(p)[offset];
  }
  return 0;
}

bool Tensor::requires_grad() const {
  check_defined("requires_grad");
  return impl_->requires_grad;
}

Tensor& Tensor::set_requires_grad(bool requires_grad) {
  check_defined("set_requires_grad");
  if (!is_leaf()) {
    throw std::logic_error("set_requires_grad: only leaf tensors can change requires_grad; use detach() to "
                           "cut this one from its graph first");
  }
  if (requires_grad && !is_floating(dtype())) {
    throw std::invalid_argument(std::string("set_requires_grad: only float32 and float64 tensors can require "
                                            "grad, this one is ") + dtype_name(dtype()));
  }
  impl_->requires_grad = requires_grad;
  return *this;
}

bool Tensor::is_leaf() const { return grad_fn() == nullptr; }
Tensor Tensor::grad() const {
  check_defined("grad");
  return impl_->grad;
}
void Tensor::set_grad(const Tensor& grad) {
  check_defined("set_grad");
  if (grad.defined() && (grad.shape() != shape() || grad.dtype() != dtype())) {
    throw std::invalid_argument("set_grad: gradient of shape " + shape_str(grad.shape()) + " for a tensor of shape " +
                                shape_str(shape()));
  }
  impl_->grad = grad;
}
void Tensor::zero_grad() {
  check_defined("zero_grad");
  impl_->grad = Tensor();
}
const std::shared_ptr<Node>& Tensor::grad_fn() const {
  check_defined("grad_fn");
  return impl_->grad_fn;
}
void Tensor::set_grad_fn(std::shared_ptr<Node> node) {
  check_defined("set_grad_fn");
  impl_->grad_fn = std::move(node);
}

void Tensor::set_data(const Tensor& source) {
  check_defined("set_data");
  if (!is_leaf()) throw std::logic_error("set_data: only leaf tensors can have their data replaced");
  if (requires_grad() && !is_floating(source.dtype())) {
    throw std::invalid_argument(std::string("set_data: a tensor that requires grad cannot hold ") + dtype_name(source.dtype()));
  }
  impl_->storage = source.storage();
  impl_->shape = source.shape();
  impl_->grad = Tensor();
}

Tensor Tensor::detach() const {
  check_defined("detach");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = impl_->storage;
  impl->shape = impl_->shape;
  return Tensor(std::move(impl));
}

Tensor Tensor::clone() const {
  check_defined("clone");
  Tensor out = make_tensor(shape(), dtype(), false);
  std::memcpy(out.storage()->data(), storage()->data(), storage()->nbytes());
  return out;
}

std::string Tensor::to_string() const {
  if (!defined()) return "Tensor(undefined)";
  std::ostringstream os;
  os << "Tensor(shape=" << shape_str(shape()) << ", dtype=" << dtype_name(dtype());
  if (requires_grad()) os << ", requires_grad";
  if (grad_fn()) os << ", grad_fn=" << grad_fn()->name();
  os << ", values=[";
  const std::vector<double> v = to_vector();
  for (std::size_t i = 0; i < v.size() && i < 16; ++i) os << (i ? ", " : "") << v[i];
  if (v.size() > 16) os << ", ...";
  os << "])";
  return os.str();
}

Tensor empty(const Shape& shape, TensorOptions options) {
  Tensor t = make_tensor(shape, options.dtype(), false);
  if (options.requires_grad()) t.set_requires_grad(true);
  return t;
}
Tensor zeros(const Shape& shape, TensorOptions options) {
  Tensor t = make_tensor(shape, options.dtype(), true);
  if (options.requires_grad()) t.set_requires_grad(true);
  return t;
}
Tensor ones(const Shape& shape, TensorOptions options) { return full(shape, 1.0, options); }
Tensor full(const Shape& shape, double value, TensorOptions options) {
  return fill_with(shape, options, [value](std::size_t) { return value; });
}
Tensor scalar(double value, TensorOptions options) { return full({}, value, options); }

Tensor arange(std::int64_t n, TensorOptions options) {
  if (n < 0) throw std::invalid_argument("arange: n must be >= 0, got " + std::to_string(n));
  return fill_with({static_cast<std::size_t>(n)}, options, [](std::size_t i) { return static_cast<double>(i); });
}

Tensor arange(double start, double end, double step, TensorOptions options) {
  if (step == 0.0 || !std::isfinite(step)) throw std::invalid_argument("arange: step must be finite and non-zero");
  const double count = std::ceil((end - start) / step);
  const std::size_t n = count > 0 ? static_cast<std::size_t>(count) : 0;
  return fill_with({n}, options, [=](std::size_t i) { return start + step * static_cast<double>(i); });
}

Tensor from_vector(const std::vector<double>& values, const Shape& shape, TensorOptions options) {
  if (values.size() != shape_numel(shape)) {
    throw std::invalid_argument("from_vector: " + std::to_string(values.size()) + " values for shape " +
                                shape_str(shape) + " (" + std::to_string(shape_numel(shape)) + " elements)");
  }
  return fill_with(shape, options, [&](std::size_t i) { return values[i]; });
}

Tensor from_indices(const std::vector<std::int64_t>& values, const Shape& shape) {
  if (values.size() != shape_numel(shape)) {
    throw std::invalid_argument("from_indices: " + std::to_string(values.size()) + " values for shape " +
                                shape_str(shape));
  }
  Tensor t = make_tensor(shape, DType::int64, false);
  std::memcpy(t.data<std::int64_t>(), values.data(), values.size() * sizeof(std::int64_t));
  return t;
}

Tensor from_mask(const std::vector<bool>& values, const Shape& shape) {
  if (values.size() != shape_numel(shape)) {
    throw std::invalid_argument("from_mask: " + std::to_string(values.size()) + " values for shape " +
                                shape_str(shape));
  }
  return fill_with(shape, DType::boolean, [&](std::size_t i) { return values[i] ? 1.0 : 0.0; });
}

Tensor randn(const Shape& shape, Generator& gen, TensorOptions options, double mean, double stddev) {
  return fill_with(shape, options, [&](std::size_t) { return mean + stddev * gen.next_normal(); });
}

Tensor uniform(const Shape& shape, Generator& gen, double low, double high, TensorOptions options) {
  return fill_with(shape, options, [&](std::size_t) { return low + (high - low) * gen.next_double(); });
}

Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), t.dtype()); }
Tensor ones_like(const Tensor& t) { return ones(t.shape(), t.dtype()); }

}  // namespace attnlab
