// Shape ops: reshape shares storage; permute, slice and concat copy with raw strided loops whose inner
// run is contiguous wherever the layout allows. Also the differentiable dtype conversion Tensor::to.
#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "framework/ops/broadcast.hpp"
#include "framework/ops/ops.hpp"
#include "framework/ops/parallel.hpp"

namespace attnlab {
namespace {

std::vector<std::int64_t> as_signed(const Shape& s) { return std::vector<std::int64_t>(s.begin(), s.end()); }

// Byte-wise copy of [outer, n_src, inner] rows picked along the middle axis (any dtype).
void copy_rows(const std::uint8_t* src, std::uint8_t* dst, std::size_t outer, std::size_t src_n, std::size_t dst_n,
               std::size_t dst_start, std::size_t inner_bytes, std::size_t src_start, std::size_t count,
               std::size_t src_step) {
  for (std::size_t o = 0; o < outer; ++o) {
    for (std::size_t j = 0; j < count; ++j) {
      std::memcpy(dst + ((o * dst_n) + dst_start + j) * inner_bytes,
                  src + ((o * src_n) + src_start + j * src_step) * inner_bytes, inner_bytes);
    }
  }
}

using detail::AxisSplit;
using detail::split_at;

template <class T>
void permute_copy(const T* src, T* dst, const Shape& in_shape, const std::vector<std::size_t>& dims) {
  const std::size_t rank = in_shape.size();
  const auto in_strides = contiguous_strides(in_shape);
  Shape out_shape(rank);
  std::vector<std::size_t> strides(rank);  // input stride of each output axis
  for (std::size_t i = 0; i < rank; ++i) {
    out_shape[i] = in_shape[dims[i]];
    strides[i] = in_strides[dims[i]];
  }
  const std::size_t total = shape_numel(out_shape);
  if (total == 0) return;
  if (rank == 0) {
    dst[0] = src[0];
    return;
  }
  const std::size_t inner = out_shape[rank - 1];
  const std::size_t inner_stride = strides[rank - 1];
  std::vector<std::size_t> counter(rank - 1, 0);
  std::size_t offset = 0;
  for (std::size_t base = 0; base < total; base += inner) {
    if (inner_stride == 1) {
      std::memcpy(dst + base, src + offset, inner * sizeof(T));
    } else {
      for (std::size_t i = 0; i < inner; ++i) dst[base + i] = src[offset + i * inner_stride];
    }
    for (std::size_t a = rank - 1; a-- > 0;) {
      offset += strides[a];
      if (++counter[a] < out_shape[a]) break;
      offset -= strides[a] * out_shape[a];
      counter[a] = 0;
    }
  }
}

}  // namespace

Tensor reshape(const Tensor& x, const std::vector<std::int64_t>& shape) {
  Shape out_shape(shape.size());
  std::size_t known = 1;
  int inferred = -1;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      if (inferred >= 0) throw std::invalid_argument("reshape: only one dimension can be -1");
      inferred = static_cast<int>(i);
    } else if (shape[i] < 0) {
      throw std::invalid_argument("reshape: invalid dimension " + std::to_string(shape[i]));
    } else {
      out_shape[i] = static_cast<std::size_t>(shape[i]);
      known *= out_shape[i];
    }
  }
  if (inferred >= 0) {
    if (known == 0 || x.numel() % known != 0) {
      throw std::invalid_argument("reshape: cannot infer -1 when reshaping " + shape_str(x.shape()) + " (" +
                                  std::to_string(x.numel()) + " elements)");
    }
    out_shape[static_cast<std::size_t>(inferred)] = x.numel() / known;
  }
  if (shape_numel(out_shape) != x.numel()) {
    throw std::invalid_argument("reshape: cannot reshape " + shape_str(x.shape()) + " (" + std::to_string(x.numel()) +
                                " elements) into " + shape_str(out_shape));
  }
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = x.storage();
  impl->shape = out_shape;
  Tensor out(std::move(impl));
  if (needs_grad({&x})) {
    record(out, "reshape", {x}, [in = as_signed(x.shape())](const Tensor& g) { return std::vector<Tensor>{reshape(g, in)}; });
  }
  return out;
}

