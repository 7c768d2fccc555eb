#include "framework/models/model.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace attnlab {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

void fill_normal(Tensor& t, Generator& gen, double stddev) {
  t.set_data(randn(t.shape(), gen, t.dtype(), 0.0, stddev));
  t.set_requires_grad(true);
}

}  // namespace

const EnumNames<Pooling>& pooling_names() {
  static const EnumNames<Pooling> names{{"mean", Pooling::mean}, {"cls", Pooling::cls}};
  return names;
}

Pooling parse_pooling(const std::string& name) { return parse_enum(pooling_names(), name, "pooling"); }

const char* pooling_name(Pooling pooling) { return enum_name(pooling_names(), pooling); }

ModelOutput Model::forward(const Batch& batch, const ForwardOptions& options) {
  ModelOutput out;
  if (options.hooks.empty()) {
    out.logits = run(batch, HookScope());
    return out;
  }
  ActivationHooks hooks(options.hooks);
  out.logits = run(batch, HookScope(&hooks, ""));
  hooks.check_all_matched();
  out.cache = hooks.take_cache();
  return out;
}

Tensor Model::readout(const Tensor& stream, const Batch& batch, bool normalize, bool bias) const {
  const LayerNorm* norm = final_norm();
  const Tensor pooled = pool(normalize && norm ? norm->forward(stream) : stream, batch);
  const Linear& out = output_layer();
  return bias ? out.forward(pooled) : matmul(pooled, out.weight, false, true);
}

template <>
ModelRegistry& ModelRegistry::instance() {
  static ModelRegistry registry("model kind");
  return registry;
}

std::shared_ptr<Model> make_model(const ModelConfig& config, const DataShape& shape, Generator& gen) {
  return ModelRegistry::instance().find(config.kind.name).make(config, shape, gen);
}

void check_finite_scores(const std::vector<double>& scores, const std::string& who) {
  for (double v : scores) {
    if (std::isnan(v) || (std::isinf(v) && v > 0)) {
      throw std::runtime_error(who + ": the model's next-token scores are not finite (" + (std::isnan(v) ? "NaN" : "inf") +
                               "); its weights give no usable outputs (did the run diverge?)");
    }
  }
}

std::vector<KernelUse> kernel_uses(const ModelConfig& config, const DataShape& shape) {
  const ModelKindInfo& kind = ModelRegistry::instance().find(config.kind.name);
  if (kind.kernels) return kind.kernels(config, shape);
  const EncoderConfig stack = kind.stack(config, shape);
  KernelUse use;
  use.key = "model.attention";
  use.name = stack.attention;
  use.options = stack.attention_options;
  use.spec = stack.kernel_spec();
  use.layers = stack.n_layers;
  return {use};
}

ModelSize blocks_size(const EncoderConfig& e, std::size_t layers, double tokens) {
  const double width = static_cast<double>(e.d_model), hidden = e.feed_forward ? static_cast<double>(e.hidden()) : 0.0;
  const double n = static_cast<double>(layers);
  // Per block: q, k, v and output projections, two feed-forward layers, norms and biases; a step keeps
  // about 14 C + 3 H numbers per token of each block for its backward.
  return {n * (4 * width * width + 2 * width * hidden + 9 * width + hidden), tokens * n * (14 * width + 3 * hidden)};
}

std::vector<Model::AttentionPart> Model::attention_parts() const {
  AttentionPart part;
  part.feed_forward = feed_forward();
  for (std::size_t l = 0; l < n_layers(); ++l) part.pattern_hooks.push_back("blocks." + std::to_string(l) + ".attn.hook_pattern");
  return {part};
}

void gpt_init(Module& model, std::size_t n_layers, Generator& gen, InitScheme scheme) {
  NoGradGuard no_grad;
  const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(std::max<std::size_t>(n_layers, 1)));
  const bool fan_in = scheme == InitScheme::fan_in;
  // fan_in: N(0, 1/sqrt(fan-in)) for a Linear's [out, in] weight, N(0, 1/sqrt(width)) for an embedding's [n, width].
  const auto inverse_root = [](const Tensor& t) { return 1.0 / std::sqrt(static_cast<double>(t.size(t.dim() - 1))); };
  for (auto& p : model.named_parameters()) {
    // Kernels' parameters and the short convolution keep their own initialisation.
    if (p.name.find(".kernel.") != std::string::npos || p.name.find(".short_conv.") != std::string::npos) continue;
    switch (p.kind) {
      case ParamKind::weight:
        fill_normal(p.tensor, gen, fan_in ? inverse_root(p.tensor)
                                          : ends_with(p.name, "attn.proj.weight") || ends_with(p.name, "ff.fc2.weight") ? residual_std : 0.02);
        break;
      case ParamKind::embedding: fill_normal(p.tensor, gen, fan_in ? inverse_root(p.tensor) : 0.02); break;
      case ParamKind::bias: p.tensor.set_data(zeros(p.tensor.shape(), p.tensor.dtype())), p.tensor.set_requires_grad(true); break;
      case ParamKind::norm: break;  // LayerNorm's own 1 and 0
    }
  }
}

}  // namespace attnlab
