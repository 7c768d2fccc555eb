// Layer norm over the last axis, and layer_norm_linear, a layer norm fused with the Linear that follows it
// (the pre-norm blocks' LN -> qkv and LN -> fc1): one forward and one backward over the rows, with
// raw pointers and the row kernels of row_kernels.hpp; the weight and bias gradients summed in blocks
// that depend on the rows alone, so they are the same bits on any number of threads.
//
// Legend: R rows (every axis but the last, flattened), C the last axis.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "framework/ops/ops.hpp"
#include "framework/ops/parallel.hpp"
#include "framework/ops/row_kernels.hpp"

namespace attnlab {

namespace {

// x_hat = (x - mean) / std, one element: the forward's output is made from it and the backward makes it
// again from x and the row's mean and 1/std (to the same bits: the same two roundings), rather than the
// forward writing it out as a second [R, C] output to keep (what that saves: docs/benchmarks.md,
// "Intel Xeon, 2026-12-07 from 11:34 UTC").
template <class T>
inline T normalized(T x, T mean, T inv_std) {
  return (x - mean) * inv_std;
}

// Rows [r0, r1) of layer norm's forward (see layer_norm_forward). The pointers do not alias, which lets
// each loop vectorise without run-time overlap checks.
template <class T>
void layer_norm_forward_rows(std::size_t r0, std::size_t r1, std::size_t cols, T eps, const T* __restrict px,
                             const T* __restrict pw, const T* __restrict pb, T* __restrict py, T* __restrict pm, T* __restrict ps) {
  for (std::size_t r = r0; r < r1; ++r) {
    const T* __restrict xr = px + r * cols;
    T* __restrict yr = py + r * cols;
    const T mu = rowops::sum(xr, cols) / static_cast<T>(cols);
    simd::Vec<T> lanes{};
    std::size_t i = 0;
    for (; i + simd::kLanes<T> <= cols; i += simd::kLanes<T>) {
      const simd::Vec<T> centred = simd::load(xr + i) - mu;
      lanes += centred * centred;
    }
    T v = simd::horizontal_sum<T>(lanes);
    for (; i < cols; ++i) v += (xr[i] - mu) * (xr[i] - mu);
    const T rstd = T(1) / std::sqrt(v / static_cast<T>(cols) + eps);
    pm[r] = mu, ps[r] = rstd;
    if (pw && pb) {
#pragma omp simd
      for (std::size_t i = 0; i < cols; ++i) yr[i] = normalized(xr[i], mu, rstd) * pw[i] + pb[i];
    } else {
      for (std::size_t i = 0; i < cols; ++i) {
        const T h = normalized(xr[i], mu, rstd);
        yr[i] = (pw ? h * pw[i] : h) + (pb ? pb[i] : T(0));
      }
    }
  }
}

// Layer norm's forward over rows of `cols`: out = x_hat * weight + bias, with each row's mean and 1/std
// (x, they and the weight are all the backward needs).
struct LayerNormForward {
  Tensor out, mean, inv_std;
};
LayerNormForward layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  rowops::check_last_axis(x, "layer_norm");
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
  Tensor mean = empty({rows}, x.dtype());
  Tensor inv_std = empty({rows}, x.dtype());
  dispatch_floating(x.dtype(), "layer_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* px = x.data<T>();
    const T* pw = weight.defined() ? weight.data<T>() : nullptr;
    const T* pb = bias.defined() ? bias.data<T>() : nullptr;
    T* py = out.data<T>();
    T* pm = mean.data<T>();
    T* ps = inv_std.data<T>();
    parallel_for(rows, rowops::grain(cols), [&](std::size_t r0, std::size_t r1) {
      layer_norm_forward_rows<T>(r0, r1, cols, static_cast<T>(eps), px, pw, pb, py, pm, ps);
    });
  });
  f.out = out, f.mean = mean, f.inv_std = inv_std;
  return f;
}

