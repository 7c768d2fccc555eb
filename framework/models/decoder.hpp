// The Transformer decoder of an encoder-decoder (Vaswani et al. 2017): each layer attends causally to
// the target so far, then across to the encoder's output (cross-attention: queries from the target,
// keys and values from the source), then the feed-forward block, each with a residual connection,
// pre-norm (GPT-2 style) or post-norm (the original).
//
// Named activations of each layer under "blocks.<i>." (TransformerLens's names for its T5 blocks), all
// [B, T, C]:
//   hook_resid_pre         the layer's input
//   hook_attn_out          self-attention's output, added to the residual stream
//   hook_resid_mid         the residual stream after self-attention (post-norm: after its norm)
//   hook_cross_attn_out    cross-attention's output, added to the residual stream
//   hook_resid_mid_cross   the residual stream after cross-attention (post-norm: after its norm)
//   hook_mlp_out           the feed-forward block's output
//   hook_resid_post        the layer's output
// (without a feed-forward, model.feed_forward: false, no hook_mlp_out and no norm3: hook_resid_post is
// hook_resid_mid_cross)
// and the attentions' own under "blocks.<i>.attn." (self) and "blocks.<i>.cross_attn." (cross; its
// hook_pattern is [B, H, T, S]: a row per target position, a column per source position), plus the
// stack's "final_norm.hook_normalized" (pre-norm only).
//
// Legend: B batch, T target tokens, S source tokens, C model width, H heads.
#pragma once

#include <memory>
#include <vector>

#include "framework/models/encoder.hpp"

namespace attnlab {

// What a decoder keeps to continue a batch of target sequences token by token (inference): each layer's
// self-attention state and its cross-attention's projected memory, and the tokens seen.
struct DecoderState {
  std::vector<SelfAttentionState> self;
  std::vector<CrossAttentionState> cross;
  std::size_t position = 0;
  // Keeps the sequences `rows`, in that order, with their memories (beam search's reordering).
  void select_rows(const std::vector<std::size_t>& rows);
};

class DecoderLayer : public Module {
 public:
  // `self` sizes the layer and its causal self-attention (self.causal must be true); `cross` names the
  // cross-attention kernel (its attention and attention_options) and the source's longest length
  // (max_len). `rotary` (optional) rotates self-attention's queries and keys (never cross-attention's:
  // source and target positions do not share an axis).
  DecoderLayer(const EncoderConfig& self, const EncoderConfig& cross, Generator& gen,
               std::shared_ptr<const PositionalEncoding> rotary = nullptr);
  // x [B, T, C] target, memory [B, S, C] the encoder's output -> [B, T, C].
  Tensor forward(const Tensor& x, const Tensor& memory, const AttentionContext& self_context, const AttentionContext& cross_context,
                 const HookScope& hooks = {});
  // The next n target tokens x [B, n, C] (padding [B, n] or undefined) -> [B, n, C], as forward gives them
  // (decoding: no graph, no hooks).
  Tensor forward_step(const Tensor& x, const Tensor& padding_mask, SelfAttentionState& self, const CrossAttentionState& cross);

  std::shared_ptr<LayerNorm> norm1, norm2, norm3;
  std::shared_ptr<MultiHeadAttention> attn, cross_attn;
  std::shared_ptr<FeedForward> ff;
  std::shared_ptr<Dropout> drop;

 private:
  // The residual blocks around self-attention, cross-attention (each a function of its input) and the MLP.
  Tensor blocks_around(const Tensor& x, const std::function<Tensor(const Tensor&)>& self_attention,
                       const std::function<Tensor(const Tensor&)>& cross_attention, const HookScope& hooks);
  NormPlacement placement_;
};

// n layers ("blocks.0", ...) and, with pre-norm, a final LayerNorm ("final_norm").
class Decoder : public Module {
 public:
  Decoder(const EncoderConfig& self, const EncoderConfig& cross, Generator& gen, std::shared_ptr<const PositionalEncoding> rotary = nullptr);
  // x [B, T, C] (target embeddings with positions), its key padding mask [B, T] (or undefined); memory
  // [B, S, C] and its padding mask [B, S] (or undefined).
  Tensor forward(const Tensor& x, const Tensor& padding_mask, const Tensor& memory, const Tensor& memory_padding_mask,
                 const HookScope& hooks = {});
  // Decoding: the state of empty targets over memory [B, S, C] (padding [B, S] or undefined), and the output
  // [B, n, C] of their next n tokens x [B, n, C] (positions added; padding [B, n] or undefined), as forward
  // gives it over the whole targets. No graph, no hooks.
  DecoderState start_decoding(const Tensor& memory, const Tensor& memory_padding_mask) const;
  Tensor forward_step(const Tensor& x, const Tensor& padding_mask, DecoderState& state);

  std::vector<std::shared_ptr<DecoderLayer>> blocks;
  std::shared_ptr<LayerNorm> final_norm;  // pre-norm only

 private:
  EncoderConfig config_;
};

}  // namespace attnlab
