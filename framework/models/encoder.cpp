#include "framework/models/encoder.hpp"

#include <stdexcept>

namespace attnlab {
namespace {

class Blocks : public Module {
 public:
  void add(std::size_t i, std::shared_ptr<EncoderLayer> layer) { register_module(std::to_string(i), std::move(layer)); }
};

}  // namespace

NormPlacement parse_norm_placement(const std::string& name) {
  if (name == "pre") return NormPlacement::pre;
  if (name == "post") return NormPlacement::post;
  throw std::invalid_argument("norm '" + name + "' is not among [pre, post]");
}

const char* norm_placement_name(NormPlacement placement) { return placement == NormPlacement::pre ? "pre" : "post"; }

void EncoderConfig::validate(bool uses_padding_mask) const {
  if (d_model == 0) throw std::invalid_argument("d_model must be positive");
  if (n_layers == 0) throw std::invalid_argument("n_layers must be positive");
  if (max_len == 0) throw std::invalid_argument("max_len (block size) must be positive");
  check_heads_divide(d_model, n_heads);
  if (!(dropout >= 0.0 && dropout < 1.0)) throw std::invalid_argument("dropout must be in [0, 1), got " + std::to_string(dropout));
  check_kernel_capabilities(attention, KernelSpec{n_heads, head_dim(), max_len, causal}, uses_padding_mask);
}

EncoderLayer::EncoderLayer(const EncoderConfig& config, Generator& gen) : placement_(config.norm) {
  norm1 = register_module("norm1", std::make_shared<LayerNorm>(config.d_model, 1e-5, true, config.bias));
  auto kernel = make_kernel(config.attention, KernelSpec{config.n_heads, config.head_dim(), config.max_len, config.causal},
                            config.attention_options, gen, false, config.config_file);
  attn = register_module("attn", std::make_shared<MultiHeadAttention>(config.d_model, config.n_heads, kernel, config.bias, gen));
  norm2 = register_module("norm2", std::make_shared<LayerNorm>(config.d_model, 1e-5, true, config.bias));
  ff = register_module("ff", std::make_shared<FeedForward>(config.d_model, config.hidden(), config.activation,
                                                           config.dropout, gen, config.bias));
  drop = register_module("drop", std::make_shared<Dropout>(config.dropout, gen));
}

Tensor EncoderLayer::forward(const Tensor& x, const AttentionContext& context, const PositionalEncoding* rotary,
                             Tensor* pattern) {
  if (placement_ == NormPlacement::pre) {
    // x + Attn(LN(x)), then + FF(LN(x))
    // Each norm is fused into the projection after it (LN -> qkv, LN -> fc1): the same values, with one
    // [B, T, C] tensor less kept per norm for the backward.
    AttentionResult a = attn->forward(x, Tensor(), context, rotary, norm1.get());
    if (pattern) *pattern = a.pattern;
    const Tensor h = x + drop->forward(a.output);
    return h + ff->forward(h, *norm2);
  }
  // LN(x + Attn(x)), then LN(h + FF(h))
  AttentionResult a = attn->forward(x, Tensor(), context, rotary);
  if (pattern) *pattern = a.pattern;
  const Tensor h = norm1->forward(x + drop->forward(a.output));
  return norm2->forward(h + ff->forward(h));
}

Encoder::Encoder(const EncoderConfig& config, Generator& gen) : config_(config) {
  config.validate();
  auto holder = register_module("blocks", std::make_shared<Blocks>());
  for (std::size_t i = 0; i < config.n_layers; ++i) {
    blocks.push_back(std::make_shared<EncoderLayer>(config, gen));
    holder->add(i, blocks.back());
  }
  if (config.norm == NormPlacement::pre) {
    final_norm = register_module("final_norm", std::make_shared<LayerNorm>(config.d_model, 1e-5, true, config.bias));
  }
}

EncoderOutput Encoder::forward(const Tensor& x, const Tensor& key_padding_mask, bool need_patterns,
                               const PositionalEncoding* rotary) {
  if (x.dim() != 3 || x.size(2) != config_.d_model) {
    throw std::invalid_argument("Encoder: expected [B, T, " + std::to_string(config_.d_model) + "], got " + shape_str(x.shape()));
  }
  if (x.size(1) > config_.max_len) {
    throw std::invalid_argument("Encoder: a sequence of " + std::to_string(x.size(1)) + " tokens exceeds max_len " +
                                std::to_string(config_.max_len));
  }
  const AttentionContext context{config_.causal, key_padding_mask, need_patterns};
  EncoderOutput out;
  Tensor h = x;
  for (auto& block : blocks) {
    Tensor pattern;
    h = block->forward(h, context, rotary, need_patterns ? &pattern : nullptr);
    if (need_patterns) out.patterns.push_back(pattern);
  }
  out.hidden = final_norm ? final_norm->forward(h) : h;
  return out;
}

}  // namespace attnlab
