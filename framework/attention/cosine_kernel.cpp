// The `cosine` kernel: the worked example of docs/attention.md ("Adding an attention kernel").
// Cosine-similarity attention (as in Swin Transformer v2): scores are the cosine of the angle between
// query and key, times a temperature, so no score can blow up with the norms of q and k:
//   out = softmax(tau * (q / |q|) . (k / |k|)) v
// Composed from differentiable ops, so its backward comes for free; causal and padding masks come from
// the fused scaled_masked_softmax. O(T^2 D) like softmax.
//
// Legend: B batch, H heads, Tq query tokens, Tk key tokens, D head dim.
#include "framework/attention/kernel.hpp"
#include "framework/io/config_node.hpp"

namespace attnlab {
namespace {

// 1. The kernel's options, with their defaults.
struct CosineKernelConfig {
  double temperature = 10.0;  // tau: how sharp the softmax over cosines in [-1, 1] can get
};

// 2. The kernel: a Module deriving from AttentionKernel.
class CosineKernel : public AttentionKernel {
 public:
  explicit CosineKernel(const CosineKernelConfig& config) : config_(config) {}
  std::string name() const override { return "cosine"; }
  KernelCapabilities capabilities() const override { return KernelCapabilities{}; }  // everything

  AttentionResult forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionContext& context) override {
    Tensor padding;  // [B, 1, 1, Tk]
    if (context.key_padding_mask.defined()) {
      attention_mask(q.size(0), 1, k.size(2), AttentionContext{false, context.key_padding_mask, false});  // checks the shape
      padding = reshape(context.key_padding_mask, {static_cast<std::int64_t>(k.size(0)), 1, 1, static_cast<std::int64_t>(k.size(2))});
    }
    const Tensor cosines = matmul(unit(q), unit(k), false, true);                                   // [B, H, Tq, Tk]
    const Tensor weights = scaled_masked_softmax(cosines, config_.temperature, padding, context.causal);  // rows sum to 1
    AttentionResult result;
    result.output = matmul(weights, v);  // [B, H, Tq, D]
    if (context.need_pattern) result.pattern = weights.detach();
    return result;
  }

 private:
  static Tensor unit(const Tensor& x) { return x / sqrt(add(sum(x * x, -1, true), 1e-12)); }  // x / |x|
  CosineKernelConfig config_;
};

// 3. The factory: reads and validates the options node (unknown keys and bad values are config errors
//    with file:line:column), then builds the kernel.
std::shared_ptr<AttentionKernel> make_cosine(const KernelSpec&, const YAML::Node& options, const std::string& file, Generator&) {
  ConfigNode node(options, "model.attention.options", file);
  CosineKernelConfig config;
  config.temperature = node.get("temperature", config.temperature, Range::greater_than(0.0));
  node.finish();
  return std::make_shared<CosineKernel>(config);
}

}  // namespace

// 4. One line registers it under its name, with its capabilities and documented options.
ATTNLAB_REGISTER_KERNEL(cosine, (KernelInfo{
    "cosine",
    "cosine-similarity attention, softmax(tau cos(q, k)) V (the worked example of docs/attention.md); O(n^2 d)",
    KernelCapabilities{},
    {{"temperature", "float > 0", "10.0", "tau, the scale of the cosines before the softmax"}},
    make_cosine}));

}  // namespace attnlab
