// Cross-entropy of logits against int64 targets, log-softmax and the negative log-likelihood fused over
// the last axis (with PyTorch's ignore_index and label smoothing): the softmax is kept for the backward,
// which is then one pass, (softmax - target distribution) / count.
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

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, std::int64_t ignore_index, double label_smoothing) {
  rowops::check_last_axis(logits, "cross_entropy");
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
        const T s = rowops::exp_sum(xr, pr, classes, m);
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

}  // namespace attnlab
