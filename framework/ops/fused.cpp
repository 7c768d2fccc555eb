// Fused, numerically stable forward/backward pairs over the last axis: softmax, log_softmax,
// scaled_masked_softmax, layer_norm, layer_norm_linear, cross_entropy; and dropout. Rows are processed
// with raw pointers and the row kernels of row_kernels.hpp. (The attention kernels' own fused ops live
// beside their kernels in framework/attention/.)
//
// Legend: R rows (every axis but the last, flattened), C the last axis.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <optional>
#include <stdexcept>

#include "framework/ops/ops.hpp"
#include "framework/ops/parallel.hpp"
#include "framework/ops/row_kernels.hpp"

namespace attnlab {
namespace {

// y = exp(x - m) over one row; returns the sum of y.
template <class T>
T exp_sum(const T* x, T* y, std::size_t n, T m) {
  rowops::exp_shifted(x, y, n, m);
  return rowops::sum(y, n);
}

void check_last_axis(const Tensor& x, const char* op) {
  if (x.dim() == 0) throw std::invalid_argument(std::string(op) + ": needs a tensor of rank >= 1");
}

}  // namespace

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

// ---- softmax ----

Tensor softmax(const Tensor& x) {
  check_last_axis(x, "softmax");
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
        const T inv = T(1) / exp_sum(xr, yr, cols, m);
        for (std::size_t i = 0; i < cols; ++i) yr[i] *= inv;
      }
    });
  });
  if (needs_grad({&x})) {
    record(out, "softmax", {x}, [y = out.detach(), rows, cols](const Tensor& g) {
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
      const T inv = T(1) / exp_sum(yr, yr, limit, m);
      for (std::size_t j = 0; j < limit; ++j) yr[j] *= inv;
      std::fill(yr + limit, yr + cols, T(0));
    }
    });
  });
  if (needs_grad({&x})) {
    record(out, "scaled_masked_softmax", {x}, [y = out.detach(), rows, cols, scale](const Tensor& g) {
      return std::vector<Tensor>{softmax_backward(y, g, scale)};
    });
  }
  return out;
}

Tensor log_softmax(const Tensor& x) {
  check_last_axis(x, "log_softmax");
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
      const T lse = m + std::log(exp_sum(xr, yr, cols, m));  // yr is scratch here
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
          exp_sum(py + r * cols, dr, cols, T(0));
          for (std::size_t i = 0; i < cols; ++i) dr[i] = gr[i] - dr[i] * gsum;
        }
      });
      return std::vector<Tensor>{grad};
    });
  }
  return out;
}

// ---- layer norm ----

namespace {

// y = h * w + b over rows of h (w and b [cols], either undefined), in one pass: a LayerNorm's output from
// its normalised input.
Tensor scale_shift_rows(const Tensor& h, const Tensor& w, const Tensor& b) {
  if (!w.defined() && !b.defined()) return h;
  const std::size_t cols = h.size(-1), rows = cols ? h.numel() / cols : 0;
  Tensor y = empty(h.shape(), h.dtype());
  dispatch_floating(h.dtype(), "layer_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* ph = h.data<T>();
    const T* pw = w.defined() ? w.data<T>() : nullptr;
    const T* pb = b.defined() ? b.data<T>() : nullptr;
    T* py = y.data<T>();
    parallel_for(rows, rowops::grain(cols), [&](std::size_t r0, std::size_t r1) {
      for (std::size_t r = r0; r < r1; ++r)
        for (std::size_t i = 0; i < cols; ++i) py[r * cols + i] = (pw ? ph[r * cols + i] * pw[i] : ph[r * cols + i]) + (pb ? pb[i] : T(0));
    });
  });
  return y;
}

