// The softmax family, fused over the last axis with raw pointers and the row kernels of row_kernels.hpp:
// softmax, scaled_masked_softmax (the attention kernels' softmax, with its scale, mask and causal mask
// applied in the same pass), log_softmax, and softmax_backward for fused ops that recompute their
// weights. A row that is entirely -infinity gives zeros and a zero gradient, never NaN.
//
// Legend: R rows (every axis but the last, flattened), C the last axis.
#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "framework/ops/ops.hpp"
#include "framework/ops/parallel.hpp"
#include "framework/ops/row_kernels.hpp"

namespace attnlab {

Tensor softmax_backward(const Tensor& y, const Tensor& g, double scale) {
  const std::size_t cols = y.dim() ? y.size(-1) : 0, rows = cols ? y.numel() / cols : 0;
  Tensor grad = empty(y.shape(), y.dtype());
  dispatch_floating(y.dtype(), "softmax_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* py = y.data<T>();
    const T* pg = g.data<T>();
    T* pd = grad.data<T>();
    const T s = static_cast<T>(scale);
    parallel_for(rows, rowops::grain(cols), [&](std::size_t r0, std::size_t r1) {
      for (std::size_t r = r0; r < r1; ++r) {
        const T* yr = py + r * cols;
        const T* gr = pg + r * cols;
        T* dr = pd + r * cols;
        const T dot = rowops::dot(gr, yr, cols);
        for (std::size_t i = 0; i < cols; ++i) dr[i] = s * yr[i] * (gr[i] - dot);
      }
    });
  });
  return grad;
}

Tensor softmax(const Tensor& x) {
  rowops::check_last_axis(x, "softmax");
  const std::size_t cols = x.size(-1);
  const std::size_t rows = cols ? x.numel() / cols : 0;
  Tensor out = empty(x.shape(), x.dtype());
  dispatch_floating(x.dtype(), "softmax", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* px = x.data<T>();
    T* py = out.data<T>();
    parallel_for(rows, rowops::grain(cols), [&](std::size_t r0, std::size_t r1) {
      for (std::size_t r = r0; r < r1; ++r) {
        const T* xr = px + r * cols;
        T* yr = py + r * cols;
        const T m = rowops::max(xr, cols);
        if (m == -std::numeric_limits<T>::infinity()) {  // every key masked: zeros, not NaN
          std::fill(yr, yr + cols, T(0));
          continue;
        }
        const T inv = T(1) / rowops::exp_sum(xr, yr, cols, m);
        for (std::size_t i = 0; i < cols; ++i) yr[i] *= inv;
      }
    });
  });
  if (needs_grad({&x})) {
    record(out, "softmax", {x}, [y = out.detach()](const Tensor& g) {
      return std::vector<Tensor>{softmax_backward(y, g, 1.0)};
    });
  }
  return out;
}

