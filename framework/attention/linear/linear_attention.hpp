// Linear attention's fused ops, shared by the kernels that replace exp(q.k) by a product of positive
// features (linear, performer's causal path), through feature_attention.hpp.
//
// Legend: T tokens, Dk feature dim, Dv value dim.
#pragma once

#include "framework/ops/ops.hpp"

namespace attnlab {

// Causal linear attention (linear/linear_attention.cpp): out_i = phi_q_i^T S_i / (phi_q_i . z_i + eps) with
// S_i = sum_{j<=i} phi_k_j v_j^T and z_i = sum_{j<=i} phi_k_j, for phi_q, phi_k [..., T, Dk] (non-negative
// features) and v [..., T, Dv]. O(T Dk Dv) time; O(T D) memory in training (no per-position state).
Tensor causal_linear_attention(const Tensor& phi_q, const Tensor& phi_k, const Tensor& v, double eps);
// The bidirectional form, out_i = phi_q_i^T S / (phi_q_i . z + eps) with S and z summed over every key,
// as one op: training keeps only the inputs (the backward recomputes S and z, each [.., F, D] or smaller).
Tensor linear_attention(const Tensor& phi_q, const Tensor& phi_k, const Tensor& v, double eps);
}  // namespace attnlab