// Rows [r0, r1) of layer norm's backward (see layer_norm_backward): adds their g h and g into dw and db
// (when given) and writes dx (when given), h = x_hat made again from x. Two passes a row: one makes h and
// adds into dw and db while it sums dh and dh h (dh = g w), the next writes dx. Each element's sums and
// products are those of a loop of its own for each (the same bits). The pointers do not alias; kWeight
// hoists the weight's presence out of the loops.
template <class T, bool kWeight>
void layer_norm_backward_rows(std::size_t r0, std::size_t r1, std::size_t cols, const T* __restrict px, const T* __restrict pm,
                              const T* __restrict ps, const T* __restrict pg, const T* __restrict pw, T* __restrict gx,
                              T* __restrict dw, T* __restrict db) {
  constexpr std::size_t W = simd::kLanes<T>;
  const T inv_cols = T(1) / static_cast<T>(cols);
  for (std::size_t r = r0; r < r1; ++r) {
    const T* __restrict xr = px + r * cols;
    const T* __restrict gr = pg + r * cols;
    const T mu = pm[r], rstd = ps[r];
    const simd::Vec<T> mu_v = simd::splat(mu), rstd_v = simd::splat(rstd);
    simd::Vec<T> lanes_dh{}, lanes_dh_h{};
    std::size_t i = 0;
    for (; i + W <= cols; i += W) {
      const simd::Vec<T> g = simd::load(gr + i), h = normalized(simd::load(xr + i), mu_v, rstd_v);
      if (dw) simd::store(dw + i, simd::load(dw + i) + g * h);
      if (db) simd::store(db + i, simd::load(db + i) + g);
      const simd::Vec<T> dh = kWeight ? g * simd::load(pw + i) : g;
      lanes_dh += dh;
      lanes_dh_h += dh * h;
    }
    T mean_dh = simd::horizontal_sum<T>(lanes_dh), mean_dh_h = simd::horizontal_sum<T>(lanes_dh_h);
    for (; i < cols; ++i) {
      const T h = normalized(xr[i], mu, rstd);
      if (dw) dw[i] += gr[i] * h;
      if (db) db[i] += gr[i];
      const T dh = kWeight ? gr[i] * pw[i] : gr[i];
      mean_dh += dh;
      mean_dh_h += dh * h;
    }
    if (!gx) continue;
    mean_dh *= inv_cols;
    mean_dh_h *= inv_cols;
    T* __restrict dx = gx + r * cols;
#pragma omp simd
    for (std::size_t i = 0; i < cols; ++i) {
      const T dh = kWeight ? gr[i] * pw[i] : gr[i];
      dx[i] = rstd * (dh - mean_dh - normalized(xr[i], mu, rstd) * mean_dh_h);
    }
  }
}

// Layer norm's backward from x and its rows' mean and 1/std: gradients of x, weight and bias (each only
// when asked).
std::vector<Tensor> layer_norm_backward(const Tensor& x, const Tensor& mean, const Tensor& inv_std, const Tensor& w, const Tensor& g,
                                        bool rx, bool rw, bool rb) {
  const std::size_t cols = x.size(-1), rows = cols ? x.numel() / cols : 0;
  Tensor gx = rx ? empty(x.shape(), g.dtype()) : Tensor();
  Tensor gw = rw ? zeros({cols}, g.dtype()) : Tensor();
  Tensor gb = rb ? zeros({cols}, g.dtype()) : Tensor();
  dispatch_floating(g.dtype(), "layer_norm_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* px = x.data<T>();
    const T* pm = mean.data<T>();
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
          layer_norm_backward_rows<T, true>(r0, r1, cols, px, pm, ps, pg, pw, pgx, rw ? dw : nullptr, rb ? dw + cols : nullptr);
        } else {
          layer_norm_backward_rows<T, false>(r0, r1, cols, px, pm, ps, pg, pw, pgx, rw ? dw : nullptr, rb ? dw + cols : nullptr);
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
           [x = x.detach(), mean = f.mean, inv_std = f.inv_std, w = weight.defined() ? weight.detach() : Tensor(),
            rx = x.requires_grad(), rw = weight.defined() && weight.requires_grad(),
            rb = bias.defined() && bias.requires_grad()](const Tensor& g) {
             return layer_norm_backward(x, mean, inv_std, w, g, rx, rw, rb);
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
    out = linear(f.out, weight, bias);
  }
  if (needs_grad({&x, &norm_weight, &norm_bias, &weight, &bias})) {
    // The norm's output y is kept for the weight gradient g^T y (as the composed LayerNorm -> Linear keeps
    // the Linear's input) rather than made again from x: that pass was 0.7-0.8% of a GPT step, for [R, C]
    // floats more held from the forward to the backward.
    const bool rw = weight.requires_grad();
    record(out, "layer_norm_linear", {x, norm_weight, norm_bias, weight, bias},
           [x = x.detach(), mean = f.mean, inv_std = f.inv_std, y = rw ? f.out : Tensor(), nw = norm_weight.defined() ? norm_weight.detach() : Tensor(),
            w = weight.detach(), rx = x.requires_grad(), rnw = norm_weight.defined() && norm_weight.requires_grad(),
            rnb = norm_bias.defined() && norm_bias.requires_grad(), rw, rb = bias.defined() && bias.requires_grad()](const Tensor& g) {
             NoGradGuard no_grad;
             const bool norm_grads_wanted = rx || rnw || rnb;
             std::vector<Tensor> grads(5);
             const auto norm_backward = [&](Tensor& dy) {  // on g W's thread, right after it
               const std::vector<Tensor> norm_grads = layer_norm_backward(x, mean, inv_std, nw, dy, rx, rnw, rnb);
               grads[0] = norm_grads[0], grads[1] = norm_grads[1], grads[2] = norm_grads[2];
             };
             // g W [..., in] for the norm's backward, g^T y [out, in], db
             const LinearGrads product_grads = linear_grads(g, y, w, norm_grads_wanted, rw, rb, norm_backward);
             grads[3] = product_grads.weight;
             grads[4] = product_grads.bias;
             return grads;
           });
  }
  return out;
}

}  // namespace attnlab
