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

// True for qkv [B, T, 3 x heads x D] (D > 0) with no mask or a key padding mask [B, 1, 1, T].
bool packed_attention_applies(const Tensor& qkv, std::size_t heads, const Tensor& mask);
// The same on heads still packed as a fused projection writes them: qkv [B, T, 3 H D] holds q, k, v in
// turn, head h's D columns at h D of each; returns the heads merged, [B, T, H D] (output row t, columns
// h D on: head h's output at t). Self-attention (Tq = Tk = T). Reads and writes each head's rows in
// place, so the split into [B, H, T, D] and the merge back cost no copies; the arithmetic is the split
// op's, the same bits. Its backward writes d qkv in qkv's layout.
Tensor blocked_softmax_attention_packed(const Tensor& qkv, std::size_t heads, double scale, const Tensor& mask, bool causal,
                                        const ScoreBand& band);

}  // namespace attnlab::detail
