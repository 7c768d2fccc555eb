#include "framework/models/decoder.hpp"

#include <stdexcept>

namespace attnlab {

DecoderLayer::DecoderLayer(const EncoderConfig& self, const EncoderConfig& cross, Generator& gen,
                           std::shared_ptr<const PositionalEncoding> rotary)
    : placement_(self.norm) {
  if (!self.causal) throw std::invalid_argument("DecoderLayer: the decoder's self-attention must be causal");
  const bool pre = self.norm == NormPlacement::pre;
  const auto norm = [&](const char* name) {
    return self.norm == NormPlacement::none ? std::shared_ptr<LayerNorm>()
                                            : register_module(name, std::make_shared<LayerNorm>(self.d_model, 1e-5, true, self.bias));
  };
  norm1 = norm("norm1");
  auto self_kernel = make_kernel(self.attention, self.kernel_spec(), ComponentOptions(self.attention_options.node()), gen);
  attn = register_module("attn", std::make_shared<MultiHeadAttention>(self.d_model, self.n_heads, self_kernel, self.bias, gen,
                                                                      pre ? norm1 : nullptr, std::move(rotary),
                                                                      self.attention_setup()));
  norm2 = norm("norm2");
  KernelSpec cross_spec = cross.kernel_spec();
  cross_spec.causal = false;
  cross_spec.cross = true;
  cross_spec.alibi = false;  // ALiBi's distances are within one sequence; cross-attention has none
  auto cross_kernel = make_kernel(cross.attention, cross_spec, ComponentOptions(cross.attention_options.node()), gen);
  cross_attn = register_module("cross_attn", std::make_shared<MultiHeadAttention>(self.d_model, self.n_heads, cross_kernel, self.bias,
                                                                                  gen, pre ? norm2 : nullptr));
  if (self.feed_forward) {
    norm3 = norm("norm3");
    ff = register_module("ff", std::make_shared<FeedForward>(self.d_model, self.hidden(), self.activation, self.dropout, gen, self.bias,
                                                             pre ? norm3 : nullptr));
  }
  drop = register_module("drop", std::make_shared<Dropout>(self.dropout, gen));
}

Tensor DecoderLayer::forward(const Tensor& input, const Tensor& memory, const AttentionContext& self_context,
                             const AttentionContext& cross_context, const HookScope& hooks) {
  return blocks_around(
      input, [&](const Tensor& x) { return attn->self_attention(x, self_context, hooks.child("attn")); },
      [&](const Tensor& h) { return cross_attn->cross_attention(h, memory, cross_context, hooks.child("cross_attn")); }, hooks);
}

Tensor DecoderLayer::forward_step(const Tensor& x, const Tensor& padding_mask, SelfAttentionState& self, const CrossAttentionState& cross) {
  return blocks_around(
      x, [&](const Tensor& t) { return attn->self_attention_step(t, padding_mask, self); },
      [&](const Tensor& h) { return cross_attn->cross_attention_step(h, cross); }, HookScope());
}

Tensor DecoderLayer::blocks_around(const Tensor& input, const std::function<Tensor(const Tensor&)>& self_attention,
                                   const std::function<Tensor(const Tensor&)>& cross_attention, const HookScope& hooks) {
  const Tensor x = hooks("hook_resid_pre", input);
  const Tensor a = hooks("hook_attn_out", drop->forward(self_attention(x)));
  if (placement_ != NormPlacement::post) {
    // x + SelfAttn(LN(x)), + CrossAttn(LN(h), memory), + FF(LN(h)); the norms live inside the modules
    // (none: the same sums without norms).
    const Tensor h = hooks("hook_resid_mid", x + a);
    const Tensor c = hooks("hook_cross_attn_out", drop->forward(cross_attention(h)));
    if (!ff) return hooks("hook_resid_post", h + c);
    const Tensor h2 = hooks("hook_resid_mid_cross", h + c);
    return hooks("hook_resid_post", h2 + hooks("hook_mlp_out", ff->forward(h2)));
  }
  // LN(x + SelfAttn(x)), LN(h + CrossAttn(h, memory)), LN(h + FF(h))
  const Tensor h = hooks("hook_resid_mid", norm1->forward(x + a));
  const Tensor c = hooks("hook_cross_attn_out", drop->forward(cross_attention(h)));
  if (!ff) return hooks("hook_resid_post", norm2->forward(h + c));
  const Tensor h2 = hooks("hook_resid_mid_cross", norm2->forward(h + c));
  return hooks("hook_resid_post", norm3->forward(h2 + hooks("hook_mlp_out", ff->forward(h2))));
}

Decoder::Decoder(const EncoderConfig& self, const EncoderConfig& cross, Generator& gen, std::shared_ptr<const PositionalEncoding> rotary)
    : config_(self) {
  self.validate();
  auto holder = register_module("blocks", std::make_shared<ModuleList>());
  for (std::size_t i = 0; i < self.n_layers; ++i) {
    blocks.push_back(std::make_shared<DecoderLayer>(self, cross, gen, rotary));
    holder->add(blocks.back());
  }
  if (self.norm == NormPlacement::pre) {
    final_norm = register_module("final_norm", std::make_shared<LayerNorm>(self.d_model, 1e-5, true, self.bias));
  }
}

void DecoderState::select_rows(const std::vector<std::size_t>& rows) {
  for (SelfAttentionState& layer : self) layer.select_rows(rows);
  for (CrossAttentionState& layer : cross) layer.select_rows(rows);
}

DecoderState Decoder::start_decoding(const Tensor& memory, const Tensor& memory_padding_mask) const {
  DecoderState state;
  for (const auto& block : blocks) {
    state.self.push_back(block->attn->start_decoding(memory.size(0)));
    state.cross.push_back(block->cross_attn->start_cross_attention(memory, memory_padding_mask));
  }
  return state;
}

Tensor Decoder::forward_step(const Tensor& x, const Tensor& padding_mask, DecoderState& state) {
  if (x.dim() != 3 || x.size(2) != config_.d_model || state.self.size() != blocks.size()) {
    throw std::invalid_argument("Decoder: expected [B, n, " + std::to_string(config_.d_model) + "] and a state from start_decoding, got " +
                                shape_str(x.shape()));
  }
  if (state.position + x.size(1) > config_.max_len) {
    throw std::invalid_argument("Decoder: a target of " + std::to_string(state.position + x.size(1)) + " tokens exceeds max_len " +
                                std::to_string(config_.max_len));
  }
  NoGradGuard no_grad;
  Tensor h = x;
  for (std::size_t i = 0; i < blocks.size(); ++i) h = blocks[i]->forward_step(h, padding_mask, state.self[i], state.cross[i]);
  state.position += x.size(1);
  return final_norm ? final_norm->forward(h) : h;
}

Tensor Decoder::forward(const Tensor& x, const Tensor& padding_mask, const Tensor& memory, const Tensor& memory_padding_mask,
                        const HookScope& hooks) {
  if (x.dim() != 3 || x.size(2) != config_.d_model) {
    throw std::invalid_argument("Decoder: expected [B, T, " + std::to_string(config_.d_model) + "], got " + shape_str(x.shape()));
  }
  if (x.size(1) > config_.max_len) {
    throw std::invalid_argument("Decoder: a target of " + std::to_string(x.size(1)) + " tokens exceeds max_len " + std::to_string(config_.max_len));
  }
  const AttentionContext self_context{true, padding_mask, false};
  const AttentionContext cross_context{false, memory_padding_mask, false};
  Tensor h = x;
  for (std::size_t i = 0; i < blocks.size(); ++i)
    h = blocks[i]->forward(h, memory, self_context, cross_context, hooks.active() ? hooks.child("blocks." + std::to_string(i)) : HookScope());
  return final_norm ? hooks.child("final_norm")("hook_normalized", final_norm->forward(h)) : h;
}

}  // namespace attnlab
