#include "framework/models/encoder.hpp"

#include <stdexcept>

namespace attnlab {
const EnumNames<NormPlacement>& norm_placement_names() {
  static const EnumNames<NormPlacement> names{{"pre", NormPlacement::pre}, {"post", NormPlacement::post}, {"none", NormPlacement::none}};
  return names;
}

const EnumNames<InitScheme>& init_scheme_names() {
  static const EnumNames<InitScheme> names{{"gpt2", InitScheme::gpt2}, {"fan_in", InitScheme::fan_in}};
  return names;
}

NormPlacement parse_norm_placement(const std::string& name) { return parse_enum(norm_placement_names(), name, "norm"); }

const char* norm_placement_name(NormPlacement placement) { return enum_name(norm_placement_names(), placement); }

void EncoderConfig::validate() const {
  if (d_model == 0) throw std::invalid_argument("d_model must be positive");
  if (n_layers == 0) throw std::invalid_argument("n_layers must be positive");
  if (max_len == 0) throw std::invalid_argument("max_len (block size) must be positive");
  check_heads_divide(d_model, n_heads);
  if (!(dropout >= 0.0 && dropout < 1.0)) throw std::invalid_argument("dropout must be in [0, 1), got " + std::to_string(dropout));
  check_kernel_capabilities(attention, kernel_spec());
}

EncoderLayer::EncoderLayer(const EncoderConfig& config, Generator& gen, std::shared_ptr<const PositionalEncoding> rotary)
    : placement_(config.norm) {
  const bool pre = config.norm == NormPlacement::pre, normed = config.norm != NormPlacement::none;
  if (normed) norm1 = register_module("norm1", std::make_shared<LayerNorm>(config.d_model, 1e-5, true, config.bias));
  auto kernel = make_kernel(config.attention, config.kernel_spec(), ComponentOptions(config.attention_options.node()), gen);
  // Pre-norm: each norm is fused into the projection after it (LN -> qkv, LN -> fc1): the same values,
  // with one [B, T, C] tensor less kept per norm for the backward.
  attn = register_module("attn", std::make_shared<MultiHeadAttention>(config.d_model, config.n_heads, kernel, config.bias, gen,
                                                                      pre ? norm1 : nullptr, std::move(rotary),
                                                                      config.attention_setup()));
  if (config.feed_forward) {
    if (normed) norm2 = register_module("norm2", std::make_shared<LayerNorm>(config.d_model, 1e-5, true, config.bias));
    ff = register_module("ff", std::make_shared<FeedForward>(config.d_model, config.hidden(), config.activation, config.dropout,
                                                             gen, config.bias, pre ? norm2 : nullptr));
  }
  drop = register_module("drop", std::make_shared<Dropout>(config.dropout, gen));
}

Tensor EncoderLayer::forward(const Tensor& input, const AttentionContext& context, const HookScope& hooks) {
  return blocks_around(input, [&](const Tensor& x) { return attn->self_attention(x, context, hooks.child("attn")); }, hooks);
}

Tensor EncoderLayer::forward_step(const Tensor& x, const Tensor& key_padding_mask, SelfAttentionState& state) {
  return blocks_around(x, [&](const Tensor& h) { return attn->self_attention_step(h, key_padding_mask, state); }, HookScope());
}

Tensor EncoderLayer::blocks_around(const Tensor& input, const std::function<Tensor(const Tensor&)>& attention, const HookScope& hooks) {
  const Tensor x = hooks("hook_resid_pre", input);
  const Tensor a = hooks("hook_attn_out", drop->forward(attention(x)));
  const bool residual_first = placement_ != NormPlacement::post;  // pre-norm, or no norm at all
  if (!ff) return hooks("hook_resid_post", residual_first ? x + a : norm1->forward(x + a));
  if (residual_first) {
    // x + Attn(LN(x)), then + FF(LN(x)); the norms live inside attn and ff (none: x + Attn(x), + FF(h)).
    const Tensor h = hooks("hook_resid_mid", x + a);
    return hooks("hook_resid_post", h + hooks("hook_mlp_out", ff->forward(h)));
  }
  // LN(x + Attn(x)), then LN(h + FF(h))
  const Tensor h = hooks("hook_resid_mid", norm1->forward(x + a));
  return hooks("hook_resid_post", norm2->forward(h + hooks("hook_mlp_out", ff->forward(h))));
}

Encoder::Encoder(const EncoderConfig& config, Generator& gen, std::shared_ptr<const PositionalEncoding> rotary) : config_(config) {
  config.validate();
  auto holder = register_module("blocks", std::make_shared<ModuleList>());
  for (std::size_t i = 0; i < config.n_layers; ++i) {
    blocks.push_back(std::make_shared<EncoderLayer>(config, gen, rotary));
    holder->add(blocks.back());
  }
  if (config.norm == NormPlacement::pre) {
    final_norm = register_module("final_norm", std::make_shared<LayerNorm>(config.d_model, 1e-5, true, config.bias));
  }
}

void StackState::select_rows(const std::vector<std::size_t>& rows) {
  for (SelfAttentionState& layer : layers) layer.select_rows(rows);
}

StackState Encoder::start_decoding(std::size_t batch) const {
  if (!config_.causal) throw std::invalid_argument("Encoder: only a causal stack continues sequences token by token");
  StackState state;
  for (const auto& block : blocks) state.layers.push_back(block->attn->start_decoding(batch));
  return state;
}

Tensor Encoder::forward_step(const Tensor& x, const Tensor& key_padding_mask, StackState& state) {
  if (x.dim() != 3 || x.size(2) != config_.d_model || state.layers.size() != blocks.size()) {
    throw std::invalid_argument("Encoder: expected [B, n, " + std::to_string(config_.d_model) + "] and a state from start_decoding, got " +
                                shape_str(x.shape()));
  }
  if (state.position + x.size(1) > config_.max_len) {
    throw std::invalid_argument("Encoder: " + std::to_string(state.position + x.size(1)) + " tokens exceed max_len " + std::to_string(config_.max_len));
  }
  NoGradGuard no_grad;
  Tensor h = x;
  for (std::size_t i = 0; i < blocks.size(); ++i) h = blocks[i]->forward_step(h, key_padding_mask, state.layers[i]);
  state.position += x.size(1);
  return final_norm ? final_norm->forward(h) : h;
}

Tensor Encoder::forward(const Tensor& x, const Tensor& key_padding_mask, const HookScope& hooks) {
  if (x.dim() != 3 || x.size(2) != config_.d_model) {
    throw std::invalid_argument("Encoder: expected [B, T, " + std::to_string(config_.d_model) + "], got " + shape_str(x.shape()));
  }
  if (x.size(1) > config_.max_len) {
    throw std::invalid_argument("Encoder: a sequence of " + std::to_string(x.size(1)) + " tokens exceeds max_len " +
                                std::to_string(config_.max_len));
  }
  const AttentionContext context{config_.causal, key_padding_mask, false};
  Tensor h = x;
  for (std::size_t i = 0; i < blocks.size(); ++i)
    h = blocks[i]->forward(h, context, hooks.active() ? hooks.child("blocks." + std::to_string(i)) : HookScope());
  return final_norm ? hooks.child("final_norm")("hook_normalized", final_norm->forward(h)) : h;
}

}  // namespace attnlab