// Rows [r0, r1) of layer norm's forward (see layer_norm_forward). The pointers do not alias, which lets
// each loop vectorise without run-time overlap checks.
template <class T>
void layer_norm_forward_rows(std::size_t r0, std::size_t r1, std::size_t cols, T eps, const T* __restrict px,
                             const T* __restrict pw, const T* __restrict pb, T* __restrict py, T* __restrict ph, T* __restrict ps) {
  for (std::size_t r = r0; r < r1; ++r) {
    const T* __restrict xr = px + r * cols;
    T* __restrict hr = ph + r * cols;
    T* __restrict yr = py + r * cols;
    const T mu = rowops::sum(xr, cols) / static_cast<T>(cols);
    T v = 0;
#pragma omp simd reduction(+ : v)
    for (std::size_t i = 0; i < cols; ++i) v += (xr[i] - mu) * (xr[i] - mu);
    const T rstd = T(1) / std::sqrt(v / static_cast<T>(cols) + eps);
    ps[r] = rstd;
#pragma omp simd
    for (std::size_t i = 0; i < cols; ++i) hr[i] = (xr[i] - mu) * rstd;
    if (pw && pb) {
#pragma omp simd
      for (std::size_t i = 0; i < cols; ++i) yr[i] = hr[i] * pw[i] + pb[i];
    } else {
      for (std::size_t i = 0; i < cols; ++i) yr[i] = (pw ? hr[i] * pw[i] : hr[i]) + (pb ? pb[i] : T(0));
    }
  }
}

// Layer norm's forward over rows of `cols`: out = x_hat * weight + bias, keeping x_hat and 1/std for the
// backward.
struct LayerNormForward {
  Tensor out, normalized, inv_std;
};
LayerNormForward layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  check_last_axis(x, "layer_norm");
  const std::size_t cols = x.size(-1);
  const std::size_t rows = cols ? x.numel() / cols : 0;
  for (const Tensor* p : {&weight, &bias}) {
    if (p->defined() && (p->shape() != Shape{cols} || p->dtype() != x.dtype())) {
      throw std::invalid_argument("layer_norm: weight and bias must be [" + std::to_string(cols) + "] of dtype " +
                                  dtype_name(x.dtype()) + ", got " + shape_str(p->shape()) + " " + dtype_name(p->dtype()));
    }
  }
  LayerNormForward f;
  Tensor out = empty(x.shape(), x.dtype());
  Tensor normalized = empty(x.shape(), x.dtype());  // x_hat, saved for backward
  Tensor inv_std = empty({rows}, x.dtype());
  dispatch_floating(x.dtype(), "layer_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* px = x.data<T>();
    const T* pw = weight.defined() ? weight.data<T>() : nullptr;
    const T* pb = bias.defined() ? bias.data<T>() : nullptr;
    T* py = out.data<T>();
    T* ph = normalized.data<T>();
    T* ps = inv_std.data<T>();
    parallel_for(rows, rowops::grain(cols), [&](std::size_t r0, std::size_t r1) {
      layer_norm_forward_rows<T>(r0, r1, cols, static_cast<T>(eps), px, pw, pb, py, ph, ps);
    });
  });
  f.out = out, f.normalized = normalized, f.inv_std = inv_std;
  return f;
}

// Rows [r0, r1) of layer norm's backward (see layer_norm_backward): adds their g h and g into dw and db
// (when given) and writes dx (when given). The pointers do not alias, which lets each loop vectorise
// without run-time overlap checks; kWeight hoists the weight's presence out of the loops.
template <class T, bool kWeight>
void layer_norm_backward_rows(std::size_t r0, std::size_t r1, std::size_t cols, const T* __restrict ph, const T* __restrict pg,
                              const T* __restrict ps, const T* __restrict pw, T* __restrict gx, T* __restrict dw, T* __restrict db) {
  const T inv_cols = T(1) / static_cast<T>(cols);
  for (std::size_t r = r0; r < r1; ++r) {
    const T* __restrict hr = ph + r * cols;
    const T* __restrict gr = pg + r * cols;
    if (dw) {
#pragma omp simd
      for (std::size_t i = 0; i < cols; ++i) dw[i] += gr[i] * hr[i];
    }
    if (db) {
#pragma omp simd
      for (std::size_t i = 0; i < cols; ++i) db[i] += gr[i];
    }
    if (!gx) continue;
    T mean_dh = 0, mean_dh_h = 0;
#pragma omp simd reduction(+ : mean_dh, mean_dh_h)
    for (std::size_t i = 0; i < cols; ++i) {
      const T dh = kWeight ? gr[i] * pw[i] : gr[i];
      mean_dh += dh;
      mean_dh_h += dh * hr[i];
    }
    mean_dh *= inv_cols;
    mean_dh_h *= inv_cols;
    const T rstd = ps[r];
    T* __restrict dx = gx + r * cols;
#pragma omp simd
    for (std::size_t i = 0; i < cols; ++i) {
      const T dh = kWeight ? gr[i] * pw[i] : gr[i];
      dx[i] = rstd * (dh - mean_dh - hr[i] * mean_dh_h);
    }
  }
}