Tensor flatten(const Tensor& x, std::int64_t start_axis, std::int64_t end_axis) {
  if (x.dim() == 0) return reshape(x, {1});
  const std::size_t s = normalize_axis(start_axis, x.dim(), "flatten");
  const std::size_t e = normalize_axis(end_axis, x.dim(), "flatten");
  if (s > e) throw std::invalid_argument("flatten: start_axis comes after end_axis");
  std::vector<std::int64_t> shape;
  std::int64_t merged = 1;
  for (std::size_t i = 0; i < x.dim(); ++i) {
    if (i < s || i > e) {
      shape.push_back(static_cast<std::int64_t>(x.shape()[i]));
    } else {
      merged *= static_cast<std::int64_t>(x.shape()[i]);
      if (i == e) shape.push_back(merged);
    }
  }
  return reshape(x, shape);
}

Tensor unsqueeze(const Tensor& x, std::int64_t axis) {
  const std::size_t a = normalize_axis(axis, x.dim() + 1, "unsqueeze");
  std::vector<std::int64_t> shape = as_signed(x.shape());
  shape.insert(shape.begin() + static_cast<std::ptrdiff_t>(a), 1);
  return reshape(x, shape);
}

Tensor squeeze(const Tensor& x, std::int64_t axis) {
  const std::size_t a = normalize_axis(axis, x.dim(), "squeeze");
  if (x.shape()[a] != 1) {
    throw std::invalid_argument("squeeze: axis " + std::to_string(axis) + " of shape " + shape_str(x.shape()) +
                                " has size " + std::to_string(x.shape()[a]) + ", not 1");
  }
  std::vector<std::int64_t> shape = as_signed(x.shape());
  shape.erase(shape.begin() + static_cast<std::ptrdiff_t>(a));
  return reshape(x, shape);
}

Tensor permute(const Tensor& x, const std::vector<std::int64_t>& dims) {
  const std::size_t rank = x.dim();
  if (dims.size() != rank) {
    throw std::invalid_argument("permute: " + std::to_string(dims.size()) + " axes given for a tensor of rank " +
                                std::to_string(rank));
  }
  std::vector<std::size_t> d(rank);
  std::vector<bool> seen(rank, false);
  for (std::size_t i = 0; i < rank; ++i) {
    d[i] = normalize_axis(dims[i], rank, "permute");
    if (seen[d[i]]) throw std::invalid_argument("permute: axis " + std::to_string(dims[i]) + " appears twice");
    seen[d[i]] = true;
  }
  Shape out_shape(rank);
  for (std::size_t i = 0; i < rank; ++i) out_shape[i] = x.shape()[d[i]];
  Tensor out = empty(out_shape, x.dtype());
  switch (element_size(x.dtype())) {
    case 8: permute_copy(static_cast<const std::uint64_t*>(x.storage()->data()),
                         static_cast<std::uint64_t*>(out.storage()->data()), x.shape(), d); break;
    case 4: permute_copy(static_cast<const std::uint32_t*>(x.storage()->data()),
                         static_cast<std::uint32_t*>(out.storage()->data()), x.shape(), d); break;
    default: permute_copy(static_cast<const std::uint8_t*>(x.storage()->data()),
                          static_cast<std::uint8_t*>(out.storage()->data()), x.shape(), d); break;
  }
  if (needs_grad({&x})) {
    std::vector<std::int64_t> inverse(rank);
    for (std::size_t i = 0; i < rank; ++i) inverse[d[i]] = static_cast<std::int64_t>(i);
    record(out, "permute", {x}, [inverse](const Tensor& g) { return std::vector<Tensor>{permute(g, inverse)}; });
  }
  return out;
}

namespace {

// Between [B, T, P, H, D] (`packed`) and P tensors [B, H, T, D] (`parts`; a null part reads as zeros when
// packing), one row of D elements at a time. Legend: B batch, T tokens, P parts, H heads, D head dim.
template <class T>
void heads_copy(T* packed, std::vector<T*>& parts, std::size_t b, std::size_t t, std::size_t h, std::size_t d, bool to_parts) {
  const std::size_t p = parts.size();
  parallel_for(b * t, std::max<std::size_t>(1, 4096 / std::max<std::size_t>(p * h * d, 1)), [&](std::size_t r0, std::size_t r1) {
    for (std::size_t r = r0; r < r1; ++r) {
      const std::size_t bi = r / t, ti = r % t;
      for (std::size_t pi = 0; pi < p; ++pi)
        for (std::size_t hi = 0; hi < h; ++hi) {
          T* row = packed + ((r * p + pi) * h + hi) * d;
          T* part = parts[pi] ? parts[pi] + ((bi * h + hi) * t + ti) * d : nullptr;
          if (to_parts) {
            std::copy(row, row + d, part);
          } else if (part) {
            std::copy(part, part + d, row);
          } else {
            std::fill(row, row + d, T(0));
          }
        }
    }
  });
}

}  // namespace

