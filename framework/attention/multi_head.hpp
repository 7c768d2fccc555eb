// MultiHeadAttention: projections to queries, keys and values, the split into heads, an attention kernel
// from the registry, the merge and the output projection. Self-attention (one sequence) and cross-
// attention (queries from x, keys and values from `memory`, another sequence such as an encoder's output;
// rectangular patterns) are separate entry points.
//
// Named activations (nn/hooks.hpp), under the scope the caller passes ("blocks.1.attn."):
//   hook_q, hook_k, hook_v  [B, H, T, D]   what the kernel receives (after rotary, when rotary is on)
//   hook_pattern            [B, H, Tq, Tk] the kernel's pattern (formed only when asked for, by a separate
//                                          call in eval mode under no-grad, so caching it changes no
//                                          output); a replaced pattern mixes the values: z = pattern v,
//                                          with gradients reaching v and whatever the replacement was
//                                          computed from, not q and k through the kernel
//   hook_z                  [B, H, Tq, D]  each head's output before the output projection
//   hook_result             [B, H, Tq, C]  each head's contribution to the output (formed only when asked
//                                          for; a replaced one makes the output their sum plus the
//                                          projection's bias)
//
// Around the kernel, for every kernel: the short causal depthwise convolution on the projected q, k, v
// (self-attention only; attention/short_conv.hpp), ALiBi's slopes passed in the context (kernels that
// declare `alibi` add the bias), and the layer input passed in the context (kernels that declare
// `reads_input` compute gates from it).
//
// Decoding (inference: no graph, no hooks): self_attention_step continues causal sequences from a
// SelfAttentionState (the kernel's DecodeState, the convolution's last K - 1 rows, the position that
// rotates the new queries and keys), giving the rows self_attention gives over the whole sequences;
// cross_attention_step reads the memory's keys and values projected once.
//
// Legend: B batch, Tq query tokens, Tk key tokens, C model width, H heads, D = C / H head dim.
#pragma once

#include <memory>
#include <string>

#include "framework/attention/kernel.hpp"
#include "framework/attention/short_conv.hpp"
#include "framework/nn/hooks.hpp"
#include "framework/nn/layers.hpp"
#include "framework/nn/positional.hpp"

namespace attnlab {

// What the module adds around its kernel (model.attention.short_conv, model.positional: alibi).
struct AttentionSetup {
  std::size_t short_conv = 0;  // kernel size of the causal depthwise convolution on q, k, v; 0: none
  bool alibi = false;          // pass ALiBi's per-head slopes to the kernel
};

// What self-attention keeps to continue a batch of causal sequences token by token.
struct SelfAttentionState {
  std::unique_ptr<DecodeState> kernel;  // the kernel's (kernel.hpp)
  Tensor conv_tail;                     // [B, K - 1, 3C]: the projected rows the short convolution still reads; undefined without it
  std::size_t position = 0;             // tokens seen: the position of the next one
  // Keeps the sequences `rows`, in that order (beam search).
  void select_rows(const std::vector<std::size_t>& rows);
};

// What cross-attention reads at every step: the memory's keys and values, projected once, and its padding.
struct CrossAttentionState {
  Tensor k, v;      // [B, H, S, D]
  Tensor padding;   // [B, S] bool, or undefined
  void select_rows(const std::vector<std::size_t>& rows);
};

class MultiHeadAttention : public Module {
 public:
  // n_heads must divide d_model. `kernel` comes from make_kernel (its parameters become "kernel.*").
  // `input_norm` (optional): a pre-norm block's LayerNorm, owned and registered by the block, applied to
  // the queries' input (fused into the projection in self-attention). `rotary` (optional): rotates q and
  // k by their positions. `setup`: the short convolution and ALiBi (a kernel without the alibi
  // capability is refused).
  MultiHeadAttention(std::size_t d_model, std::size_t n_heads, std::shared_ptr<AttentionKernel> kernel, bool bias, Generator& gen,
                     std::shared_ptr<LayerNorm> input_norm = nullptr, std::shared_ptr<const PositionalEncoding> rotary = nullptr,
                     const AttentionSetup& setup = {});

  // x [B, T, C] -> [B, T, C].
  Tensor self_attention(const Tensor& x, const AttentionContext& context, const HookScope& hooks = {});
  // Queries from x [B, Tq, C], keys and values from memory [B, Tk, C] (not normalised here) -> [B, Tq, C].
  Tensor cross_attention(const Tensor& x, const Tensor& memory, const AttentionContext& context, const HookScope& hooks = {});

  // Decoding. start_decoding: the state of `batch` empty causal sequences. self_attention_step: x [B, n, C]
  // the next n tokens of each, their key padding [B, n] (or undefined) -> [B, n, C].
  SelfAttentionState start_decoding(std::size_t batch) const;
  Tensor self_attention_step(const Tensor& x, const Tensor& key_padding_mask, SelfAttentionState& state);
  // memory [B, S, C] and its padding [B, S] (or undefined) -> what cross_attention_step reads; x [B, n, C].
  CrossAttentionState start_cross_attention(const Tensor& memory, const Tensor& memory_padding_mask) const;
  Tensor cross_attention_step(const Tensor& x, const CrossAttentionState& state);

  std::size_t n_heads() const { return n_heads_; }
  std::size_t head_dim() const { return head_dim_; }

  std::shared_ptr<Linear> qkv;   // C -> 3C: rows [0, C) queries, [C, 2C) keys, [2C, 3C) values
  std::shared_ptr<Linear> proj;  // C -> C
  std::shared_ptr<AttentionKernel> kernel;
  std::shared_ptr<ShortConv> short_conv;  // [3C, K] over the projected q, k, v; null when off

 private:
  // The kernel and the output projection, with the hook points from q, k, v on.
  Tensor attend(Tensor q, Tensor k, Tensor v, AttentionContext context, const HookScope& hooks);
  // The context the kernel receives: ALiBi's slopes, and the layer input `x` (normalised as the
  // projections read it) when the kernel reads it.
  AttentionContext kernel_context(const AttentionContext& context, const Tensor& x) const;
  // The kernel's pattern for the hook point (a separate call in eval mode under no-grad).
  Tensor kernel_pattern(const Tensor& q, const Tensor& k, const Tensor& v, AttentionContext context);
  // z [B, H, Tq, D] -> the heads merged and projected [B, Tq, C].
  Tensor project(const Tensor& z) const;
  // z [B, H, Tq, D] -> each head's share of the output projection [B, H, Tq, C].
  Tensor head_results(const Tensor& z) const;
  void check_input(const Tensor& x, const char* name) const;
  std::size_t d_model_, n_heads_, head_dim_;
  std::shared_ptr<LayerNorm> input_norm_;
  std::shared_ptr<const PositionalEncoding> rotary_;
  std::vector<double> alibi_slopes_;
};

// "n_heads (3) must divide d_model (64)": the check every config does before building a model.
void check_heads_divide(std::size_t d_model, std::size_t n_heads);

}  // namespace attnlab
