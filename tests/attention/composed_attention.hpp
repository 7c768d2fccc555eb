// The reference the fused softmax attention op is tested against: its composed form written out with
// dense [Tq, Tk] tensors (scores, the ALiBi bias and the visibility mask built element by element,
// softmax, then the values), differentiable through the generic ops.
#pragma once

#include <cmath>
#include <vector>

#include "framework/ops/ops.hpp"

namespace attnlab::testing {

// softmax(scale q k^T - m_h |p_i - j|) v over the keys j query i sees: p_i = i + Tk - Tq its position,
// |p_i - j| <= window (0: all), j <= p_i when causal, key j of batch b not padded (`padded` [B * Tk] or
// empty); rows without a visible key are zero. q [B, H, Tq, D], k [B, H, Tk, D], v [B, H, Tk, Dv].
inline Tensor composed_attention(const Tensor& q, const Tensor& k, const Tensor& v, double scale, std::size_t window, bool causal,
                                 const std::vector<double>& slopes, const std::vector<bool>& padded) {
  const std::size_t b = q.size(0), h = q.size(1), tq = q.size(2), tk = k.size(2);
  std::vector<double> bias(b * h * tq * tk), keep(b * h * tq * tk);
  for (std::size_t bi = 0; bi < b; ++bi)
    for (std::size_t hi = 0; hi < h; ++hi)
      for (std::size_t i = 0; i < tq; ++i)
        for (std::size_t j = 0; j < tk; ++j) {
          const std::size_t at = ((bi * h + hi) * tq + i) * tk + j;
          const double position = double(i) + double(tk) - double(tq), distance = std::fabs(position - double(j));
          const bool visible = (window == 0 || distance <= double(window)) && (!causal || double(j) <= position) &&
                               (padded.empty() || !padded[bi * tk + j]);
          keep[at] = visible ? 1.0 : 0.0;
          bias[at] = visible ? (slopes.empty() ? 0.0 : -slopes[hi] * distance) : -1e300;
        }
  const Tensor keep_t = from_vector(keep, {b, h, tq, tk}, DType::float64);
  const Tensor scores = matmul(q, k, false, true) * scale + from_vector(bias, {b, h, tq, tk}, DType::float64);
  const Tensor weights = exp(scores - max(scores, -1, true)) * keep_t;  // rows of all -1e300: exp(0) * 0
  const Tensor total = sum(weights, -1, true);
  return matmul(weights / (total + where(total.to(DType::boolean), zeros({}, DType::float64), ones({}, DType::float64))), v);
}

}  // namespace attnlab::testing
