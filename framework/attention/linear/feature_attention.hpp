// Shared by the kernels that replace exp(q.k) with a product of positive features phi(q).phi(k)
// (linear, performer): out_i = sum_j (phi(q_i).phi(k_j)) v_j / (sum_j phi(q_i).phi(k_j) + eps), over the
// keys query i may see. O(T F D) either way: bidirectional through (phi(K)^T V), causal through the
// prefix sums of causal_linear_attention. Padded keys get phi(k) = 0.
//
// Legend: B batch, H heads, Tq query tokens, Tk key tokens, F features, D head dim.
#pragma once

#include "framework/attention/kernel.hpp"
#include "framework/attention/linear/linear_attention.hpp"

namespace attnlab {

// fq [B, H, Tq, F] and fk [B, H, Tk, F] non-negative features, v [B, H, Tk, D]. The pattern (on request)
// is phi(q_i).phi(k_j) normalised over the visible keys.
AttentionResult feature_attention(const Tensor& fq, const Tensor& fk, const Tensor& v, const AttentionContext& context,
                                  double eps, const char* kernel_name);

}  // namespace attnlab
