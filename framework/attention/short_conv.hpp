// The short causal depthwise convolution on q, k and v (model.attention.short_conv), which Zoology's
// "Based recipe" and flash-linear-attention's DeltaNet and GLA layers put in front of the sequence mixer:
// each channel c of the projected [q, k, v] mixes its own last K tokens,
//   y[b, t, c] = sum_{j < K} w[c, j] x[b, t - (K - 1) + j, c]   (x before the sequence start is 0),
// so token t sees tokens t - K + 1 .. t and never a later one. Part of the multi-head module, so every
// kernel has it; no activation follows (the kernels that want one apply their own).
//
// Legend: B batch, T tokens, C channels, K kernel size.
#pragma once

#include "framework/nn/module.hpp"
#include "framework/ops/ops.hpp"

namespace attnlab {

// x [B, T, C], weight [C, K] -> [B, T, C], one op with its backward (float32 and float64).
Tensor causal_depthwise_conv(const Tensor& x, const Tensor& weight);

class ShortConv : public Module {
 public:
  // Weights start as PyTorch's Conv1d with groups = C: uniform in +-1/sqrt(K) (its fan-in is K).
  ShortConv(std::size_t channels, std::size_t kernel_size, Generator& gen);
  Tensor forward(const Tensor& x) const { return causal_depthwise_conv(x, weight); }
  std::size_t kernel_size() const { return weight.size(1); }
  Tensor weight;  // [C, K]
};

}  // namespace attnlab
