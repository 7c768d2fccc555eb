// Elementwise ops. Binary ops broadcast with raw-pointer loops (see broadcast.hpp), which the compiler
// vectorises; transcendental unary ops and their backward formulas are xtensor expressions over the
// contiguous buffers, which xsimd vectorises (exp, log, tanh). GELU, written with xsimd directly, lives in
// gelu.cpp.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <stdexcept>

#include <xtensor/xadapt.hpp>
#include <xtensor/xmath.hpp>
#include <xtensor/xnoalias.hpp>

#include "framework/ops/broadcast.hpp"
#include "framework/ops/elementwise_common.hpp"
#include "framework/ops/ops.hpp"
#include "framework/ops/parallel.hpp"

namespace attnlab {
namespace {

using detail::check_same_dtype;
using detail::kGrain;

// A 1-D xtensor view over a tensor's contiguous buffer (no copy).
template <class T>
auto flat(T* data, std::size_t n) {
  return xt::adapt(data, n, xt::no_ownership(), std::array<std::size_t, 1>{n});
}

// True when `small` is `big` without some leading axes (a bias [C] against [B, T, C]), so `big` is
// rows of small.numel() elements, each combined with all of `small`.
bool is_trailing(const Shape& small, const Shape& big) {
  if (small.size() > big.size()) return false;
  return std::equal(small.begin(), small.end(), big.end() - static_cast<std::ptrdiff_t>(small.size()));
}

// out = op(a, b) with broadcasting; op is a scalar functor the compiler inlines into the row loops.
template <class Op>
Tensor broadcast_binary(const Tensor& a, const Tensor& b, const char* name, Op op) {
  check_same_dtype(a, b, name);
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), name);
  Tensor out = empty(shape, a.dtype());
  dispatch_floating(a.dtype(), name, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* o = out.data<T>();
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    if (a.shape() == b.shape()) {
      parallel_for(out.numel(), kGrain, [&](std::size_t i0, std::size_t i1) {
        for (std::size_t i = i0; i < i1; ++i) o[i] = op(pa[i], pb[i]);
      });
      return;
    }
    if (a.shape() == shape && is_trailing(b.shape(), shape) && b.numel() > 0) {
      // Rows of a against all of b (bias add, scaling by a per-channel vector).
      const std::size_t cols = b.numel(), rows = out.numel() / cols;
      parallel_for(rows, std::max<std::size_t>(1, kGrain / cols), [&](std::size_t r0, std::size_t r1) {
        for (std::size_t r = r0; r < r1; ++r)
          for (std::size_t i = 0; i < cols; ++i) o[r * cols + i] = op(pa[r * cols + i], pb[i]);
      });
      return;
    }
    detail::BroadcastLoop<3> loop(shape, {&shape, &a.shape(), &b.shape()});
    loop.run([&](const auto& off, std::size_t n, const auto& stride) {
      T* oo = o + off[0];
      const T* aa = pa + off[1];
      const T* bb = pb + off[2];
      if (stride[1] && stride[2]) {
        for (std::size_t i = 0; i < n; ++i) oo[i] = op(aa[i], bb[i]);
      } else if (stride[1]) {
        const T y = *bb;
        for (std::size_t i = 0; i < n; ++i) oo[i] = op(aa[i], y);
      } else if (stride[2]) {
        const T x = *aa;
        for (std::size_t i = 0; i < n; ++i) oo[i] = op(x, bb[i]);
      } else {
        const T v = op(*aa, *bb);
        for (std::size_t i = 0; i < n; ++i) oo[i] = v;
      }
    });
  });
  return out;
}

// out = f(X) for a floating tensor, f an xtensor expression of the flat view X.
template <class F>
Tensor map_unary(const Tensor& x, const char* name, F f) {
  Tensor out = empty(x.shape(), x.dtype());
  dispatch_floating(x.dtype(), name, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* px = x.data<T>();
    T* po = out.data<T>();
    parallel_for(x.numel(), kGrain, [&](std::size_t i0, std::size_t i1) {
      auto in = flat(px + i0, i1 - i0);
      auto o = flat(po + i0, i1 - i0);
      xt::noalias(o) = f(in, T{});
    });
  });
  return out;
}

// out = f(X, Y) for two floating tensors of one shape (backward formulas: X the saved value, Y the gradient).
template <class F>
Tensor map_binary(const Tensor& x, const Tensor& y, const char* name, F f) {
  Tensor out = empty(x.shape(), x.dtype());
  dispatch_floating(x.dtype(), name, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* px = x.data<T>();
    const T* py = y.data<T>();
    T* po = out.data<T>();
    parallel_for(x.numel(), kGrain, [&](std::size_t i0, std::size_t i1) {
      auto a = flat(px + i0, i1 - i0);
      auto b = flat(py + i0, i1 - i0);
      auto o = flat(po + i0, i1 - i0);
      xt::noalias(o) = f(a, b, T{});
    });
  });
  return out;
}

}  // namespace

