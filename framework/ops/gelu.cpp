// GELU, exact (x Phi(x)): its value and its slope come from one vectorised pass with one erf and one exp
// per element, the same lane-wise code for every element whatever the thread count; its backward; and
// gelu_linear, a Linear after a GELU whose backward reads the activation and slope its forward made, and
// which can take the bias of the Linear before the GELU into the same passes.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <type_traits>

#include <xsimd/xsimd.hpp>

#include "framework/ops/elementwise_common.hpp"
#include "framework/ops/ops.hpp"
#include "framework/ops/parallel.hpp"
#include "framework/ops/simd.hpp"

namespace attnlab {
namespace {

using detail::check_same_dtype;
using detail::kGrain;

// exp(-u^2) for GELU's density and erf. float: the project's vector exp (simd.hpp; the attention's
// softmax runs it), where xsimd's vectors are its vectors, within 1 ulp of xsimd::exp and fewer
// instructions: GELU's pass took 7.2-8.5 ns a vector of 16 against 8.5-10.1 with xsimd::exp (a stand-alone
// copy of the pass, 2026-12-07, Intel Xeon, caches warm or not), and the reference GPT's step 0.3-0.5%
// less on one thread, 0.2-0.7% on two (`bench gpt`, the two alternated step by step in one process).
// double: xsimd::exp, to the last bits.
template <class T>
xsimd::batch<T> gauss_of(const xsimd::batch<T>& u) {
  const xsimd::batch<T> x = -(u * u);
  if constexpr (std::is_same_v<T, float> && sizeof(xsimd::batch<float>) == sizeof(simd::Vec<float>)) {
    simd::Vec<float> v;
    std::memcpy(&v, &x, sizeof v);
    v = simd::exp<float>(v);
    xsimd::batch<float> e;
    std::memcpy(&e, &v, sizeof e);
    return e;
  } else {
    return xsimd::exp(x);
  }
}

// 1 + erf(u) and exp(-u^2), for GELU. float: Abramowitz & Stegun 7.1.26, erf(u) = 1 - t P(t) exp(-u^2)
// with t = 1 / (1 + p |u|) (|error| <= 1.5e-7, 5e-7 after float rounding; PyTorch's vectorised erf is the
// same formula), the exp shared with GELU's density: twice as fast as xsimd::erf, which evaluates each of
// its three ranges for every vector (GELU was 10% of a ViT step). double: xsimd::erf, to the last bits.
template <class T>
xsimd::batch<T> one_plus_erf(const xsimd::batch<T>& u, xsimd::batch<T>& gauss) {
  using B = xsimd::batch<T>;
  gauss = gauss_of(u);
  if constexpr (std::is_same_v<T, float>) {
    const B t = B(1.0f) / xsimd::fma(B(0.3275911f), xsimd::abs(u), B(1.0f));
    B poly = xsimd::fma(B(1.061405429f), t, B(-1.453152027f));
    poly = xsimd::fma(poly, t, B(1.421413741f));
    poly = xsimd::fma(poly, t, B(-0.284496736f));
    poly = xsimd::fma(poly, t, B(0.254829592f));
    const B tail = poly * t * gauss;  // 1 - |erf(u)|
    return xsimd::select(u < B(0.0f), tail, B(2.0f) - tail);
  } else {
    return B(T(1)) + xsimd::erf(u);
  }
}

// GELU's value and slope in one pass over x, one erf and one exp per element:
//   h = x Phi(x),  s = g (Phi(x) + x phi(x)),  Phi(x) = (1 + erf(x / sqrt 2)) / 2, phi its density,
// writing h and/or s where the pointer is given; g (the output gradient) scales s when given; b, when
// given, is added to x first (element by element: x + b is rounded, then goes through GELU, as when the
// sum is made by another op). The last partial vector goes through the same vector code (padded), so
// every element takes one path.
template <class T>
void gelu_pass(const T* x, const T* b, const T* g, T* h, T* s, std::size_t n) {
  using B = xsimd::batch<T>;
  constexpr std::size_t width = B::size;
  const T c = static_cast<T>(0.5 * M_2_SQRTPI * M_SQRT1_2);  // 1 / sqrt(2 pi)
  auto vector = [&](const T* xi, const T* bi, const T* gi, T* hi, T* si) {
    const B v = bi ? B::load_unaligned(xi) + B::load_unaligned(bi) : B::load_unaligned(xi);
    B gauss;
    const B erf1 = one_plus_erf(v * B(static_cast<T>(M_SQRT1_2)), gauss);
    if (hi) (B(T(0.5)) * v * erf1).store_unaligned(hi);
    if (si) {
      B slope = B(T(0.5)) * erf1 + v * gauss * B(c);
      if (gi) slope *= B::load_unaligned(gi);
      slope.store_unaligned(si);
    }
  };
  std::size_t i = 0;
  for (; i + width <= n; i += width)
    vector(x + i, b ? b + i : nullptr, g ? g + i : nullptr, h ? h + i : nullptr, s ? s + i : nullptr);
  if (i == n) return;
  std::array<T, width> xt{}, bt{}, gt{}, ht{}, st{};
  std::copy(x + i, x + n, xt.begin());
  if (b) std::copy(b + i, b + n, bt.begin());
  if (g) std::copy(g + i, g + n, gt.begin());
  vector(xt.data(), b ? bt.data() : nullptr, g ? gt.data() : nullptr, h ? ht.data() : nullptr, s ? st.data() : nullptr);
  if (h) std::copy(ht.begin(), ht.begin() + static_cast<std::ptrdiff_t>(n - i), h + i);
  if (s) std::copy(st.begin(), st.begin() + static_cast<std::ptrdiff_t>(n - i), s + i);
}

// gelu_pass over floating tensors of one shape, split across threads: returns h when `value`, and writes
// the slope (times `grad` when given) into `slope` when given, which may be `grad` itself. With `x_bias`
// ([C] for x [..., C]), GELU is taken of x + x_bias, a row at a time.
Tensor gelu_parts(const Tensor& x, const Tensor& grad, bool value, const Tensor& slope, const Tensor& x_bias = Tensor()) {
  Tensor h = value ? empty(x.shape(), x.dtype()) : Tensor();
  dispatch_floating(x.dtype(), "gelu", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* px = x.data<T>();
    const T* pg = grad.defined() ? grad.data<T>() : nullptr;
    T* ph = value ? h.data<T>() : nullptr;
    T* ps = slope.defined() ? const_cast<T*>(slope.data<T>()) : nullptr;
    // Every element takes the same lane-wise vector code wherever it falls, so the values do not depend
    // on the thread count; whole blocks of 64 values leave the padded copy to the tensor's own tail (or,
    // with a bias, to each row's).
    const std::size_t n = x.numel();
    if (x_bias.defined()) {
      const T* pb = x_bias.data<T>();
      const std::size_t cols = x_bias.numel(), rows = cols ? n / cols : 0;
      parallel_for(rows, std::max<std::size_t>(1, kGrain / std::max<std::size_t>(cols, 1)), [&](std::size_t r0, std::size_t r1) {
        for (std::size_t r = r0; r < r1; ++r) {
          const std::size_t i0 = r * cols;
          gelu_pass(px + i0, pb, pg ? pg + i0 : nullptr, ph ? ph + i0 : nullptr, ps ? ps + i0 : nullptr, cols);
        }
      });
      return;
    }
    constexpr std::size_t kBlock = 64;
    parallel_for((n + kBlock - 1) / kBlock, kGrain / kBlock, [&](std::size_t b0, std::size_t b1) {
      const std::size_t i0 = b0 * kBlock, i1 = std::min(n, b1 * kBlock);
      gelu_pass(px + i0, static_cast<const T*>(nullptr), pg ? pg + i0 : nullptr, ph ? ph + i0 : nullptr, ps ? ps + i0 : nullptr,
                i1 - i0);
    });
  });
  return h;
}

// x *= y elementwise, in place (tensors of one shape and dtype), split across threads.
void scale_by(Tensor& x, const Tensor& y) {
  detail::update_in_place(x, y, "gelu_linear backward", [](auto a, auto b) { return a * b; });
}

// x *= y elementwise, in place, as scale_by, and the sums of x's columns over its rows (x [..., C]) in
// the same pass: the bias gradient of the Linear before a GELU, the same bits as sum_to of the scaled x
// (detail::sum_rows adds in the same order), without reading x again.
Tensor scale_by_and_sum_rows(Tensor& x, const Tensor& y) {
  const std::size_t cols = x.size(-1), rows = cols ? x.numel() / cols : 0;
  Tensor sums = zeros({cols}, x.dtype());
  dispatch_floating(x.dtype(), "gelu_linear backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* px = x.data<T>();
    const T* py = y.data<T>();
    T* o = sums.data<T>();
    detail::sum_rows_parallel(px, py, rows, cols, o);
  });
  return sums;
}

}  // namespace

