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

namespace {

// Where head h of sequence b keeps its rows in a tensor: from first + b batch + h head, `row` apart.
struct RowsAt {
  std::size_t first = 0, batch = 0, head = 0, row = 0;
  std::size_t at(std::size_t b, std::size_t h) const { return first + b * batch + h * head; }
};

// The heads' layouts: split heads [B, H, T, D] (q, k, v three tensors, the output a fourth), or packed as
// the fused projection writes them, [B, T, 3 H D] (q, k, v one tensor; the output merged, [B, T, H D]).
// Gradients take their inputs' layout.
struct HeadsLayout {
  std::size_t batch = 0, heads = 0;  // B, H
  RowsAt q, k, v, o;
};

HeadsLayout split_layout(const HeadShape& s, std::size_t batch, std::size_t heads) {
  const RowsAt q{0, heads * s.tq * s.d, s.tq * s.d, s.d}, k{0, heads * s.tk * s.d, s.tk * s.d, s.d};
  const RowsAt v{0, heads * s.tk * s.dv, s.tk * s.dv, s.dv}, o{0, heads * s.tq * s.dv, s.tq * s.dv, s.dv};
  return {batch, heads, q, k, v, o};
}

HeadsLayout packed_layout(const HeadShape& s, std::size_t batch, std::size_t heads) {
  const std::size_t c = heads * s.d, t = s.tq;
  return {batch, heads, {0, t * 3 * c, s.d, 3 * c}, {c, t * 3 * c, s.d, 3 * c}, {2 * c, t * 3 * c, s.d, 3 * c}, {0, t * c, s.d, c}};
}

// The op on either layout: q, k, v the three inputs (packed: the same tensor thrice), `out_shape` the
// output's; `inputs` what the graph records (q, k, v, or the packed tensor once), the backward returning
// one gradient per input.
Tensor run_blocked(const Tensor& q, const Tensor& k, const Tensor& v, const std::vector<Tensor>& inputs, const HeadShape& shape,
                   const HeadsLayout& layout, const Shape& out_shape, const Tensor& mask, const ScoreBand& band) {
  const auto slopes = std::make_shared<const std::vector<double>>(band.alibi_slopes);  // kept by the backward
  if (!slopes->empty() && slopes->size() != layout.heads) {
    throw std::invalid_argument("softmax_attention: " + std::to_string(slopes->size()) + " ALiBi slopes for " +
                                std::to_string(layout.heads) + " heads");
  }
  const std::size_t heads = layout.batch * layout.heads;
  // Head i's operands (i = b H + h): rows of q, k, v, its batch's padding row [Tk], its slope.
  const auto operands = [shape, layout, slopes](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, std::size_t i,
                                                auto tag) {
    using T = typename decltype(tag)::type;
    const std::size_t b = i / layout.heads, h = i % layout.heads;
    HeadOperands<T> x;
    x.q = q.data<T>() + layout.q.at(b, h), x.k = k.data<T>() + layout.k.at(b, h), x.v = v.data<T>() + layout.v.at(b, h);
    x.q_ld = layout.q.row, x.k_ld = layout.k.row, x.v_ld = layout.v.row, x.o_ld = layout.o.row;
    x.padding = mask.defined() ? mask.data<bool>() + b * shape.tk : nullptr;
    x.slope = slopes->empty() ? T(0) : static_cast<T>((*slopes)[h]);
    return x;
  };
  Tensor out = empty(out_shape, q.dtype());
  Tensor lse = empty({heads, shape.tq}, q.dtype());
  dispatch_floating(q.dtype(), "softmax_attention", [&](auto tag) {
    using T = typename decltype(tag)::type;
    parallel_for(heads, 1, [&](std::size_t h0, std::size_t h1) {
      FlashScratch<T>& scratch = thread_flash_scratch<T>();
      for (std::size_t i = h0; i < h1; ++i)
        flash_forward(shape, operands(q, k, v, mask, i, tag), out.data<T>() + layout.o.at(i / layout.heads, i % layout.heads),
                      lse.data<T>() + i * shape.tq, scratch);
    });
  });
  if (needs_grad({&q, &k, &v})) {
    // Keeps q, k, v (the callers hold them anyway), one number per query row, and for keys beyond one
    // chunk the output (the storage the caller receives; flash_attention.hpp says why).
    const Tensor kept_out = flash_backward_needs_output(shape) ? out.detach() : Tensor();
    std::vector<Tensor> kept;
    for (const Tensor& t : inputs) kept.push_back(t.detach());
    record(out, "softmax_attention", inputs, [kept, o = kept_out, lse, mask, shape, layout, heads, operands](const Tensor& g) {
      // Packed, one tensor stands for q, k and v, and so does its gradient.
      const Tensor &q = kept[0], &k = kept[kept.size() == 3 ? 1 : 0], &v = kept[kept.size() == 3 ? 2 : 0];
      std::vector<Tensor> grads;
      for (const Tensor& t : kept) grads.push_back(empty(t.shape(), t.dtype()));
      const Tensor &dq = grads[0], &dk = grads[grads.size() == 3 ? 1 : 0], &dv = grads[grads.size() == 3 ? 2 : 0];
      dispatch_floating(q.dtype(), "softmax_attention backward", [&](auto tag) {
        using T = typename decltype(tag)::type;
        T *pdq = const_cast<T*>(dq.data<T>()), *pdk = const_cast<T*>(dk.data<T>()), *pdv = const_cast<T*>(dv.data<T>());
        parallel_for(heads, 1, [&](std::size_t h0, std::size_t h1) {
          FlashScratch<T>& scratch = thread_flash_scratch<T>();
          for (std::size_t i = h0; i < h1; ++i) {
            const std::size_t b = i / layout.heads, h = i % layout.heads;
            flash_backward(shape, operands(q, k, v, mask, i, tag), o.defined() ? o.data<T>() + layout.o.at(b, h) : nullptr,
                           lse.data<T>() + i * shape.tq, g.data<T>() + layout.o.at(b, h), pdq + layout.q.at(b, h), pdk + layout.k.at(b, h),
                           pdv + layout.v.at(b, h), scratch);
          }
        });
      });
      return grads;
    });
  }
  return out;
}

}  // namespace

