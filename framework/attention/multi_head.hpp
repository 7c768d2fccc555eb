// MultiHeadAttention: projections to queries, keys and values, the split into heads, an attention kernel
// from the registry, the merge and the output projection. Self-attention (one sequence) and
// cross-attention (queries from x, keys and values from a context sequence; rectangular patterns).
//
// Legend: B batch, Tq query tokens, Tk key tokens, C model width, H heads, D = C / H head dim.
#pragma once

#include <memory>
#include <string>

#include "framework/attention/kernel.hpp"
#include "framework/nn/layers.hpp"
#include "framework/nn/positional.hpp"

namespace attnlab {

class MultiHeadAttention : public Module {
 public:
  // n_heads must divide d_model. `kernel` comes from make_kernel (its parameters become "kernel.*").
  MultiHeadAttention(std::size_t d_model, std::size_t n_heads, std::shared_ptr<AttentionKernel> kernel, bool bias,
                     Generator& gen);

  // Self-attention when `context` is undefined, else cross-attention. x [B, Tq, C], context [B, Tk, C];
  // returns output [B, Tq, C] and, when asked, the pattern [B, H, Tq, Tk]. `rotary` (optional) rotates
  // q and k by their positions.
  // `norm` (optional) is applied to x first; in self-attention it is fused into the qkv projection.
  AttentionResult forward(const Tensor& x, const Tensor& context, const AttentionContext& attention,
                          const PositionalEncoding* rotary = nullptr, const LayerNorm* norm = nullptr);

  std::size_t n_heads() const { return n_heads_; }
  std::size_t head_dim() const { return head_dim_; }

  std::shared_ptr<Linear> qkv;   // C -> 3C: rows [0, C) queries, [C, 2C) keys, [2C, 3C) values
  std::shared_ptr<Linear> proj;  // C -> C
  std::shared_ptr<AttentionKernel> kernel;

 private:
  std::size_t d_model_, n_heads_, head_dim_;
};

// "n_heads (3) must divide d_model (64)": the check every config does before building a model.
void check_heads_divide(std::size_t d_model, std::size_t n_heads);

}  // namespace attnlab