// ---- sum_to: the reverse of broadcasting ----

Tensor sum_to(const Tensor& grad, const Shape& shape) {
  if (grad.shape() == shape) return grad;
  const Shape check = broadcast_shapes(shape, grad.shape(), "sum_to");
  if (check != grad.shape()) {
    throw std::invalid_argument("sum_to: shape " + shape_str(shape) + " does not broadcast to " + shape_str(grad.shape()));
  }
  Tensor out = zeros(shape, grad.dtype());
  dispatch_floating(grad.dtype(), "sum_to", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* g = grad.data<T>();
    T* o = out.data<T>();
    if (is_trailing(shape, grad.shape()) && out.numel() > 0) {
      // Sum of rows (a bias gradient): threads split the columns; each column is summed row after row.
      const std::size_t cols = out.numel(), rows = grad.numel() / cols;
      detail::sum_rows_parallel(const_cast<T*>(g), static_cast<const T*>(nullptr), rows, cols, o);  // g only read
      return;
    }
    detail::BroadcastLoop<2> loop(grad.shape(), {&grad.shape(), &shape});
    loop.run([&](const auto& off, std::size_t n, const auto& stride) {
      const T* gg = g + off[0];
      T* oo = o + off[1];
      if (stride[1]) {
        for (std::size_t i = 0; i < n; ++i) oo[i] += gg[i];
      } else {
        T acc = 0;
#pragma omp simd reduction(+ : acc)
        for (std::size_t i = 0; i < n; ++i) acc += gg[i];
        *oo += acc;
      }
    });
  });
  return out;
}

Tensor broadcast_to(const Tensor& x, const Shape& shape) {
  if (x.shape() == shape) return x;
  if (broadcast_shapes(x.shape(), shape, "broadcast_to") != shape) {
    throw std::invalid_argument("broadcast_to: shape " + shape_str(x.shape()) + " does not broadcast to " + shape_str(shape));
  }
  Tensor out = empty(shape, x.dtype());
  dispatch_floating(x.dtype(), "broadcast_to", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* px = x.data<T>();
    T* o = out.data<T>();
    detail::BroadcastLoop<2> loop(shape, {&shape, &x.shape()});
    loop.run([&](const auto& off, std::size_t n, const auto& stride) {
      if (stride[1]) {
        for (std::size_t i = 0; i < n; ++i) o[off[0] + i] = px[off[1] + i];
      } else {
        for (std::size_t i = 0; i < n; ++i) o[off[0] + i] = px[off[1]];
      }
    });
  });
  if (needs_grad({&x})) {
    record(out, "broadcast_to", {x}, [sx = x.shape()](const Tensor& g) { return std::vector<Tensor>{sum_to(g, sx)}; });
  }
  return out;
}

// ---- binary arithmetic ----

namespace {
// The backward engine's sums of two gradients (dst += src), split across the pool in ranges of kGrain
// elements: each element is still dst + src rounded once, so the bits are the loop's on any thread count.
void add_gradient_into(Tensor& dst, const Tensor& src) {
  detail::update_in_place(dst, src, "backward", [](auto d, auto s) { return d + s; });
}
const bool kGradientAdderInstalled = (set_gradient_adder(&add_gradient_into), true);
}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  Tensor out = broadcast_binary(a, b, "add", [](auto x, auto y) { return x + y; });
  if (needs_grad({&a, &b})) {
    record(out, "add", {a, b}, [sa = a.shape(), sb = b.shape()](const Tensor& g) {
      return std::vector<Tensor>{sum_to(g, sa), sum_to(g, sb)};
    });
  }
  return out;
}

Tensor sub(const Tensor& a, const Tensor& b) {
  Tensor out = broadcast_binary(a, b, "sub", [](auto x, auto y) { return x - y; });
  if (needs_grad({&a, &b})) {
    record(out, "sub", {a, b}, [sa = a.shape(), sb = b.shape(), rb = b.requires_grad()](const Tensor& g) {
      return std::vector<Tensor>{sum_to(g, sa), rb ? sum_to(neg(g), sb) : Tensor()};
    });
  }
  return out;
}

Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor out = broadcast_binary(a, b, "mul", [](auto x, auto y) { return x * y; });
  if (needs_grad({&a, &b})) {
    record(out, "mul", {a, b},
           [a = a.detach(), b = b.detach(), ra = a.requires_grad(), rb = b.requires_grad()](const Tensor& g) {
             return std::vector<Tensor>{ra ? sum_to(mul(g, b), a.shape()) : Tensor(),
                                        rb ? sum_to(mul(g, a), b.shape()) : Tensor()};
           });
  }
  return out;
}