Tensor gelu(const Tensor& x) {
  Tensor out = gelu_parts(x, Tensor(), true, Tensor());
  if (needs_grad({&x})) {
    record(out, "gelu", {x}, [x = x.detach()](const Tensor& g) { return std::vector<Tensor>{gelu_backward(x, g)}; });
  }
  return out;
}

Tensor gelu_backward(const Tensor& x, const Tensor& grad) {
  // d/dx [x Phi(x)] = Phi(x) + x phi(x), phi(x) = exp(-x^2 / 2) / sqrt(2 pi)
  check_same_dtype(x, grad, "gelu_backward");
  Tensor out = empty(x.shape(), x.dtype());
  gelu_parts(x, grad, false, out);
  return out;
}

// The activation h and its slope come from one pass in the forward and are kept for the backward, which
// then needs no GELU pass: dx = (g W) * slope, dW = g^T h. (It kept x and made both again there: 4% of
// the toy step. The values are the same bits either way: the same pass over the same x.) With x_bias,
// the bias of the Linear that made x is added in that pass, and its gradient (the column sums of dx) is
// summed in the pass that makes dx: two passes over x's size fewer than the Linear adding its bias and
// sum_to summing dx (in a GPT step, the fc1 output's), with the same bits.
Tensor gelu_linear(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& x_bias) {
  if (x_bias.defined() && (x.dim() == 0 || x_bias.shape() != Shape{x.size(-1)} || x_bias.dtype() != x.dtype())) {
    throw std::invalid_argument("gelu_linear: x_bias must be [" + (x.dim() ? std::to_string(x.size(-1)) : std::string("C")) +
                                "] of dtype " + dtype_name(x.dtype()) + " for x " + shape_str(x.shape()) + ", got " +
                                shape_str(x_bias.shape()) + " " + dtype_name(x_bias.dtype()));
  }
  const bool grad = needs_grad({&x, &weight, &bias, &x_bias});
  const bool rx = x.requires_grad(), rxb = x_bias.defined() && x_bias.requires_grad();
  const Tensor slope = grad && (rx || rxb) ? empty(x.shape(), x.dtype()) : Tensor();
  const Tensor h = gelu_parts(x, Tensor(), true, slope, x_bias);
  Tensor out;
  {
    NoGradGuard no_grad;
    out = linear(h, weight, bias);
  }
  if (grad) {
    record(out, "gelu_linear", {x, weight, bias, x_bias},
           [h, slope, w = weight.detach(), rx, rxb, rw = weight.requires_grad(),
            rb = bias.defined() && bias.requires_grad()](const Tensor& g) {
             Tensor gxb;
             const auto through_gelu = [&](Tensor& dx) {  // dx = (g W) * gelu'(x), in place, on g W's thread
               if (rxb) {
                 gxb = scale_by_and_sum_rows(dx, slope);
               } else {
                 scale_by(dx, slope);
               }
             };
             // g W [..., in], g^T h [out, in], db
             const LinearGrads grads = linear_grads(g, h, w, slope.defined(), rw, rb, through_gelu);
             return std::vector<Tensor>{rx ? grads.x : Tensor(), grads.weight, grads.bias, gxb};
           });
  }
  return out;
}

}  // namespace attnlab
