// softmax_attention: softmax(scale q k^T, mask, causal) v as one op. Heads [B, H, T, D] with at most a
// key padding mask go to the blocked path (blocked_attention.cpp); other shapes and masks, and callers
// that want the weights, take the composed path here, which still keeps only q, k and v for its backward.
#include "framework/attention/softmax/softmax_attention.hpp"

#include <stdexcept>

#include "framework/attention/softmax/blocked_attention.hpp"

namespace attnlab {

Tensor softmax_attention(const Tensor& q, const Tensor& k, const Tensor& v, double scale, const Tensor& mask, bool causal,
                         Tensor* weights) {
  if (q.dim() < 2 || k.dim() != q.dim() || v.dim() != q.dim()) {
    throw std::invalid_argument("softmax_attention: q, k, v need the same rank >= 2, got " + shape_str(q.shape()) + ", " +
                                shape_str(k.shape()) + ", " + shape_str(v.shape()));
  }
  // Heads of [B, H, T, D] with at most a key padding mask, weights not wanted: in blocks of queries,
  // never forming [Tq, Tk] (blocked_attention.cpp). Other shapes and masks take the general path.
  if (!weights && detail::blocked_attention_applies(q, k, v, mask)) return detail::blocked_softmax_attention(q, k, v, scale, mask, causal);
  Tensor p, out;
  {
    NoGradGuard no_grad;
    p = scaled_masked_softmax(matmul(q, k, false, true), scale, mask, causal);  // [..., Tq, Tk]
    out = matmul(p, v);                                                        // [..., Tq, Dv]
  }
  if (weights) *weights = p;
  if (needs_grad({&q, &k, &v})) {
    // Only q, k and v are kept (the callers keep them anyway); the weights are recomputed, which costs one
    // more q k^T and softmax and saves a [..., Tq, Tk] tensor per layer for the whole backward pass.
    record(out, "softmax_attention", {q, k, v},
           [q = q.detach(), k = k.detach(), v = v.detach(), mask, scale, causal](const Tensor& g) {
             NoGradGuard no_grad;
             const Tensor w = scaled_masked_softmax(matmul(q, k, false, true), scale, mask, causal);
             const Tensor ds = softmax_backward(w, matmul(g, v, false, true), scale);  // d(q k^T)
             return std::vector<Tensor>{matmul(ds, k), matmul(ds, q, true, false), matmul(w, g, true, false)};
           });
  }
  return out;
}

}  // namespace attnlab
