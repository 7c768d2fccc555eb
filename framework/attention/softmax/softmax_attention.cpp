// softmax_attention: softmax(scale q k^T, mask, causal) v as one op. Heads [B, H, T, D] with at most a
// key padding mask go to the blocked path (blocked_attention.cpp); other shapes and masks, and callers
// that want the weights, take the composed path here, which still keeps only q, k and v for its backward.
#include "framework/attention/softmax/softmax_attention.hpp"

#include <cstdlib>
#include <stdexcept>

#include "framework/attention/softmax/blocked_attention.hpp"

namespace attnlab {

Tensor band_mask(const Tensor& padding, std::size_t tq, std::size_t tk, std::size_t window) {
  if (window == 0) return padding;
  const std::size_t rows = padding.defined() ? padding.size(0) : 1;
  Tensor mask = empty({rows, 1, tq, tk}, DType::boolean);
  bool* m = mask.data<bool>();
  const bool* pad = padding.defined() ? padding.data<bool>() : nullptr;
  const auto shift = static_cast<std::int64_t>(tk) - static_cast<std::int64_t>(tq), w = static_cast<std::int64_t>(window);
  for (std::size_t b = 0; b < rows; ++b)
    for (std::size_t i = 0; i < tq; ++i)
      for (std::size_t j = 0; j < tk; ++j) {
        const std::int64_t distance = static_cast<std::int64_t>(i) + shift - static_cast<std::int64_t>(j);
        m[(b * tq + i) * tk + j] = distance > w || distance < -w || (pad && pad[b * tk + j]);
      }
  return mask;
}

Tensor alibi_bias(const std::vector<double>& slopes, std::size_t tq, std::size_t tk, DType dtype) {
  if (slopes.empty()) return Tensor();
  std::vector<double> bias(slopes.size() * tq * tk);
  const auto shift = static_cast<std::int64_t>(tk) - static_cast<std::int64_t>(tq);
  for (std::size_t h = 0; h < slopes.size(); ++h)
    for (std::size_t i = 0; i < tq; ++i)
      for (std::size_t j = 0; j < tk; ++j)
        bias[(h * tq + i) * tk + j] = -slopes[h] * static_cast<double>(std::llabs(static_cast<std::int64_t>(i) + shift - static_cast<std::int64_t>(j)));
  return from_vector(bias, {slopes.size(), tq, tk}, dtype);
}

namespace {

// The weights of the composed form: softmax(scale q k^T + bias) under the mask and the window.
Tensor composed_weights(const Tensor& q, const Tensor& k, double scale, const Tensor& mask, bool causal, const ScoreBand& band) {
  const std::size_t tq = q.size(-2), tk = k.size(-2);
  if (band.window && mask.defined() && !(mask.dim() == 4 && mask.size(1) == 1 && mask.size(2) == 1)) {
    throw std::invalid_argument("softmax_attention: a window combines with a key padding mask [B, 1, 1, Tk] only, got " +
                                shape_str(mask.shape()));
  }
  const Tensor masked = band_mask(mask, tq, tk, band.window);
  Tensor scores = matmul(q, k, false, true);  // [..., Tq, Tk]
  if (band.alibi_slopes.empty()) return scaled_masked_softmax(scores, scale, masked, causal);
  return scaled_masked_softmax(scores * scale + alibi_bias(band.alibi_slopes, tq, tk, q.dtype()), 1.0, masked, causal);
}

}  // namespace

Tensor softmax_attention(const Tensor& q, const Tensor& k, const Tensor& v, double scale, const Tensor& mask, bool causal,
                         Tensor* weights, const ScoreBand& band) {
  if (q.dim() < 2 || k.dim() != q.dim() || v.dim() != q.dim()) {
    throw std::invalid_argument("softmax_attention: q, k, v need the same rank >= 2, got " + shape_str(q.shape()) + ", " +
                                shape_str(k.shape()) + ", " + shape_str(v.shape()));
  }
  // Heads of [B, H, T, D] with at most a key padding mask, weights not wanted: in blocks of queries,
  // never forming [Tq, Tk] (blocked_attention.cpp). Other shapes and masks take the general path.
  if (!weights && detail::blocked_attention_applies(q, k, v, mask)) {
    return detail::blocked_softmax_attention(q, k, v, scale, mask, causal, band);
  }
  if (!band.alibi_slopes.empty() && (q.dim() != 4 || q.size(1) != band.alibi_slopes.size())) {
    throw std::invalid_argument("softmax_attention: ALiBi needs heads [B, H, T, D] with one slope per head; got " +
                                shape_str(q.shape()) + " and " + std::to_string(band.alibi_slopes.size()) + " slopes");
  }
  Tensor p, out;
  {
    NoGradGuard no_grad;
    p = composed_weights(q, k, scale, mask, causal, band);  // [..., Tq, Tk]
    out = matmul(p, v);                                     // [..., Tq, Dv]
  }
  if (weights) *weights = p;
  if (needs_grad({&q, &k, &v})) {
    // Only q, k and v are kept (the callers keep them anyway); the weights are recomputed, which costs one
    // more q k^T and softmax and saves a [..., Tq, Tk] tensor per layer for the whole backward pass.
    record(out, "softmax_attention", {q, k, v},
           [q = q.detach(), k = k.detach(), v = v.detach(), mask, scale, causal, band](const Tensor& g) {
             NoGradGuard no_grad;
             const Tensor w = composed_weights(q, k, scale, mask, causal, band);
             const Tensor ds = softmax_backward(w, matmul(g, v, false, true), scale);  // d(q k^T)
             return std::vector<Tensor>{matmul(ds, k), matmul(ds, q, true, false), matmul(w, g, true, false)};
           });
  }
  return out;
}

}  // namespace attnlab