// Layer norm's backward from x_hat and 1/std: gradients of x, weight and bias (each only when asked).
std::vector<Tensor> layer_norm_backward(const Tensor& normalized, const Tensor& inv_std, const Tensor& w, const Tensor& g,
                                        bool rx, bool rw, bool rb) {
  const std::size_t cols = normalized.size(-1), rows = cols ? normalized.numel() / cols : 0;
  Tensor gx = rx ? empty(normalized.shape(), g.dtype()) : Tensor();
  Tensor gw = rw ? zeros({cols}, g.dtype()) : Tensor();
  Tensor gb = rb ? zeros({cols}, g.dtype()) : Tensor();
  dispatch_floating(g.dtype(), "layer_norm_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* ph = normalized.data<T>();
    const T* ps = inv_std.data<T>();
    const T* pg = g.data<T>();
    const T* pw = w.defined() ? w.data<T>() : nullptr;
    // One pass over the rows, in blocks: each block sums its rows' weight and bias gradients (g h and g)
    // into a row of `partial`, and writes
    //   dx = rstd * (dh - mean(dh) - h * mean(dh * h)),  dh = g * w.
    // The blocks' partial sums are added in block order afterwards. The blocks depend on the rows alone
    // (32 rows a block, at most 64 blocks), never on the thread count, so the gradients are the same
    // whichever threads ran them and however many there were.
    constexpr std::size_t kRowsPerBlock = 32, kMaxBlocks = 64;
    const std::size_t blocks = std::clamp<std::size_t>((rows + kRowsPerBlock - 1) / kRowsPerBlock, 1, kMaxBlocks);
    std::vector<T> partial((rw || rb) ? blocks * 2 * cols : 0, T(0));
    T* const pgx = rx ? gx.data<T>() : nullptr;
    parallel_for(blocks, 1, [&](std::size_t b0, std::size_t b1) {
      for (std::size_t block = b0; block < b1; ++block) {
        T* dw = partial.empty() ? nullptr : partial.data() + block * 2 * cols;
        const std::size_t r0 = rows * block / blocks, r1 = rows * (block + 1) / blocks;
        if (pw) {
          layer_norm_backward_rows<T, true>(r0, r1, cols, ph, pg, ps, pw, pgx, rw ? dw : nullptr, rb ? dw + cols : nullptr);
        } else {
          layer_norm_backward_rows<T, false>(r0, r1, cols, ph, pg, ps, pw, pgx, rw ? dw : nullptr, rb ? dw + cols : nullptr);
        }
      }
    });
    T* const pgw = rw ? gw.data<T>() : nullptr;
    T* const pgb = rb ? gb.data<T>() : nullptr;
    for (std::size_t block = 0; block < (partial.empty() ? 0 : blocks); ++block) {
      const T* dw = partial.data() + block * 2 * cols;
      if (pgw)
        for (std::size_t i = 0; i < cols; ++i) pgw[i] += dw[i];
      if (pgb)
        for (std::size_t i = 0; i < cols; ++i) pgb[i] += dw[cols + i];
    }
  });
  return std::vector<Tensor>{gx, gw, gb};
}

}  // namespace

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  LayerNormForward f = layer_norm_forward(x, weight, bias, eps);
  if (needs_grad({&x, &weight, &bias})) {
    record(f.out, "layer_norm", {x, weight, bias},
           [normalized = f.normalized, inv_std = f.inv_std, w = weight.defined() ? weight.detach() : Tensor(),
            rx = x.requires_grad(), rw = weight.defined() && weight.requires_grad(),
            rb = bias.defined() && bias.requires_grad()](const Tensor& g) {
             return layer_norm_backward(normalized, inv_std, w, g, rx, rw, rb);
           });
  }
  return f.out;
}

