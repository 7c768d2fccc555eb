// Shared by the kernels that replace exp(q.k) with a product of positive features phi(q).phi(k)
// (linear, performer): out_i = sum_j (phi(q_i).phi(k_j)) v_j / (sum_j phi(q_i).phi(k_j) + eps), over the
// keys query i may see. O(T F D) either way: bidirectional through (phi(K)^T V), causal through the
// prefix sums of causal_linear_attention. Padded keys get phi(k) = 0.
//
// Legend: B batch, H heads, Tq query tokens, Tk key tokens, F features, D head dim.
#pragma once

#include "framework/attention/decode_state.hpp"
#include "framework/attention/kernel.hpp"
#include "framework/attention/linear/linear_attention.hpp"

namespace attnlab {

// fq [B, H, Tq, F] and fk [B, H, Tk, F] non-negative features, v [B, H, Tk, D]. The pattern (on request)
// is phi(q_i).phi(k_j) normalised over the visible keys.
AttentionResult feature_attention(const Tensor& fq, const Tensor& fk, const Tensor& v, const AttentionContext& context,
                                  double eps, const char* kernel_name);

// Decoding (no graph): the running sums as an RNN (Katharopoulos et al. 2020, section 3.4), one matrix
// [F, D + 1] per sequence and head holding S = sum_j phi(k_j) v_j^T and z = sum_j phi(k_j) as its last
// column. Each new key adds phi(k) [v, 1]^T (a padded one nothing), then its query reads
// out = phi(q)^T S / (phi(q) . z + eps): O(F D) per token, whatever the length so far. fq, fk [B, H, n, F],
// v [B, H, n, D], key_padding_mask [B, n] or undefined -> [B, H, n, D].
Tensor feature_decode(MatrixState& state, const Tensor& fq, const Tensor& fk, const Tensor& v, const Tensor& key_padding_mask, double eps);

}  // namespace attnlab