Tensor scaled_masked_softmax(const Tensor& x, double scale, const Tensor& mask, bool causal) {
  if (x.dim() < 2) throw std::invalid_argument("scaled_masked_softmax: needs a tensor of rank >= 2, got " + shape_str(x.shape()));
  const std::size_t cols = x.size(-1), tq = x.size(-2);
  const std::size_t rows = cols ? x.numel() / cols : 0;
  // Row i sees columns j <= i + (Tk - Tq); with more queries than keys the first rows see nothing.
  const auto shift = static_cast<std::int64_t>(cols) - static_cast<std::int64_t>(tq);
  // For each row of x, the offset of its mask row (mask broadcast over the leading axes).
  std::vector<std::size_t> mask_row;
  if (mask.defined()) {
    if (mask.dtype() != DType::boolean) throw std::invalid_argument("scaled_masked_softmax: the mask must be bool");
    if (mask.dim() == 0) throw std::invalid_argument("scaled_masked_softmax: the mask needs rank >= 1 (its last axis runs over keys)");
    if (broadcast_shapes(mask.shape(), x.shape(), "scaled_masked_softmax") != x.shape()) {
      throw std::invalid_argument("scaled_masked_softmax: mask " + shape_str(mask.shape()) + " does not broadcast to " +
                                  shape_str(x.shape()));
    }
    const Shape row_shape(x.shape().begin(), x.shape().end() - 1);
    Shape mask_rows(mask.shape().begin(), mask.shape().end() - 1);
    const std::size_t mask_cols = mask.size(-1);
    mask_row.resize(rows);
    Tensor index = reshape(arange(static_cast<std::int64_t>(shape_numel(mask_rows)), DType::float64),
                           std::vector<std::int64_t>(mask_rows.begin(), mask_rows.end()));
    const auto spread = broadcast_to(index, row_shape).to_vector();
    for (std::size_t r = 0; r < rows; ++r) mask_row[r] = static_cast<std::size_t>(spread[r]) * mask_cols;
  }
  Tensor out = empty(x.shape(), x.dtype());
  const bool* pm = mask.defined() ? mask.data<bool>() : nullptr;
  const bool mask_full_rows = mask.defined() && mask.size(-1) == cols;
  dispatch_floating(x.dtype(), "scaled_masked_softmax", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* px = x.data<T>();
    T* py = out.data<T>();
    const T s = static_cast<T>(scale);
    const T neg_inf = -std::numeric_limits<T>::infinity();
    parallel_for(rows, rowops::grain(cols), [&](std::size_t r0, std::size_t r1) {
    for (std::size_t r = r0; r < r1; ++r) {
      const T* xr = px + r * cols;
      T* yr = py + r * cols;
      // Visible columns: [0, limit) minus masked entries.
      const std::size_t limit =
          causal ? static_cast<std::size_t>(std::clamp<std::int64_t>(static_cast<std::int64_t>(r % tq) + shift + 1, 0,
                                                                     static_cast<std::int64_t>(cols)))
                 : cols;
      for (std::size_t j = 0; j < limit; ++j) yr[j] = xr[j] * s;
      for (std::size_t j = limit; j < cols; ++j) yr[j] = neg_inf;
      if (pm) {
        const bool* mr = pm + mask_row[r];
        for (std::size_t j = 0; j < limit; ++j)
          if (mr[mask_full_rows ? j : 0]) yr[j] = neg_inf;
      }
      const T m = rowops::max(yr, limit);
      if (m == neg_inf) {
        std::fill(yr, yr + cols, T(0));
        continue;
      }
      const T inv = T(1) / rowops::exp_sum(yr, yr, limit, m);
      for (std::size_t j = 0; j < limit; ++j) yr[j] *= inv;
      std::fill(yr + limit, yr + cols, T(0));
    }
    });
  });
  if (needs_grad({&x})) {
    record(out, "scaled_masked_softmax", {x}, [y = out.detach(), scale](const Tensor& g) {
      return std::vector<Tensor>{softmax_backward(y, g, scale)};
    });
  }
  return out;
}

Tensor log_softmax(const Tensor& x) {
  rowops::check_last_axis(x, "log_softmax");
  const std::size_t cols = x.size(-1);
  const std::size_t rows = cols ? x.numel() / cols : 0;
  Tensor out = empty(x.shape(), x.dtype());
  std::vector<std::uint8_t> masked_row(rows, 0);
  dispatch_floating(x.dtype(), "log_softmax", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* px = x.data<T>();
    T* py = out.data<T>();
    for (std::size_t r = 0; r < rows; ++r) {
      const T* xr = px + r * cols;
      T* yr = py + r * cols;
      const T m = rowops::max(xr, cols);
      if (m == -std::numeric_limits<T>::infinity()) {
        std::fill(yr, yr + cols, T(0));
        masked_row[r] = 1;
        continue;
      }
      const T lse = m + std::log(rowops::exp_sum(xr, yr, cols, m));  // yr is scratch here
      for (std::size_t i = 0; i < cols; ++i) yr[i] = xr[i] - lse;
    }
  });
  if (needs_grad({&x})) {
    record(out, "log_softmax", {x}, [y = out.detach(), rows, cols, masked_row = std::move(masked_row)](const Tensor& g) {
      // dx = g - softmax(x) * sum(g) per row; fully masked rows get zero
      Tensor grad = empty(y.shape(), y.dtype());
      dispatch_floating(y.dtype(), "log_softmax_backward", [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* py = y.data<T>();
        const T* pg = g.data<T>();
        T* pd = grad.data<T>();
        for (std::size_t r = 0; r < rows; ++r) {
          const T* gr = pg + r * cols;
          T* dr = pd + r * cols;
          if (masked_row[r]) {
            std::fill(dr, dr + cols, T(0));
            continue;
          }
          const T gsum = rowops::sum(gr, cols);
          rowops::exp_sum(py + r * cols, dr, cols, T(0));
          for (std::size_t i = 0; i < cols; ++i) dr[i] = gr[i] - dr[i] * gsum;
        }
      });
      return std::vector<Tensor>{grad};
    });
  }
  return out;
}

}  // namespace attnlab