Tensor layer_norm_linear(const Tensor& x, const Tensor& norm_weight, const Tensor& norm_bias, double eps,
                         const Tensor& weight, const Tensor& bias) {
  const LayerNormForward f = layer_norm_forward(x, norm_weight, norm_bias, eps);
  if (weight.dim() != 2 || weight.size(1) != x.size(-1)) {
    throw std::invalid_argument("layer_norm_linear: weight must be [out, " + std::to_string(x.size(-1)) + "], got " +
                                shape_str(weight.shape()));
  }
  Tensor out;
  {
    NoGradGuard no_grad;
    out = linear(f.out, weight, bias);  // the normalised input is freed right away
  }
  if (needs_grad({&x, &norm_weight, &norm_bias, &weight, &bias})) {
    record(out, "layer_norm_linear", {x, norm_weight, norm_bias, weight, bias},
           [normalized = f.normalized, inv_std = f.inv_std, nw = norm_weight.defined() ? norm_weight.detach() : Tensor(),
            nb = norm_bias.defined() ? norm_bias.detach() : Tensor(), w = weight.detach(), rx = x.requires_grad(),
            rnw = norm_weight.defined() && norm_weight.requires_grad(), rnb = norm_bias.defined() && norm_bias.requires_grad(),
            rw = weight.requires_grad(), rb = bias.defined() && bias.requires_grad()](const Tensor& g) {
             NoGradGuard no_grad;
             const std::size_t in = normalized.size(-1), out_features = g.size(-1);
             const auto rows = static_cast<std::int64_t>(normalized.numel() / std::max<std::size_t>(in, 1));
             Tensor gw, gb;
             if (rw) {
               const Tensor y = scale_shift_rows(normalized, nw, nb);  // the norm's output, recomputed: [..., in]
               gw = matmul(reshape(g, {rows, static_cast<std::int64_t>(out_features)}), reshape(y, {rows, static_cast<std::int64_t>(in)}),
                           true, false);  // [out, in]
             }
             if (rb) gb = sum_to(g, {out_features});
             std::vector<Tensor> grads(5);
             if (rx || rnw || rnb) {
               const std::vector<Tensor> norm_grads = layer_norm_backward(normalized, inv_std, nw, matmul(g, w), rx, rnw, rnb);
               grads[0] = norm_grads[0], grads[1] = norm_grads[1], grads[2] = norm_grads[2];
             }
             grads[3] = gw, grads[4] = gb;
             return grads;
           });
  }
  return out;
}