Tensor div(const Tensor& a, const Tensor& b) {
  Tensor out = broadcast_binary(a, b, "div", [](auto x, auto y) { return x / y; });
  if (needs_grad({&a, &b})) {
    record(out, "div", {a, b},
           [a = a.detach(), b = b.detach(), ra = a.requires_grad(), rb = b.requires_grad()](const Tensor& g) {
             // d(a/b)/db = -a / b^2
             return std::vector<Tensor>{ra ? sum_to(div(g, b), a.shape()) : Tensor(),
                                        rb ? sum_to(neg(div(mul(g, a), mul(b, b))), b.shape()) : Tensor()};
           });
  }
  return out;
}

Tensor add(const Tensor& a, double b) {
  Tensor out = map_unary(a, "add", [b](const auto& x, auto t) { return x + static_cast<decltype(t)>(b); });
  if (needs_grad({&a})) record(out, "add_scalar", {a}, [](const Tensor& g) { return std::vector<Tensor>{g}; });
  return out;
}

Tensor mul(const Tensor& a, double b) {
  Tensor out = map_unary(a, "mul", [b](const auto& x, auto t) { return x * static_cast<decltype(t)>(b); });
  if (needs_grad({&a})) record(out, "mul_scalar", {a}, [b](const Tensor& g) { return std::vector<Tensor>{mul(g, b)}; });
  return out;
}

Tensor neg(const Tensor& x) {
  Tensor out = map_unary(x, "neg", [](const auto& v, auto) { return -v; });
  if (needs_grad({&x})) record(out, "neg", {x}, [](const Tensor& g) { return std::vector<Tensor>{neg(g)}; });
  return out;
}

// ---- unary math ----

Tensor pow(const Tensor& x, double exponent) {
  Tensor out = map_unary(x, "pow", [exponent](const auto& v, auto t) {
    return xt::pow(v, static_cast<decltype(t)>(exponent));
  });
  if (needs_grad({&x})) {
    record(out, "pow", {x}, [x = x.detach(), exponent](const Tensor& g) {
      if (exponent == 0.0) return std::vector<Tensor>{zeros(x.shape(), x.dtype())};  // not 0 * x^-1, NaN at 0
      return std::vector<Tensor>{map_binary(x, g, "pow_backward", [exponent](const auto& v, const auto& gv, auto t) {
        using T = decltype(t);
        return gv * static_cast<T>(exponent) * xt::pow(v, static_cast<T>(exponent - 1.0));
      })};
    });
  }
  return out;
}

Tensor exp(const Tensor& x) {
  Tensor out = map_unary(x, "exp", [](const auto& v, auto) { return xt::exp(v); });
  if (needs_grad({&x})) {
    record(out, "exp", {x}, [y = out.detach()](const Tensor& g) { return std::vector<Tensor>{mul(g, y)}; });
  }
  return out;
}

Tensor log(const Tensor& x) {
  Tensor out = map_unary(x, "log", [](const auto& v, auto) { return xt::log(v); });
  if (needs_grad({&x})) {
    record(out, "log", {x}, [x = x.detach()](const Tensor& g) { return std::vector<Tensor>{div(g, x)}; });
  }
  return out;
}

Tensor sqrt(const Tensor& x) {
  Tensor out = map_unary(x, "sqrt", [](const auto& v, auto) { return xt::sqrt(v); });
  if (needs_grad({&x})) {
    record(out, "sqrt", {x}, [y = out.detach()](const Tensor& g) {
      return std::vector<Tensor>{map_binary(y, g, "sqrt_backward", [](const auto& yv, const auto& gv, auto t) {
        return gv * static_cast<decltype(t)>(0.5) / yv;
      })};
    });
  }
  return out;
}

Tensor tanh(const Tensor& x) {
  Tensor out = map_unary(x, "tanh", [](const auto& v, auto) { return xt::tanh(v); });
  if (needs_grad({&x})) {
    record(out, "tanh", {x}, [y = out.detach()](const Tensor& g) {
      return std::vector<Tensor>{map_binary(y, g, "tanh_backward", [](const auto& yv, const auto& gv, auto t) {
        return gv * (static_cast<decltype(t)>(1) - yv * yv);
      })};
    });
  }
  return out;
}