std::vector<Tensor> split_heads(const Tensor& x, std::size_t parts, std::size_t heads) {
  if (x.dim() != 3 || parts == 0 || heads == 0 || x.size(2) % (parts * heads) != 0) {
    throw std::invalid_argument("split_heads: expected [B, T, " + std::to_string(parts) + " x " + std::to_string(heads) +
                                " x head_dim], got " + shape_str(x.shape()));
  }
  const std::size_t b = x.size(0), t = x.size(1), d = x.size(2) / (parts * heads);
  std::vector<Tensor> out;
  for (std::size_t p = 0; p < parts; ++p) out.push_back(empty({b, heads, t, d}, x.dtype()));
  dispatch_floating(x.dtype(), "split_heads", [&](auto tag) {
    using T = typename decltype(tag)::type;
    std::vector<T*> to;
    for (Tensor& o : out) to.push_back(o.data<T>());
    heads_copy(const_cast<T*>(x.data<T>()), to, b, t, heads, d, true);  // reads x only
  });
  if (needs_grad({&x})) {
    record(out, "split_heads", {x}, [shape = x.shape(), dtype = x.dtype(), b, t, heads, d](const std::vector<Tensor>& g) {
      Tensor grad = empty(shape, dtype);
      dispatch_floating(grad.dtype(), "split_heads backward", [&](auto tag) {
        using T = typename decltype(tag)::type;
        std::vector<T*> from;
        for (const Tensor& part : g) from.push_back(part.defined() ? const_cast<T*>(part.data<T>()) : nullptr);
        heads_copy(grad.data<T>(), from, b, t, heads, d, false);
      });
      return std::vector<Tensor>{grad};
    });
  }
  return out;
}

Tensor transpose(const Tensor& x, std::int64_t axis0, std::int64_t axis1) {
  const std::size_t a = normalize_axis(axis0, x.dim(), "transpose");
  const std::size_t b = normalize_axis(axis1, x.dim(), "transpose");
  std::vector<std::int64_t> dims(x.dim());
  for (std::size_t i = 0; i < x.dim(); ++i) dims[i] = static_cast<std::int64_t>(i);
  std::swap(dims[a], dims[b]);
  return permute(x, dims);
}

Tensor slice(const Tensor& x, std::int64_t axis, std::int64_t start, std::int64_t end, std::int64_t step) {
  const std::size_t a = normalize_axis(axis, x.dim(), "slice");
  if (step <= 0) throw std::invalid_argument("slice: step must be positive, got " + std::to_string(step));
  const auto n = static_cast<std::int64_t>(x.shape()[a]);
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<std::int64_t>(start, 0, n);
  end = std::clamp<std::int64_t>(end, 0, n);
  const std::size_t count = end > start ? static_cast<std::size_t>((end - start + step - 1) / step) : 0;
  if (start == 0 && step == 1 && count == static_cast<std::size_t>(n)) return x;  // the whole axis: no copy
  Shape out_shape = x.shape();
  out_shape[a] = count;
  Tensor out = empty(out_shape, x.dtype());
  const AxisSplit s = split_at(x.shape(), a);
  const std::size_t inner_bytes = s.inner * element_size(x.dtype());
  copy_rows(static_cast<const std::uint8_t*>(x.storage()->data()), static_cast<std::uint8_t*>(out.storage()->data()),
            s.outer, s.n, count, 0, inner_bytes, static_cast<std::size_t>(start), count, static_cast<std::size_t>(step));
  if (needs_grad({&x})) {
    record(out, "slice", {x}, [shape = x.shape(), a, start, step, count](const Tensor& g) {
      Tensor grad = zeros(shape, g.dtype());
      const AxisSplit s = split_at(shape, a);
      const std::size_t inner_bytes = s.inner * element_size(g.dtype());
      // Scatter the rows back: row j of g goes to row start + j * step.
      for (std::size_t o = 0; o < s.outer; ++o)
        for (std::size_t j = 0; j < count; ++j)
          std::memcpy(static_cast<std::uint8_t*>(grad.storage()->data()) +
                          (o * s.n + static_cast<std::size_t>(start) + j * static_cast<std::size_t>(step)) * inner_bytes,
                      static_cast<const std::uint8_t*>(g.storage()->data()) + (o * count + j) * inner_bytes,
                      inner_bytes);
      return std::vector<Tensor>{grad};
    });
  }
  return out;
}

