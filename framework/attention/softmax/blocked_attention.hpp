// The blocked path of softmax_attention (blocked_attention.cpp); softmax_attention chooses it.
#pragma once

#include "framework/attention/softmax/softmax_attention.hpp"

namespace attnlab::detail {

// True for q, k, v [B, H, T, D] with the same B and H, and no mask or a key padding mask [B, 1, 1, Tk].
bool blocked_attention_applies(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask);
// softmax(scale q k^T + bias) v in tiles of queries and keys (the kernel of flash_attention.hpp), without
// a [Tq, Tk] tensor in either direction; tiles outside a window's band are skipped (O(T w) time).
Tensor blocked_softmax_attention(const Tensor& q, const Tensor& k, const Tensor& v, double scale, const Tensor& mask, bool causal,
                                 const ScoreBand& band);

}  // namespace attnlab::detail