// ---- cross entropy ----

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, std::int64_t ignore_index, double label_smoothing) {
  check_last_axis(logits, "cross_entropy");
  if (!(label_smoothing >= 0.0 && label_smoothing < 1.0)) {
    throw std::invalid_argument("cross_entropy: label_smoothing must be in [0, 1) (0 for none; 1 would ignore the targets), got " +
                                std::to_string(label_smoothing));
  }
  if (targets.dtype() != DType::int64) {
    throw std::invalid_argument(std::string("cross_entropy: targets must be int64 class indices, got ") +
                                dtype_name(targets.dtype()));
  }
  const Shape expected(logits.shape().begin(), logits.shape().end() - 1);
  if (targets.shape() != expected) {
    throw std::invalid_argument("cross_entropy: logits of shape " + shape_str(logits.shape()) + " need targets of shape " +
                                shape_str(expected) + ", got " + shape_str(targets.shape()));
  }
  const std::size_t classes = logits.size(-1);
  const std::size_t rows = targets.numel();
  const std::int64_t* pt = targets.data<std::int64_t>();
  std::size_t count = 0;
  for (std::size_t r = 0; r < rows; ++r) {
    if (pt[r] == ignore_index) continue;
    if (pt[r] < 0 || static_cast<std::size_t>(pt[r]) >= classes) {
      throw std::out_of_range("cross_entropy: target " + std::to_string(pt[r]) + " at position " + std::to_string(r) +
                              " is outside [0, " + std::to_string(classes) + ") and is not ignore_index (" +
                              std::to_string(ignore_index) + ")");
    }
    ++count;
  }
  Tensor out = empty({}, logits.dtype());
  Tensor probs = empty(logits.shape(), logits.dtype());  // softmax, saved for backward
  dispatch_floating(logits.dtype(), "cross_entropy", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* px = logits.data<T>();
    T* pp = probs.data<T>();
    std::vector<double> row_loss(rows, 0.0);
    parallel_for(rows, rowops::grain(classes), [&](std::size_t r0, std::size_t r1) {
      for (std::size_t r = r0; r < r1; ++r) {
        const T* xr = px + r * classes;
        T* pr = pp + r * classes;
        if (pt[r] == ignore_index) continue;
        const T m = rowops::max(xr, classes);
        const T s = exp_sum(xr, pr, classes, m);
        const T inv = T(1) / s;
        for (std::size_t i = 0; i < classes; ++i) pr[i] *= inv;
        row_loss[r] = static_cast<double>(m + std::log(s) - xr[pt[r]]);  // -log p[target]
        // Smoothed: (1 - eps)(lse - x[t]) + eps mean_c(lse - x[c]) = (lse - x[t]) + eps (x[t] - mean_c x[c]),
        // a correction added to the plain loss, so eps = 0 leaves it as it is, bit for bit.
        if (label_smoothing != 0.0) {
          const double mean = static_cast<double>(rowops::sum(xr, classes)) / static_cast<double>(classes);
          row_loss[r] += label_smoothing * (static_cast<double>(xr[pt[r]]) - mean);
        }
      }
    });
    double total = 0;
    for (double l : row_loss) total += l;
    *out.data<T>() = static_cast<T>(count ? total / static_cast<double>(count) : 0.0);
  });
  if (needs_grad({&logits})) {
    // The targets are copied: a caller refilling its buffer before backward must not change the gradient.
    record(out, "cross_entropy", {logits},
           [probs, targets = targets.clone(), ignore_index, label_smoothing, rows, classes, count](const Tensor& g) {
             // d loss / d logits = (softmax - ((1 - eps) one_hot(target) + eps / C)) / count on counted rows, 0 on
             // ignored ones. With eps = 0 the uniform part is 0 and the target's share is scale itself: the
             // unsmoothed gradient, bit for bit.
             Tensor grad = empty(probs.shape(), probs.dtype());
             dispatch_floating(g.dtype(), "cross_entropy_backward", [&](auto tag) {
               using T = typename decltype(tag)::type;
               const T scale = count ? *g.data<T>() / static_cast<T>(count) : T(0);
               const T uniform = static_cast<T>(label_smoothing / static_cast<double>(classes)) * scale;
               const T on_target = static_cast<T>(1.0 - label_smoothing) * scale;
               const T* pp = probs.data<T>();
               const std::int64_t* pt = targets.data<std::int64_t>();
               T* pd = grad.data<T>();
               parallel_for(rows, rowops::grain(classes), [&](std::size_t r0, std::size_t r1) {
                 for (std::size_t r = r0; r < r1; ++r) {
                   T* dr = pd + r * classes;
                   if (pt[r] == ignore_index) {
                     std::fill(dr, dr + classes, T(0));
                     continue;
                   }
                   const T* pr = pp + r * classes;
                   for (std::size_t i = 0; i < classes; ++i) dr[i] = pr[i] * scale - uniform;
                   dr[pt[r]] -= on_target;
                 }
               });
             });
             return std::vector<Tensor>{grad};
           });
  }
  return out;
}

// ---- dropout ----

namespace {
int g_dropout_rank = -1;
}  // namespace

void set_dropout_rank(int rank) { g_dropout_rank = rank; }

Tensor dropout(const Tensor& x, double p, bool training, Generator& shared) {
  if (!(p >= 0.0 && p <= 1.0)) throw std::invalid_argument("dropout: p must be in [0, 1], got " + std::to_string(p));
  if (!training || p == 0.0) return x;
  // A rank's own stream: the golden ratio's multiples keep the ranks' seeds apart (the Generator mixes
  // its seed through splitmix64).
  std::optional<Generator> ranked;
  if (g_dropout_rank >= 0) ranked.emplace(shared.next_u64() + 0x9E3779B97F4A7C15ull * static_cast<std::uint64_t>(g_dropout_rank + 1));
  Generator& gen = ranked ? *ranked : shared;
  // The mask holds 0 or 1/(1-p) per element, so forward and backward are one multiply.
  Tensor mask = empty(x.shape(), x.dtype());
  dispatch_floating(x.dtype(), "dropout", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* pm = mask.data<T>();
    const T keep = p < 1.0 ? static_cast<T>(1.0 / (1.0 - p)) : T(0);
    for (std::size_t i = 0, n = x.numel(); i < n; ++i) pm[i] = gen.next_double() < p ? T(0) : keep;
  });
  Tensor out;
  {
    NoGradGuard no_grad;
    out = mul(x, mask);
  }
  if (needs_grad({&x})) {
    record(out, "dropout", {x}, [mask](const Tensor& g) { return std::vector<Tensor>{mul(g, mask)}; });
  }
  return out;
}

}  // namespace attnlab
