// Reductions over all elements or one axis. An axis reduction views x as [outer, n, inner] (n the
// reduced axis) so the inner loop runs over contiguous memory.
#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "framework/ops/ops.hpp"

namespace attnlab {
namespace {

struct AxisView {
  std::size_t outer = 1, n = 1, inner = 1;
  Shape out_shape;        // without the axis, or with 1 there when keepdim
  Shape keepdim_shape;    // always with 1 at the axis (for broadcasting gradients back)
};

AxisView axis_view(const Shape& shape, std::int64_t axis, bool keepdim, const char* op) {
  const std::size_t a = normalize_axis(axis, shape.size(), op);
  AxisView v;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i < a) v.outer *= shape[i];
    if (i > a) v.inner *= shape[i];
    if (i != a || keepdim) v.out_shape.push_back(i == a ? 1 : shape[i]);
    v.keepdim_shape.push_back(i == a ? 1 : shape[i]);
  }
  v.n = shape[a];
  return v;
}

Tensor reshape_to(const Tensor& t, const Shape& shape) {
  std::vector<std::int64_t> s(shape.begin(), shape.end());
  return reshape(t, s);
}

// Maxima along an axis with the index of the first maximum (NaN propagates as the maximum).
template <class T>
void max_along(const T* x, const AxisView& v, T* out, std::int64_t* index) {
  for (std::size_t o = 0; o < v.outer; ++o) {
    for (std::size_t i = 0; i < v.inner; ++i) {
      const T* row = x + o * v.n * v.inner + i;
      T best = row[0];
      std::size_t best_j = 0;
      for (std::size_t j = 1; j < v.n; ++j) {
        const T value = row[j * v.inner];
        if (value > best || (std::isnan(value) && !std::isnan(best))) {
          best = value;
          best_j = j;
        }
      }
      out[o * v.inner + i] = best;
      index[o * v.inner + i] = static_cast<std::int64_t>(best_j);
    }
  }
}

}  // namespace

Tensor sum(const Tensor& x) {
  Tensor out = empty({}, x.dtype());
  dispatch_floating(x.dtype(), "sum", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* p = x.data<T>();
    T acc = 0;
    const std::size_t n = x.numel();
#pragma omp simd reduction(+ : acc)
    for (std::size_t i = 0; i < n; ++i) acc += p[i];
    *out.data<T>() = acc;
  });
  if (needs_grad({&x})) {
    record(out, "sum", {x}, [shape = x.shape()](const Tensor& g) { return std::vector<Tensor>{broadcast_to(g, shape)}; });
  }
  return out;
}

Tensor sum(const Tensor& x, std::int64_t axis, bool keepdim) {
  const AxisView v = axis_view(x.shape(), axis, keepdim, "sum");
  Tensor out = zeros(v.out_shape, x.dtype());
  dispatch_floating(x.dtype(), "sum", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* p = x.data<T>();
    T* o = out.data<T>();
    for (std::size_t b = 0; b < v.outer; ++b) {
      T* orow = o + b * v.inner;
      for (std::size_t j = 0; j < v.n; ++j) {
        const T* row = p + (b * v.n + j) * v.inner;
        for (std::size_t i = 0; i < v.inner; ++i) orow[i] += row[i];
      }
    }
  });
  if (needs_grad({&x})) {
    record(out, "sum_axis", {x}, [shape = x.shape(), kd = v.keepdim_shape](const Tensor& g) {
      return std::vector<Tensor>{broadcast_to(reshape_to(g, kd), shape)};
    });
  }
  return out;
}

Tensor mean(const Tensor& x) {
  if (x.numel() == 0) throw std::invalid_argument("mean: the tensor is empty");
  return mul(sum(x), 1.0 / static_cast<double>(x.numel()));
}

Tensor mean(const Tensor& x, std::int64_t axis, bool keepdim) {
  const std::size_t n = x.shape()[normalize_axis(axis, x.dim(), "mean")];
  if (n == 0) throw std::invalid_argument("mean: the reduced axis is empty");
  return mul(sum(x, axis, keepdim), 1.0 / static_cast<double>(n));
}