Tensor sigmoid(const Tensor& x) {
  // 1 / (1 + exp(-x)) saturates cleanly at both ends in IEEE arithmetic (exp overflow gives 0, not NaN).
  Tensor out = map_unary(x, "sigmoid", [](const auto& v, auto t) {
    using T = decltype(t);
    return static_cast<T>(1) / (static_cast<T>(1) + xt::exp(-v));
  });
  if (needs_grad({&x})) {
    record(out, "sigmoid", {x}, [y = out.detach()](const Tensor& g) {
      return std::vector<Tensor>{map_binary(y, g, "sigmoid_backward", [](const auto& yv, const auto& gv, auto t) {
        return gv * yv * (static_cast<decltype(t)>(1) - yv);
      })};
    });
  }
  return out;
}

Tensor relu(const Tensor& x) {
  Tensor out = map_unary(x, "relu", [](const auto& v, auto t) { return xt::maximum(v, static_cast<decltype(t)>(0)); });
  if (needs_grad({&x})) {
    record(out, "relu", {x}, [x = x.detach()](const Tensor& g) {
      return std::vector<Tensor>{map_binary(x, g, "relu_backward", [](const auto& v, const auto& gv, auto t) {
        using T = decltype(t);
        return xt::where(v > static_cast<T>(0), gv, static_cast<T>(0));
      })};
    });
  }
  return out;
}

Tensor elu(const Tensor& x, double alpha) {
  Tensor out = map_unary(x, "elu", [alpha](const auto& v, auto t) {
    using T = decltype(t);
    return xt::where(v > static_cast<T>(0), v, static_cast<T>(alpha) * (xt::exp(v) - static_cast<T>(1)));
  });
  if (needs_grad({&x})) {
    record(out, "elu", {x}, [x = x.detach(), alpha](const Tensor& g) {
      return std::vector<Tensor>{map_binary(x, g, "elu_backward", [alpha](const auto& v, const auto& gv, auto t) {
        using T = decltype(t);
        return xt::where(v > static_cast<T>(0), gv, gv * static_cast<T>(alpha) * xt::exp(v));
      })};
    });
  }
  return out;
}

// ---- selection ----

Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b) {
  if (condition.dtype() != DType::boolean) {
    throw std::invalid_argument(std::string("where: the condition must be a bool tensor, got ") +
                                dtype_name(condition.dtype()));
  }
  check_same_dtype(a, b, "where");
  const Shape shape = broadcast_shapes(broadcast_shapes(condition.shape(), a.shape(), "where"), b.shape(), "where");
  Tensor out = empty(shape, a.dtype());
  dispatch_floating(a.dtype(), "where", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* o = out.data<T>();
    const bool* c = condition.data<bool>();
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    detail::BroadcastLoop<4> loop(shape, {&shape, &condition.shape(), &a.shape(), &b.shape()});
    loop.run([&](const auto& off, std::size_t n, const auto& s) {
      for (std::size_t i = 0; i < n; ++i)
        o[off[0] + i] = c[off[1] + s[1] * i] ? pa[off[2] + s[2] * i] : pb[off[3] + s[3] * i];
    });
  });
  if (needs_grad({&a, &b})) {
    record(out, "where", {a, b},
           [condition, sa = a.shape(), sb = b.shape(), ra = a.requires_grad(), rb = b.requires_grad()](const Tensor& g) {
             const Tensor zero = zeros({}, g.dtype());
             return std::vector<Tensor>{ra ? sum_to(where(condition, g, zero), sa) : Tensor(),
                                        rb ? sum_to(where(condition, zero, g), sb) : Tensor()};
           });
  }
  return out;
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  const Shape shape = broadcast_shapes(x.shape(), mask.shape(), "masked_fill");
  if (shape != x.shape()) {
    throw std::invalid_argument("masked_fill: the mask of shape " + shape_str(mask.shape()) +
                                " must broadcast to the tensor's shape " + shape_str(x.shape()));
  }
  return where(mask, full({}, value, x.dtype()), x);
}

// ---- operators ----

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator+(const Tensor& a, double b) { return add(a, b); }
Tensor operator+(double a, const Tensor& b) { return add(b, a); }
Tensor operator-(const Tensor& a, double b) { return add(a, -b); }
Tensor operator-(double a, const Tensor& b) { return add(neg(b), a); }
Tensor operator*(const Tensor& a, double b) { return mul(a, b); }
Tensor operator*(double a, const Tensor& b) { return mul(b, a); }
Tensor operator/(const Tensor& a, double b) { return mul(a, 1.0 / b); }
Tensor operator/(double a, const Tensor& b) { return div(full({}, a, b.dtype()), b); }
Tensor operator-(const Tensor& x) { return neg(x); }

}  // namespace attnlab