Tensor blocked_softmax_attention(const Tensor& q, const Tensor& k, const Tensor& v, double scale, const Tensor& mask, bool causal,
                                 const ScoreBand& band) {
  HeadShape shape;
  shape.tq = q.size(2), shape.tk = k.size(2), shape.d = q.size(3), shape.dv = v.size(3);
  shape.scale = scale, shape.causal = causal, shape.window = band.window;
  return run_blocked(q, k, v, {q, k, v}, shape, split_layout(shape, q.size(0), q.size(1)), {q.size(0), q.size(1), shape.tq, shape.dv},
                     mask, band);
}

bool packed_attention_applies(const Tensor& qkv, std::size_t heads, const Tensor& mask) {
  if (qkv.dim() != 3 || heads == 0 || qkv.size(2) % (3 * heads) != 0 || qkv.size(2) == 0) return false;
  if (!mask.defined()) return true;
  return mask.dtype() == DType::boolean && mask.dim() == 4 && mask.size(0) == qkv.size(0) && mask.size(1) == 1 && mask.size(2) == 1 &&
         mask.size(3) == qkv.size(1);
}

Tensor blocked_softmax_attention_packed(const Tensor& qkv, std::size_t heads, double scale, const Tensor& mask, bool causal,
                                        const ScoreBand& band) {
  if (!packed_attention_applies(qkv, heads, mask)) {
    throw std::invalid_argument("softmax_attention: expected packed heads [B, T, 3 x " + std::to_string(heads) +
                                " x D] and no mask or a key padding mask [B, 1, 1, T], got " + shape_str(qkv.shape()) +
                                (mask.defined() ? " and " + shape_str(mask.shape()) : std::string()));
  }
  HeadShape shape;
  shape.tq = shape.tk = qkv.size(1), shape.d = shape.dv = qkv.size(2) / (3 * heads);
  shape.scale = scale, shape.causal = causal, shape.window = band.window;
  return run_blocked(qkv, qkv, qkv, {qkv}, shape, packed_layout(shape, qkv.size(0), heads), {qkv.size(0), shape.tq, heads * shape.d}, mask,
                     band);
}

}  // namespace detail
}  // namespace attnlab
