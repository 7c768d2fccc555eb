// softmax(scale q k^T + bias, key padding, causal, window) v for heads [B, H, T, D], for softmax_attention:
// the op around the fused kernel of flash_attention.hpp. The forward keeps each row's log-sum-exp L
// (and, for long sequences, the output); the backward recomputes the weights
// P = exp(scale s + bias - L) tile by tile (the FlashAttention recipe: with dP = dO V^T and
// D_i = dO_i . O_i, dS = scale P (dP - D)). No [Tq, Tk] tensor is made: memory O(T D) per head, and
// tiles no query may see (causal: about half; a window: all but its band) are skipped.
//
// Legend: B batch, H heads, Tq/Tk tokens, D head dim, Dv value dim.
#include "framework/attention/softmax/blocked_attention.hpp"

#include <memory>
#include <stdexcept>
#include <vector>

#include "framework/attention/softmax/flash_attention.hpp"
#include "framework/ops/ops.hpp"
#include "framework/ops/parallel.hpp"

namespace attnlab {
namespace detail {

bool blocked_attention_applies(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask) {
  if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4) return false;
  for (std::size_t a = 0; a < 2; ++a)
    if (k.size(a) != q.size(a) || v.size(a) != q.size(a)) return false;
  if (!mask.defined()) return true;
  return mask.dtype() == DType::boolean && mask.dim() == 4 && mask.size(0) == q.size(0) && mask.size(1) == 1 && mask.size(2) == 1 &&
         mask.size(3) == k.size(2);
}

Tensor blocked_softmax_attention(const Tensor& q, const Tensor& k, const Tensor& v, double scale, const Tensor& mask, bool causal,
                                 const ScoreBand& band) {
  const std::size_t heads_per_batch = q.size(1), heads = q.size(0) * q.size(1);
  HeadShape shape;
  shape.tq = q.size(2), shape.tk = k.size(2), shape.d = q.size(3), shape.dv = v.size(3);
  shape.scale = scale, shape.causal = causal, shape.window = band.window;
  const auto slopes = std::make_shared<const std::vector<double>>(band.alibi_slopes);  // kept by the backward
  if (!slopes->empty() && slopes->size() != heads_per_batch) {
    throw std::invalid_argument("softmax_attention: " + std::to_string(slopes->size()) + " ALiBi slopes for " +
                                std::to_string(heads_per_batch) + " heads");
  }
  // Head h's operands: rows of q, k, v at h, its batch's padding row [Tk], its slope.
  const auto operands = [shape, heads_per_batch, slopes](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                                                         std::size_t h, auto tag) {
    using T = typename decltype(tag)::type;
    HeadOperands<T> x;
    x.q = q.data<T>() + h * shape.tq * shape.d, x.k = k.data<T>() + h * shape.tk * shape.d, x.v = v.data<T>() + h * shape.tk * shape.dv;
    x.padding = mask.defined() ? mask.data<bool>() + (h / heads_per_batch) * shape.tk : nullptr;
    x.slope = slopes->empty() ? T(0) : static_cast<T>((*slopes)[h % heads_per_batch]);
    return x;
  };
  Tensor out = empty({q.size(0), q.size(1), shape.tq, shape.dv}, q.dtype());
  Tensor lse = empty({heads, shape.tq}, q.dtype());
  dispatch_floating(q.dtype(), "softmax_attention", [&](auto tag) {
    using T = typename decltype(tag)::type;
    parallel_for(heads, 1, [&](std::size_t h0, std::size_t h1) {
      FlashScratch<T> scratch;
      for (std::size_t h = h0; h < h1; ++h)
        flash_forward(shape, operands(q, k, v, mask, h, tag), out.data<T>() + h * shape.tq * shape.dv, lse.data<T>() + h * shape.tq,
                      scratch);
    });
  });
  if (needs_grad({&q, &k, &v})) {
    // Keeps q, k, v (the callers hold them anyway), one number per query row, and for keys beyond one
    // chunk the output (the storage the caller receives; flash_attention.hpp says why).
    const Tensor kept_out = flash_backward_needs_output(shape) ? out.detach() : Tensor();
    record(out, "softmax_attention", {q, k, v},
           [q = q.detach(), k = k.detach(), v = v.detach(), o = kept_out, lse, mask, shape, heads, operands](const Tensor& g) {
             Tensor dq = empty(q.shape(), q.dtype()), dk = empty(k.shape(), k.dtype()), dv = empty(v.shape(), v.dtype());
             dispatch_floating(q.dtype(), "softmax_attention backward", [&](auto tag) {
               using T = typename decltype(tag)::type;
               parallel_for(heads, 1, [&](std::size_t h0, std::size_t h1) {
                 FlashScratch<T> scratch;
                 for (std::size_t h = h0; h < h1; ++h)
                   flash_backward(shape, operands(q, k, v, mask, h, tag), o.defined() ? o.data<T>() + h * shape.tq * shape.dv : nullptr,
                                  lse.data<T>() + h * shape.tq, g.data<T>() + h * shape.tq * shape.dv, dq.data<T>() + h * shape.tq * shape.d,
                                  dk.data<T>() + h * shape.tk * shape.d, dv.data<T>() + h * shape.tk * shape.dv, scratch);
               });
             });
             return std::vector<Tensor>{dq, dk, dv};
           });
  }
  return out;
}

}  // namespace detail
}  // namespace attnlab
