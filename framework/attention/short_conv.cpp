#include "framework/attention/short_conv.hpp"

#include <cmath>
#include <stdexcept>

#include "framework/ops/parallel.hpp"

namespace attnlab {
namespace {

struct ConvDims {
  std::size_t batch = 0, tokens = 0, channels = 0, taps = 0;
};

// y[b, t, c] = sum_j w[c, j] x[b, t - K + 1 + j, c]
template <class T>
void conv_forward(const T* x, const T* w, const ConvDims& d, T* y) {
  parallel_for(d.batch, 1, [&](std::size_t b0, std::size_t b1) {
    for (std::size_t b = b0; b < b1; ++b)
      for (std::size_t t = 0; t < d.tokens; ++t) {
        T* yr = y + (b * d.tokens + t) * d.channels;
        std::fill(yr, yr + d.channels, T(0));
        for (std::size_t j = 0; j < d.taps; ++j) {
          const std::size_t back = d.taps - 1 - j;  // how many tokens before t
          if (back > t) continue;
          const T* xr = x + (b * d.tokens + t - back) * d.channels;
#pragma omp simd
          for (std::size_t c = 0; c < d.channels; ++c) yr[c] += w[c * d.taps + j] * xr[c];
        }
      }
  });
}

// dx[b, s, c] = sum_j w[c, j] g[b, s + K - 1 - j, c]; dw[c, j] = sum_{b, t} g[b, t, c] x[b, t - K + 1 + j, c].
template <class T>
void conv_backward(const T* x, const T* w, const T* g, const ConvDims& d, T* dx, T* dw) {
  std::fill(dx, dx + d.batch * d.tokens * d.channels, T(0));
  std::fill(dw, dw + d.channels * d.taps, T(0));
  for (std::size_t b = 0; b < d.batch; ++b)
    for (std::size_t t = 0; t < d.tokens; ++t) {
      const T* gr = g + (b * d.tokens + t) * d.channels;
      for (std::size_t j = 0; j < d.taps; ++j) {
        const std::size_t back = d.taps - 1 - j;
        if (back > t) continue;
        const T* xr = x + (b * d.tokens + t - back) * d.channels;
        T* dxr = dx + (b * d.tokens + t - back) * d.channels;
#pragma omp simd
        for (std::size_t c = 0; c < d.channels; ++c) {
          dxr[c] += w[c * d.taps + j] * gr[c];
          dw[c * d.taps + j] += gr[c] * xr[c];
        }
      }
    }
}

}  // namespace

Tensor causal_depthwise_conv(const Tensor& x, const Tensor& weight) {
  if (x.dim() != 3 || weight.dim() != 2 || weight.size(0) != x.size(2) || weight.size(1) == 0 || x.dtype() != weight.dtype()) {
    throw std::invalid_argument("causal_depthwise_conv: expected x [B, T, C] and weight [C, K] of one dtype, got " +
                                shape_str(x.shape()) + " and " + shape_str(weight.shape()));
  }
  const Tensor& xc = x;
  const Tensor& wc = weight;
  const ConvDims d{x.size(0), x.size(1), x.size(2), weight.size(1)};
  Tensor y = empty(x.shape(), x.dtype());
  dispatch_floating(x.dtype(), "causal_depthwise_conv", [&](auto tag) {
    using T = typename decltype(tag)::type;
    conv_forward(xc.data<T>(), wc.data<T>(), d, y.data<T>());
  });
  if (needs_grad({&x, &weight})) {
    record(y, "causal_depthwise_conv", {x, weight}, [xc = xc.detach(), wc = wc.detach(), d](const Tensor& g) {
      const Tensor& gc = g;
      Tensor dx = empty(xc.shape(), xc.dtype()), dw = empty(wc.shape(), wc.dtype());
      dispatch_floating(xc.dtype(), "causal_depthwise_conv backward", [&](auto tag) {
        using T = typename decltype(tag)::type;
        conv_backward(xc.data<T>(), wc.data<T>(), gc.data<T>(), d, dx.data<T>(), dw.data<T>());
      });
      return std::vector<Tensor>{dx, dw};
    });
  }
  return y;
}

ShortConv::ShortConv(std::size_t channels, std::size_t kernel_size, Generator& gen) {
  if (channels == 0 || kernel_size == 0) throw std::invalid_argument("ShortConv: channels and kernel size must be positive");
  NoGradGuard no_grad;
  const double bound = 1.0 / std::sqrt(static_cast<double>(kernel_size));
  weight = register_parameter("weight", uniform({channels, kernel_size}, gen, -bound, bound), ParamKind::weight);
}

}  // namespace attnlab
