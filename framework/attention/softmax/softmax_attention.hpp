// The softmax kernel's fused op: attention as one op that keeps no [Tq, Tk] weights for its backward
// (softmax_attention.cpp), and in blocks of queries for heads (blocked_attention.cpp). The linformer
// kernel attends to its projected keys through it too.
//
// Legend: Tq query tokens, Tk key tokens, D head dim, Dv value dim.
#pragma once

#include <vector>

#include "framework/ops/ops.hpp"

namespace attnlab {

// Where a query may look beyond causality and padding, and the bias on its scores: a window (query at key
// position p sees keys j with |p - j| <= window; 0: every key) and ALiBi's per-head slopes m_h (the score
// of head h gets -m_h |p - j|; empty: no bias). Query i sits at key position i + Tk - Tq.
struct ScoreBand {
  std::size_t window = 0;
  std::vector<double> alibi_slopes;
  bool empty() const { return window == 0 && alibi_slopes.empty(); }
};

// The band as tensors, for the composed form (patterns, tests): the mask [B or 1, 1, Tq, Tk] (true =
// masked) of keys outside the window or padded (`padding` [B, 1, 1, Tk] or undefined; undefined result
// when nothing is masked), and the bias [H, Tq, Tk] (undefined without slopes).
Tensor band_mask(const Tensor& padding, std::size_t tq, std::size_t tk, std::size_t window);
Tensor alibi_bias(const std::vector<double>& slopes, std::size_t tq, std::size_t tk, DType dtype);

// Attention softmax(scale q k^T, mask, causal) v in one op (same masking rules as scaled_masked_softmax;
// q [..., Tq, D], k [..., Tk, D], v [..., Tk, Dv]): training keeps only q, k and v (and the output and
// a number per query row), and the backward recomputes the weights instead of holding a [..., Tq, Tk]
// tensor. For heads [B, H, T, D] with no mask or a key padding mask [B, 1, 1, Tk] and no `weights`, it
// runs in blocks of queries and never forms [Tq, Tk] at all (softmax/blocked_attention.cpp); a `band`
// (window, ALiBi) is applied inside those blocks. `weights`, when given, receives the weights (no
// gradient), for patterns.
Tensor softmax_attention(const Tensor& q, const Tensor& k, const Tensor& v, double scale, const Tensor& mask, bool causal,
                         Tensor* weights = nullptr, const ScoreBand& band = {});
}  // namespace attnlab
