// Transformer encoder layers and stacks: residual connections around attention and the feed-forward
// block, pre-norm (GPT-2), post-norm (the original Transformer, BERT) or without norms, dropout, bidirectional or causal.
//
// Named activations of each block, under "blocks.<i>." (TransformerLens's names; attention's own under
// "blocks.<i>.attn.", see attention/multi_head.hpp), all [B, T, C]:
//   hook_resid_pre   the block's input
//   hook_attn_out    attention's output (after dropout), added to the residual stream
//   hook_resid_mid   the residual stream between attention and MLP (post-norm: after its norm)
//   hook_mlp_out     the feed-forward block's output, added to the residual stream
//   hook_resid_post  the block's output (post-norm: after its norm)
// A block without a feed-forward (model.feed_forward: false) has neither hook_resid_mid nor hook_mlp_out,
// as TransformerLens's attn_only blocks.
// and the stack's "final_norm.hook_normalized", the final norm's output (pre-norm only).
//
// Legend: B batch, T tokens, C model width, H heads.
#pragma once

#include <yaml-cpp/yaml.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "framework/attention/multi_head.hpp"
#include "framework/io/config_node.hpp"
#include "framework/nn/hooks.hpp"
#include "framework/nn/layers.hpp"
#include "framework/nn/positional.hpp"

namespace attnlab {

enum class NormPlacement { pre, post, none };
const EnumNames<NormPlacement>& norm_placement_names();
NormPlacement parse_norm_placement(const std::string& name);  // "pre" | "post" | "none"
const char* norm_placement_name(NormPlacement placement);

// How a model's weights start: gpt2, N(0, 0.02) with the residual projections scaled by 1/sqrt(2 layers)
// (GPT-2, nanoGPT); fan_in, N(0, 1/sqrt(fan-in)) for every weight and N(0, 1/sqrt(width)) for the
// embeddings (Nanda et al.'s grokking model, whose larger weights memorise first).
enum class InitScheme { gpt2, fan_in };
const EnumNames<InitScheme>& init_scheme_names();

// Everything that shapes an encoder stack. Checked by validate() before anything is built.
struct EncoderConfig {
  std::size_t d_model = 64;
  std::size_t n_heads = 4;
  std::size_t n_layers = 2;
  std::size_t ff_hidden = 0;  // 0: 4 * d_model
  bool feed_forward = true;   // false: blocks of attention alone (Zoology's MQAR models, TransformerLens's attn_only)
  std::size_t max_len = 256;  // the longest sequence the stack will see (set from the data by the model kinds)
  NormPlacement norm = NormPlacement::pre;
  Activation activation = Activation::gelu;
  InitScheme init = InitScheme::gpt2;
  double dropout = 0.0;       // on residual branches (attention output, feed-forward output)
  bool causal = false;
  bool bias = true;           // biases in every Linear layer (attention projections, feed-forward) and
                              // LayerNorm shifts; false is nanoGPT's bias=False
  std::string attention = "softmax";
  YamlTree attention_options;  // the kernel's own options (null: defaults)
  bool padding_mask = false;   // whether the model passes key padding masks (set from the data by the model kinds)
  std::size_t short_conv = 0;  // the causal depthwise convolution on q, k, v (model.attention.short_conv); 0: none
  bool alibi = false;          // ALiBi score bias (set from model.positional by the model kinds)

  std::size_t hidden() const { return ff_hidden ? ff_hidden : 4 * d_model; }
  std::size_t head_dim() const { return d_model / n_heads; }
  KernelSpec kernel_spec() const {
    KernelSpec spec{n_heads, head_dim(), max_len, causal, padding_mask};
    spec.alibi = alibi;
    spec.d_model = d_model;
    return spec;
  }
  AttentionSetup attention_setup() const { return AttentionSetup{short_conv, alibi}; }
  // Throws std::invalid_argument naming the fix (n_heads not dividing d_model, an unknown kernel, a
  // kernel lacking a capability, ...).
  void validate() const;
};

// What a causal stack keeps to continue a batch of sequences token by token (inference): each layer's
// self-attention state, and the tokens seen.
struct StackState {
  std::vector<SelfAttentionState> layers;
  std::size_t position = 0;
  // Keeps the sequences `rows`, in that order (beam search's reordering).
  void select_rows(const std::vector<std::size_t>& rows);
};

class EncoderLayer : public Module {
 public:
  // `rotary` (optional) rotates queries and keys by their positions.
  EncoderLayer(const EncoderConfig& config, Generator& gen, std::shared_ptr<const PositionalEncoding> rotary = nullptr);
  // x [B, T, C] -> [B, T, C].
  Tensor forward(const Tensor& x, const AttentionContext& context, const HookScope& hooks = {});
  // The next n tokens x [B, n, C] of causal sequences, their padding [B, n] (or undefined) -> [B, n, C]:
  // the rows forward gives over the whole sequences (decoding: no graph, no hooks).
  Tensor forward_step(const Tensor& x, const Tensor& key_padding_mask, SelfAttentionState& state);

  std::shared_ptr<LayerNorm> norm1, norm2;
  std::shared_ptr<MultiHeadAttention> attn;
  std::shared_ptr<FeedForward> ff;
  std::shared_ptr<Dropout> drop;

 private:
  // The residual blocks around attention (given as a function of the attention's input) and the MLP.
  Tensor blocks_around(const Tensor& x, const std::function<Tensor(const Tensor&)>& attention, const HookScope& hooks);
  NormPlacement placement_;
};

// n_layers layers ("blocks.0", "blocks.1", ...) and, with pre-norm, a final LayerNorm ("final_norm").
class Encoder : public Module {
 public:
  Encoder(const EncoderConfig& config, Generator& gen, std::shared_ptr<const PositionalEncoding> rotary = nullptr);
  // x [B, T, C] (embeddings with positions added); key_padding_mask [B, T] bool or undefined. Returns the
  // last block's output, through the final norm when there is one.
  Tensor forward(const Tensor& x, const Tensor& key_padding_mask = Tensor(), const HookScope& hooks = {});
  // Decoding a causal stack: the state of `batch` empty sequences, and the output [B, n, C] of their next n
  // tokens x [B, n, C] (positions added) with their padding [B, n] (or undefined), as forward gives it
  // over the whole sequences. No graph, no hooks.
  StackState start_decoding(std::size_t batch) const;
  Tensor forward_step(const Tensor& x, const Tensor& key_padding_mask, StackState& state);
  const EncoderConfig& config() const { return config_; }

  std::vector<std::shared_ptr<EncoderLayer>> blocks;
  std::shared_ptr<LayerNorm> final_norm;  // pre-norm only

 private:
  EncoderConfig config_;
};

}  // namespace attnlab
