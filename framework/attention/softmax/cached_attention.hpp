// Decoding for the softmax and sliding_window kernels: the new tokens' keys and values join a
// KeyValueCache (all of them, or the last w for a window), and the new queries attend over it. One new
// token per sequence (generation) runs a loop of its own over the cached rows, O(T D) per head with no
// tensor of the cache formed; a longer step (a prompt) runs the fused softmax_attention over the cache.
//
// Legend: B batch, H heads, n new tokens, T kept keys, D head dim.
#pragma once

#include "framework/attention/decode_state.hpp"

namespace attnlab {

// q, k, v [B, H, n, D] of the new tokens, context as AttentionKernel::decode receives it (the padding of
// the new keys [B, n], ALiBi's slopes). The cache keeps the last `window` keys (0: all of them). Returns
// softmax(scale q k^T + bias) v over the keys each query may see: [B, H, n, D].
Tensor cached_softmax_attention(KeyValueCache& cache, const Tensor& q, const Tensor& k, const Tensor& v, const AttentionContext& context,
                                double scale, std::size_t window);

}  // namespace attnlab
