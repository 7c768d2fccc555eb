// The performer kernel's fused ops: its positive random features (FAVOR+) from their projections, and
// bidirectional FAVOR+ attention in blocks of tokens (favor_attention.cpp).
//
// Legend: B batch, H heads, Tq/Tk tokens, D head dim, m features.
#pragma once

#include "framework/ops/ops.hpp"

namespace attnlab {

// Performer's positive random features from their projections, one op (FAVOR+):
//   out = scale * (exp(proj - half_norm - s) + eps * exp(-s))
// over the last axis of proj [..., F], with half_norm [..., 1] (|x'|^2 / 2 of each row). The stabiliser
// s is each row's max_f(proj - half_norm) when `row_stabiliser`, else the constant `stabiliser`; it is
// held constant in the backward (it cancels in the attention's ratio). Training keeps only the output,
// which the attention that consumes it keeps anyway, and one number per row.
Tensor positive_random_features(const Tensor& proj, const Tensor& half_norm, double scale, double eps, bool row_stabiliser,
                                double stabiliser = 0.0);
// Bidirectional FAVOR+ attention (performer/favor_attention.cpp) in blocks of tokens: the features
// phi(x) = (exp(w . x' - |x'|^2 / 2 - s) + feature_eps exp(-s)) / sqrt(m), x' = x / D^(1/4), of
// q [B, H, Tq, D] and k [B, H, Tk, D] with the projection w [m, D] (no gradient), then
// out_i = phi(q_i)^T S / (phi(q_i) . z + eps), S = sum_j phi(k_j) v_j^T, z = sum_j phi(k_j) over the keys
// that key_padding_mask (bool [B, Tk], optional, true = padded) leaves. s: each query row's largest
// exponent; key_bound for keys (held constant in the backward; they cancel in the ratio). Training keeps
// q, k, v and S, z per head; each block's features are recomputed in the backward, so memory is
// O(T D + m D) per head and no [T, m] tensor is made. Equals positive_random_features -> linear_attention.
Tensor favor_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& w, const Tensor& key_padding_mask,
                       double feature_eps, double eps, double key_bound);
}  // namespace attnlab