Tensor max(const Tensor& x) {
  if (x.numel() == 0) throw std::invalid_argument("max: the tensor is empty");
  Tensor flat = reshape(x.detach(), {static_cast<std::int64_t>(x.numel())});
  const AxisView v = axis_view(flat.shape(), 0, false, "max");
  Tensor out = empty({}, x.dtype());
  std::int64_t index = 0;
  dispatch_floating(x.dtype(), "max", [&](auto tag) {
    using T = typename decltype(tag)::type;
    max_along(flat.data<T>(), v, out.data<T>(), &index);
  });
  if (needs_grad({&x})) {
    record(out, "max", {x}, [shape = x.shape(), index](const Tensor& g) {
      Tensor grad = zeros(shape, g.dtype());
      dispatch_floating(g.dtype(), "max_backward", [&](auto tag) {
        using T = typename decltype(tag)::type;
        grad.data<T>()[index] = *g.data<T>();
      });
      return std::vector<Tensor>{grad};
    });
  }
  return out;
}

Tensor max(const Tensor& x, std::int64_t axis, bool keepdim) {
  const AxisView v = axis_view(x.shape(), axis, keepdim, "max");
  if (v.n == 0) throw std::invalid_argument("max: the reduced axis is empty");
  Tensor out = empty(v.out_shape, x.dtype());
  std::vector<std::int64_t> index(v.outer * v.inner);
  dispatch_floating(x.dtype(), "max", [&](auto tag) {
    using T = typename decltype(tag)::type;
    max_along(x.data<T>(), v, out.data<T>(), index.data());
  });
  if (needs_grad({&x})) {
    record(out, "max_axis", {x}, [shape = x.shape(), v, index = std::move(index)](const Tensor& g) {
      Tensor grad = zeros(shape, g.dtype());
      dispatch_floating(g.dtype(), "max_backward", [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* pg = g.data<T>();
        T* px = grad.data<T>();
        for (std::size_t o = 0; o < v.outer; ++o)
          for (std::size_t i = 0; i < v.inner; ++i) {
            const std::size_t k = o * v.inner + i;
            px[(o * v.n + static_cast<std::size_t>(index[k])) * v.inner + i] = pg[k];
          }
      });
      return std::vector<Tensor>{grad};
    });
  }
  return out;
}

Tensor argmax(const Tensor& x, std::int64_t axis, bool keepdim) {
  const AxisView v = axis_view(x.shape(), axis, keepdim, "argmax");
  if (v.n == 0) throw std::invalid_argument("argmax: the reduced axis is empty");
  Tensor index = empty(v.out_shape, DType::int64);
  dispatch_floating(x.dtype(), "argmax", [&](auto tag) {
    using T = typename decltype(tag)::type;
    std::vector<T> values(v.outer * v.inner);
    max_along(x.data<T>(), v, values.data(), index.data<std::int64_t>());
  });
  return index;
}

Tensor var(const Tensor& x, std::int64_t axis, bool keepdim, bool unbiased) {
  const AxisView v = axis_view(x.shape(), axis, keepdim, "var");
  const double divisor = static_cast<double>(v.n) - (unbiased ? 1.0 : 0.0);
  if (divisor <= 0) {
    throw std::invalid_argument("var: needs at least " + std::to_string(unbiased ? 2 : 1) +
                                " elements along the axis, got " + std::to_string(v.n));
  }
  Tensor out = empty(v.out_shape, x.dtype());
  Tensor centered = empty(x.shape(), x.dtype());  // x - mean, saved for backward
  dispatch_floating(x.dtype(), "var", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* p = x.data<T>();
    T* c = centered.data<T>();
    T* o = out.data<T>();
    std::vector<T> mu(v.inner);
    for (std::size_t b = 0; b < v.outer; ++b) {
      std::fill(mu.begin(), mu.end(), T(0));
      for (std::size_t j = 0; j < v.n; ++j)
        for (std::size_t i = 0; i < v.inner; ++i) mu[i] += p[(b * v.n + j) * v.inner + i];
      for (std::size_t i = 0; i < v.inner; ++i) {
        mu[i] /= static_cast<T>(v.n);
        o[b * v.inner + i] = 0;
      }
      for (std::size_t j = 0; j < v.n; ++j)
        for (std::size_t i = 0; i < v.inner; ++i) {
          const std::size_t k = (b * v.n + j) * v.inner + i;
          c[k] = p[k] - mu[i];
          o[b * v.inner + i] += c[k] * c[k];
        }
      for (std::size_t i = 0; i < v.inner; ++i) o[b * v.inner + i] /= static_cast<T>(divisor);
    }
  });
  if (needs_grad({&x})) {
    // d var / d x_j = 2 (x_j - mean) / divisor (the mean's own dependence cancels out).
    record(out, "var", {x}, [centered, kd = v.keepdim_shape, divisor](const Tensor& g) {
      return std::vector<Tensor>{mul(mul(centered, reshape_to(g, kd)), 2.0 / divisor)};
    });
  }
  return out;
}

}  // namespace attnlab
