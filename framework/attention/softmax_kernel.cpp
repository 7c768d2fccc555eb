// The `softmax` kernel: scaled dot-product attention, softmax(Q K^T / sqrt(D)) V (Vaswani et al. 2017),
// with causal masking, key padding masks (a query whose keys are all masked gets zeros, never NaN) and
// dropout on the attention weights in training.
//
// Legend: B batch, H heads, Tq query tokens, Tk key tokens, D head dim.
#include <cmath>

#include "framework/attention/kernel.hpp"
#include "framework/io/config_node.hpp"

namespace attnlab {
namespace {

struct SoftmaxKernelConfig {
  double dropout = 0.0;  // probability of zeroing an attention weight (training only)
  double scale = 0.0;    // 0: 1 / sqrt(D)
};

class SoftmaxKernel : public AttentionKernel {
 public:
  SoftmaxKernel(const KernelSpec& spec, const SoftmaxKernelConfig& config, Generator& gen)
      : config_(config), gen_(gen.split()) {
    scale_ = config.scale > 0 ? config.scale : 1.0 / std::sqrt(static_cast<double>(spec.head_dim));
    register_generator("rng", &gen_);
  }

  std::string name() const override { return "softmax"; }
  KernelCapabilities capabilities() const override { return KernelCapabilities{}; }

  AttentionResult forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionContext& context) override {
    const std::size_t batch = q.size(0), tk = k.size(-2);
    Tensor padding;  // [B, 1, 1, Tk]
    if (context.key_padding_mask.defined()) {
      attention_mask(batch, 1, tk, AttentionContext{false, context.key_padding_mask, false});  // validates the shape
      padding = reshape(context.key_padding_mask, {static_cast<std::int64_t>(batch), 1, 1, static_cast<std::int64_t>(tk)});
    }
    AttentionResult result;
    if (config_.dropout == 0 || !is_training()) {
      // One fused op: its backward recomputes the weights rather than keeping [B, H, Tq, Tk] per layer.
      Tensor weights;
      result.output = softmax_attention(q, k, v, scale_, padding, context.causal, context.need_pattern ? &weights : nullptr);
      if (context.need_pattern) result.pattern = weights;
      return result;
    }
    const Tensor scores = matmul(q, k, false, true);                                      // [B, H, Tq, Tk]
    const Tensor weights = scaled_masked_softmax(scores, scale_, padding, context.causal); // [B, H, Tq, Tk]
    result.output = matmul(dropout(weights, config_.dropout, true, gen_), v);             // [B, H, Tq, D]
    if (context.need_pattern) result.pattern = weights.detach();
    return result;
  }

 private:
  SoftmaxKernelConfig config_;
  double scale_;
  Generator gen_;
};

std::shared_ptr<AttentionKernel> make_softmax(const KernelSpec& spec, const YAML::Node& options, const std::string& file,
                                              Generator& gen) {
  ConfigNode node(options, "model.attention.options", file);
  SoftmaxKernelConfig config;
  config.dropout = node.get("dropout", config.dropout, Range::closed_open(0.0, 1.0));
  config.scale = node.get("scale", config.scale, Range::at_least(0.0));
  node.finish();
  return std::make_shared<SoftmaxKernel>(spec, config, gen);
}

}  // namespace

ATTNLAB_REGISTER_KERNEL(softmax, (KernelInfo{
    "softmax",
    "scaled dot-product attention, softmax(QK^T/sqrt(d))V; O(n^2) time and memory",
    KernelCapabilities{},
    {{"dropout", "float in [0, 1)", "0.0", "dropout on the attention weights (training only)"},
     {"scale", "float >= 0", "0.0", "score scale; 0 means 1/sqrt(head_dim)"}},
    make_softmax}));

}  // namespace attnlab