Tensor concat(const std::vector<Tensor>& tensors, std::int64_t axis) {
  if (tensors.empty()) throw std::invalid_argument("concat: no tensors given");
  const Tensor& first = tensors[0];
  const std::size_t a = normalize_axis(axis, first.dim(), "concat");
  Shape out_shape = first.shape();
  out_shape[a] = 0;
  for (std::size_t t = 0; t < tensors.size(); ++t) {
    const Tensor& x = tensors[t];
    bool compatible = x.dim() == first.dim() && x.dtype() == first.dtype();
    for (std::size_t i = 0; compatible && i < x.dim(); ++i) compatible = i == a || x.shape()[i] == first.shape()[i];
    if (!compatible) {
      throw std::invalid_argument("concat: tensor " + std::to_string(t) + " has shape " + shape_str(x.shape()) + " (" +
                                  dtype_name(x.dtype()) + "), incompatible with " + shape_str(first.shape()) + " (" +
                                  dtype_name(first.dtype()) + ") along axis " + std::to_string(a));
    }
    out_shape[a] += x.shape()[a];
  }
  Tensor out = empty(out_shape, first.dtype());
  const AxisSplit s = split_at(out_shape, a);
  const std::size_t inner_bytes = s.inner * element_size(first.dtype());
  std::size_t at = 0;
  std::vector<std::int64_t> bounds{0};
  for (const Tensor& x : tensors) {
    const std::size_t n = x.shape()[a];
    copy_rows(static_cast<const std::uint8_t*>(x.storage()->data()), static_cast<std::uint8_t*>(out.storage()->data()),
              s.outer, n, s.n, at, inner_bytes, 0, n, 1);
    at += n;
    bounds.push_back(static_cast<std::int64_t>(at));
  }
  bool any = false;
  for (const Tensor& x : tensors) any |= needs_grad({&x});
  if (any) {
    record(out, "concat", tensors, [bounds, a](const Tensor& g) {
      std::vector<Tensor> grads;
      for (std::size_t i = 0; i + 1 < bounds.size(); ++i)
        grads.push_back(slice(g, static_cast<std::int64_t>(a), bounds[i], bounds[i + 1]));
      return grads;
    });
  }
  return out;
}

Tensor Tensor::to(DType dtype) const {
  check_defined("to");
  if (dtype == this->dtype()) return *this;
  Tensor out = empty(shape(), dtype);
  const std::size_t n = numel();
  auto convert = [&](auto* dst) {
    using D = std::remove_pointer_t<decltype(dst)>;
    const void* src = storage()->data();
    switch (this->dtype()) {
      case DType::float32: for (std::size_t i = 0; i < n; ++i) dst[i] = static_cast<D>(static_cast<const float*>(src)[i]); break;
      case DType::float64: for (std::size_t i = 0; i < n; ++i) dst[i] = static_cast<D>(static_cast<const double*>(src)[i]); break;
      case DType::int64: for (std::size_t i = 0; i < n; ++i) dst[i] = static_cast<D>(static_cast<const std::int64_t*>(src)[i]); break;
      case DType::boolean: for (std::size_t i = 0; i < n; ++i) dst[i] = static_cast<D>(static_cast<const std::uint8_t*>(src)[i]); break;
    }
  };
  switch (dtype) {
    case DType::float32: convert(static_cast<float*>(out.storage()->data())); break;
    case DType::float64: convert(static_cast<double*>(out.storage()->data())); break;
    case DType::int64: convert(static_cast<std::int64_t*>(out.storage()->data())); break;
    case DType::boolean: {
      // Non-zero is true (a plain cast would turn 0.5 into false).
      Tensor wide = to(DType::float64);
      const double* src = wide.data<double>();
      bool* dst = out.data<bool>();
      for (std::size_t i = 0; i < n; ++i) dst[i] = src[i] != 0.0;
      break;
    }
  }
  if (is_floating(dtype) && needs_grad({this})) {
    record(out, "to", {*this}, [from = this->dtype()](const Tensor& g) { return std::vector<Tensor>{g.to(from)}; });
  }
  return out;
}

}  // namespace attnlab
