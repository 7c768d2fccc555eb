// The `softmax` kernel: scaled dot-product attention, softmax(Q K^T / sqrt(D)) V (Vaswani et al. 2017),
// with causal masking, key padding masks (a query whose keys are all masked gets zeros, never NaN) and
// dropout on the attention weights in training.
//
// Legend: B batch, H heads, Tq query tokens, Tk key tokens, D head dim.
#include <cmath>

#include "framework/attention/kernel.hpp"
#include "framework/attention/softmax/softmax_attention.hpp"

namespace attnlab {
namespace {

class SoftmaxKernel : public AttentionKernel {
 public:
  static constexpr const char* kName = "softmax";
  static constexpr const char* kDescription = "scaled dot-product attention, softmax(QK^T/sqrt(d))V; O(n^2) time, O(n d) memory";
  static KernelCapabilities declared_capabilities() { return {}; }
  struct Options {
    double dropout = 0.0;  // probability of zeroing an attention weight (training only)
    double scale = 0.0;    // 0: 1 / sqrt(D)
  };
  static Schema<Options> options_schema() {
    Schema<Options> s;
    s.field("dropout", &Options::dropout, "dropout on the attention weights (training only)", Range::closed_open(0.0, 1.0));
    s.field("scale", &Options::scale, "score scale; 0 means 1/sqrt(head_dim)", Range::at_least(0.0));
    return s;
  }

  SoftmaxKernel(const KernelSpec& spec, const Options& config, Generator& gen) : config_(config), gen_(gen.split()) {
    scale_ = config.scale > 0 ? config.scale : 1.0 / std::sqrt(static_cast<double>(spec.head_dim));
    register_generator("rng", &gen_);
  }

  AttentionResult forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionContext& context) override {
    const std::size_t batch = q.size(0), tk = k.size(-2);
    Tensor padding;  // [B, 1, 1, Tk]
    if (context.key_padding_mask.defined()) {
      check_key_padding_mask(context.key_padding_mask, batch, tk);
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
  Options config_;
  double scale_;
  Generator gen_;
};

}  // namespace

ATTNLAB_REGISTER_KERNEL(SoftmaxKernel);

}  // namespace attnlab
