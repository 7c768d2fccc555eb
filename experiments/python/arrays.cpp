#include "experiments/python/arrays.hpp"

#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>

namespace attnlab::python {
namespace {

template <class T>
py::array view_of(const Tensor& t) {
  std::vector<py::ssize_t> shape, strides;
  for (std::size_t d : t.shape()) shape.push_back(static_cast<py::ssize_t>(d));
  py::ssize_t stride = sizeof(T);
  strides.assign(shape.size(), 0);
  for (std::size_t i = shape.size(); i-- > 0;) strides[i] = stride, stride *= shape[i];
  // The capsule owns a tensor handle: the storage lives while the array (or a view of it) does.
  const py::capsule owner(new Tensor(t), [](void* p) { delete static_cast<Tensor*>(p); });
  return py::array(py::dtype::of<T>(), shape, strides, t.data<T>(), owner);
}

std::string shape_text(const py::array& a) {
  std::string text = "[";
  for (py::ssize_t i = 0; i < a.ndim(); ++i) text += (i ? ", " : "") + std::to_string(a.shape(i));
  return text + "]";
}

Shape shape_of(const py::array& a) {
  Shape s;
  for (py::ssize_t i = 0; i < a.ndim(); ++i) s.push_back(static_cast<std::size_t>(a.shape(i)));
  return s;
}

// The array copied into a new tensor of `dtype` (the array already holds T, C-contiguous).
template <class T>
Tensor copy_in(const py::array& a, DType dtype) {
  const auto c = py::array_t<T, py::array::c_style | py::array::forcecast>::ensure(a);
  Tensor t = empty(shape_of(c), dtype);
  if (c.size()) std::memcpy(t.data<T>(), c.data(), static_cast<std::size_t>(c.size()) * sizeof(T));
  return t;
}

// Integers as int64: an unsigned 64-bit value above int64's range would wrap to a negative id and be
// reported as one, so it is refused here with its own value.
Tensor integers_in(const py::array& a, const std::string& what) {
  if (a.dtype().kind() == 'u' && a.itemsize() == 8) {
    const auto c = py::array_t<std::uint64_t, py::array::c_style | py::array::forcecast>::ensure(a);
    const std::uint64_t* v = c.data();
    for (py::ssize_t i = 0; i < c.size(); ++i) {
      if (v[i] > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
        throw py::value_error(what + ": " + std::to_string(v[i]) + " at flat position " + std::to_string(i) + " is beyond int64's range");
      }
    }
  }
  return copy_in<std::int64_t>(a, DType::int64);
}

}  // namespace

py::array to_numpy(const Tensor& t) {
  if (!t.defined()) throw std::invalid_argument("to_numpy: an undefined tensor");
  switch (t.dtype()) {
    case DType::float32: return view_of<float>(t);
    case DType::float64: return view_of<double>(t);
    case DType::int64: return view_of<std::int64_t>(t);
    case DType::boolean: return view_of<bool>(t);
  }
  throw std::invalid_argument("to_numpy: unknown dtype");
}

Tensor from_numpy(const py::handle& value, Want want, const std::string& what) {
  const py::array a = py::array::ensure(value);
  if (!a) throw py::value_error(what + " must be an array (a numpy array or nested lists), got " + std::string(py::str(py::type::of(value))));
  const char kind = a.dtype().kind();  // 'i' 'u' integers, 'f' floats, 'b' bool
  switch (want) {
    case Want::tokens:
      if (a.ndim() != 2 || (kind != 'i' && kind != 'u')) {
        throw py::value_error(what + " must be token ids as integers [batch, tokens], got " + std::string(py::str(a.dtype())) + " " + shape_text(a));
      }
      return integers_in(a, what);
    case Want::images:
      if (a.ndim() != 4 || (kind != 'f' && kind != 'i' && kind != 'u')) {
        throw py::value_error(what + " must be images as numbers [batch, channels, height, width], got " + std::string(py::str(a.dtype())) +
                              " " + shape_text(a));
      }
      return copy_in<float>(a, DType::float32);
    case Want::mask:
      if (a.ndim() != 2 || kind != 'b') {
        throw py::value_error(what + " must be a bool array [batch, tokens] (True where padded), got " + std::string(py::str(a.dtype())) + " " +
                              shape_text(a));
      }
      return copy_in<bool>(a, DType::boolean);
    case Want::integers:
      if (kind != 'i' && kind != 'u') throw py::value_error(what + " must hold integers, got " + std::string(py::str(a.dtype())));
      return integers_in(a, what);
    case Want::floating:
      if (kind == 'f' && a.itemsize() == 8) return copy_in<double>(a, DType::float64);
      if (kind == 'f' || kind == 'i' || kind == 'u') return copy_in<float>(a, DType::float32);
      throw py::value_error(what + " must hold numbers, got " + std::string(py::str(a.dtype())));
  }
  throw py::value_error(what + ": unknown kind of argument");
}

py::object to_python(const YAML::Node& node) {
  if (node.IsMap()) {
    py::dict d;
    for (const auto& kv : node) d[py::str(kv.first.Scalar())] = to_python(kv.second);
    return std::move(d);
  }
  if (node.IsSequence()) {
    py::list l;
    for (const auto& item : node) l.append(to_python(item));
    return std::move(l);
  }
  if (!node.IsScalar()) return py::none();
  const std::string text = node.Scalar();
  if (node.Tag() != "!") {  // unquoted: a bool, an integer or a number when it reads as one
    bool b = false;
    long long i = 0;
    double x = 0;
    if (YAML::convert<bool>::decode(node, b) && (text == "true" || text == "false")) return py::bool_(b);
    if (YAML::convert<long long>::decode(node, i)) return py::int_(i);
    if (YAML::convert<double>::decode(node, x)) return py::float_(x);
  }
  return py::str(text);
}

YAML::Node to_yaml(const py::handle& value, const std::string& what) {
  if (py::isinstance<py::dict>(value)) {
    YAML::Node map(YAML::NodeType::Map);
    for (const auto& kv : py::reinterpret_borrow<py::dict>(value)) {
      const std::string key = py::str(kv.first);
      map[key] = to_yaml(kv.second, what + "." + key);
    }
    return map;
  }
  if (py::isinstance<py::list>(value) || py::isinstance<py::tuple>(value)) {
    YAML::Node seq(YAML::NodeType::Sequence);
    std::size_t i = 0;
    for (const auto& item : value) seq.push_back(to_yaml(item, what + "[" + std::to_string(i++) + "]"));
    return seq;
  }
  if (py::isinstance<py::bool_>(value)) return YAML::Node(value.cast<bool>() ? "true" : "false");
  if (py::isinstance<py::int_>(value)) return YAML::Node(std::to_string(value.cast<long long>()));
  if (py::isinstance<py::float_>(value)) return YAML::Node(std::string(py::str(py::repr(value))));
  if (py::isinstance<py::str>(value)) return YAML::Node(value.cast<std::string>());
  if (value.is_none()) return YAML::Node();
  throw py::value_error(what + " must be a dict, list, bool, number or str, got " + std::string(py::str(py::type::of(value))));
}

}  // namespace attnlab::python
