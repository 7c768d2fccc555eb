// Indexing ops: index_select, embedding lookup, gather; each backward scatter-adds into a zero gradient
// (repeated indices accumulate). one_hot builds targets and is not differentiable.
#include <cstring>
#include <stdexcept>

#include "framework/ops/broadcast.hpp"
#include "framework/ops/ops.hpp"

namespace attnlab {
namespace {

void check_index_dtype(const Tensor& index, const char* op) {
  if (index.dtype() != DType::int64) {
    throw std::invalid_argument(std::string(op) + ": indices must be an int64 tensor, got " + dtype_name(index.dtype()));
  }
}

// Every index in [0, limit), or an error naming the first one that is not.
void check_range(const Tensor& index, std::size_t limit, const char* op, const char* what) {
  const std::int64_t* p = index.data<std::int64_t>();
  for (std::size_t i = 0, n = index.numel(); i < n; ++i) {
    if (p[i] < 0 || static_cast<std::size_t>(p[i]) >= limit) {
      throw std::out_of_range(std::string(op) + ": index " + std::to_string(p[i]) + " at position " + std::to_string(i) +
                              " is out of range for " + what + " of size " + std::to_string(limit));
    }
  }
}

using detail::AxisSplit;
using detail::split_at;

// out row (o, j) = x row (o, index[j]) over [outer, n, inner] blocks; `add` scatters the other way.
template <class T>
void select_rows(const T* src, T* dst, const AxisSplit& s, const std::int64_t* index, std::size_t count, bool scatter) {
  for (std::size_t o = 0; o < s.outer; ++o) {
    for (std::size_t j = 0; j < count; ++j) {
      const std::size_t row = static_cast<std::size_t>(index[j]);
      if (!scatter) {
        std::memcpy(dst + (o * count + j) * s.inner, src + (o * s.n + row) * s.inner, s.inner * sizeof(T));
      } else {
        T* d = dst + (o * s.n + row) * s.inner;
        const T* g = src + (o * count + j) * s.inner;
        for (std::size_t i = 0; i < s.inner; ++i) d[i] += g[i];
      }
    }
  }
}

}  // namespace

Tensor index_select(const Tensor& x, std::int64_t axis, const Tensor& index) {
  check_index_dtype(index, "index_select");
  if (index.dim() != 1) throw std::invalid_argument("index_select: the index must be 1-D, got " + shape_str(index.shape()));
  const std::size_t a = normalize_axis(axis, x.dim(), "index_select");
  check_range(index, x.shape()[a], "index_select", "the selected axis");
  Shape out_shape = x.shape();
  out_shape[a] = index.numel();
  Tensor out = empty(out_shape, x.dtype());
  const AxisSplit s = split_at(x.shape(), a);
  dispatch_floating(x.dtype(), "index_select", [&](auto tag) {
    using T = typename decltype(tag)::type;
    select_rows(x.data<T>(), out.data<T>(), s, index.data<std::int64_t>(), index.numel(), false);
  });
  if (needs_grad({&x})) {
    record(out, "index_select", {x}, [shape = x.shape(), s, index = index.clone()](const Tensor& g) {
      Tensor grad = zeros(shape, g.dtype());
      dispatch_floating(g.dtype(), "index_select_backward", [&](auto tag) {
        using T = typename decltype(tag)::type;
        select_rows(g.data<T>(), grad.data<T>(), s, index.data<std::int64_t>(), index.numel(), true);
      });
      return std::vector<Tensor>{grad};
    });
  }
  return out;
}

Tensor embedding(const Tensor& weight, const Tensor& ids) {
  check_index_dtype(ids, "embedding");
  if (weight.dim() != 2) throw std::invalid_argument("embedding: the weight must be [vocab, dim], got " + shape_str(weight.shape()));
  Shape out_shape = ids.shape();
  out_shape.push_back(weight.size(1));
  const Tensor flat_ids = reshape(ids, {static_cast<std::int64_t>(ids.numel())});
  check_range(flat_ids, weight.size(0), "embedding", "a vocabulary");
  Tensor rows = index_select(weight, 0, flat_ids);
  std::vector<std::int64_t> s(out_shape.begin(), out_shape.end());
  return reshape(rows, s);
}

Tensor gather(const Tensor& x, std::int64_t axis, const Tensor& index) {
  check_index_dtype(index, "gather");
  const std::size_t a = normalize_axis(axis, x.dim(), "gather");
  bool ok = index.dim() == x.dim();
  for (std::size_t i = 0; ok && i < x.dim(); ++i) ok = i == a || index.shape()[i] == x.shape()[i];
  if (!ok) {
    throw std::invalid_argument("gather: the index of shape " + shape_str(index.shape()) + " must match the input's shape " +
                                shape_str(x.shape()) + " on every axis but " + std::to_string(a));
  }
  check_range(index, x.shape()[a], "gather", "the gathered axis");
  Tensor out = empty(index.shape(), x.dtype());
  const AxisSplit sx = split_at(x.shape(), a);
  const AxisSplit si = split_at(index.shape(), a);
  dispatch_floating(x.dtype(), "gather", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* px = x.data<T>();
    const std::int64_t* pi = index.data<std::int64_t>();
    T* o = out.data<T>();
    for (std::size_t b = 0; b < si.outer; ++b)
      for (std::size_t j = 0; j < si.n; ++j)
        for (std::size_t i = 0; i < si.inner; ++i) {
          const std::size_t k = (b * si.n + j) * si.inner + i;
          o[k] = px[(b * sx.n + static_cast<std::size_t>(pi[k])) * sx.inner + i];
        }
  });
  if (needs_grad({&x})) {
    record(out, "gather", {x}, [shape = x.shape(), sx, si, index = index.clone()](const Tensor& g) {
      Tensor grad = zeros(shape, g.dtype());
      dispatch_floating(g.dtype(), "gather_backward", [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* pg = g.data<T>();
        const std::int64_t* pi = index.data<std::int64_t>();
        T* px = grad.data<T>();
        for (std::size_t b = 0; b < si.outer; ++b)
          for (std::size_t j = 0; j < si.n; ++j)
            for (std::size_t i = 0; i < si.inner; ++i) {
              const std::size_t k = (b * si.n + j) * si.inner + i;
              px[(b * sx.n + static_cast<std::size_t>(pi[k])) * sx.inner + i] += pg[k];
            }
      });
      return std::vector<Tensor>{grad};
    });
  }
  return out;
}

Tensor one_hot(const Tensor& ids, std::size_t classes, DType dtype) {
  check_index_dtype(ids, "one_hot");
  check_range(ids, classes, "one_hot", "a class count");
  Shape shape = ids.shape();
  shape.push_back(classes);
  Tensor out = zeros(shape, dtype);
  dispatch_floating(dtype, "one_hot", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* o = out.data<T>();
    const std::int64_t* p = ids.data<std::int64_t>();
    for (std::size_t i = 0, n = ids.numel(); i < n; ++i) o[i * classes + static_cast<std::size_t>(p[i])] = T(1);
  });
  return out;
}

}  // namespace attnlab
