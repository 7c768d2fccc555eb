// The softmax kernel's fused op: attention as one op that keeps no [Tq, Tk] weights for its backward
// (softmax_attention.cpp), and in blocks of queries for heads (blocked_attention.cpp). The linformer
// kernel attends to its projected keys through it too.
//
// Legend: Tq query tokens, Tk key tokens, D head dim, Dv value dim.
#pragma once

#include "framework/ops/ops.hpp"

namespace attnlab {

// Attention softmax(scale q k^T, mask, causal) v in one op (same masking rules as scaled_masked_softmax;
// q [..., Tq, D], k [..., Tk, D], v [..., Tk, Dv]): training keeps only q, k and v (and the output and
// a number per query row), and the backward recomputes the weights instead of holding a [..., Tq, Tk]
// tensor. For heads [B, H, T, D] with no mask or a key padding mask [B, 1, 1, Tk] and no `weights`, it
// runs in blocks of queries and never forms [Tq, Tk] at all (softmax/blocked_attention.cpp). `weights`, when
// given, receives the weights (no gradient), for patterns.
Tensor softmax_attention(const Tensor& q, const Tensor& k, const Tensor& v, double scale, const Tensor& mask, bool causal,
                         Tensor* weights = nullptr);
}  // namespace attnlab
