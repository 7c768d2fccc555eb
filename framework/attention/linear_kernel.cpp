// The `linear` kernel (Katharopoulos et al. 2020, "Transformers are RNNs"): attention with a positive
// feature map phi in place of exp,
//   out_i = phi(q_i)^T S / (phi(q_i) . z + eps),  S = sum_j phi(k_j) v_j^T,  z = sum_j phi(k_j),
// with phi(x) = elu(x) + 1 (option: relu). Bidirectional: O(T D^2) through two products. Causal: the
// prefix sums of the fused causal_linear_attention op, O(T D^2) time and O(T D) training memory. Padded
// keys get phi(k) = 0, so they add nothing to S or z. The pattern is phi(q_i) . phi(k_j) normalised
// over j, the weights the values are actually mixed with.
//
// Legend: B batch, H heads, Tq query tokens, Tk key tokens, D head dim.
#include "framework/attention/kernel.hpp"
#include "framework/io/config_node.hpp"

namespace attnlab {
namespace {

using I = std::int64_t;

struct LinearKernelConfig {
  std::string feature_map = "elu";  // elu: elu(x) + 1; relu: relu(x)
  double eps = 1e-6;                // added to the denominator
};

class LinearKernel : public AttentionKernel {
 public:
  explicit LinearKernel(const LinearKernelConfig& config) : config_(config) {}
  std::string name() const override { return "linear"; }
  KernelCapabilities capabilities() const override { return KernelCapabilities{}; }

  AttentionResult forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionContext& context) override {
    const std::size_t batch = q.size(0), tq = q.size(2), tk = k.size(2);
    const Tensor fq = features(q);
    Tensor fk = features(k);  // [B, H, Tk, D]
    if (context.key_padding_mask.defined()) {
      attention_mask(batch, 1, tk, AttentionContext{false, context.key_padding_mask, false});  // validates the shape
      const Tensor keep = where(reshape(context.key_padding_mask, {static_cast<I>(batch), 1, static_cast<I>(tk), 1}),
                                zeros({}, fk.dtype()), ones({}, fk.dtype()));
      fk = fk * keep;
    }
    AttentionResult result;
    if (context.causal) {
      if (tq != tk) throw std::invalid_argument("linear attention: causal mode needs as many queries as keys");
      result.output = causal_linear_attention(fq, fk, v, config_.eps);  // [B, H, T, D]
    } else {
      const Tensor s = matmul(fk, v, true, false);                         // [B, H, D, D]
      const Tensor z = sum(fk, 2, true);                                   // [B, H, 1, D]
      const Tensor denominator = add(matmul(fq, z, false, true), config_.eps);  // [B, H, Tq, 1]
      result.output = matmul(fq, s) / denominator;                         // [B, H, Tq, D]
    }
    if (context.need_pattern) {
      NoGradGuard no_grad;
      Tensor a = matmul(fq, fk, false, true);  // [B, H, Tq, Tk]
      if (context.causal) a = masked_fill(a, attention_mask(1, tq, tk, AttentionContext{true, Tensor(), false}), 0.0);
      result.pattern = a / add(sum(a, -1, true), config_.eps);
    }
    return result;
  }

 private:
  Tensor features(const Tensor& x) const { return config_.feature_map == "elu" ? add(elu(x), 1.0) : relu(x); }
  LinearKernelConfig config_;
};

std::shared_ptr<AttentionKernel> make_linear(const KernelSpec&, const YAML::Node& options, const std::string& file,
                                             Generator&) {
  ConfigNode node(options, "model.attention.options", file);
  LinearKernelConfig config;
  config.feature_map = node.get_choice("feature_map", config.feature_map, {"elu", "relu"});
  config.eps = node.get("eps", config.eps, Range::greater_than(0.0));
  node.finish();
  return std::make_shared<LinearKernel>(config);
}

}  // namespace

ATTNLAB_REGISTER_KERNEL(linear, (KernelInfo{
    "linear",
    "linear attention, phi(Q)(phi(K)^T V) with phi = elu+1 (Katharopoulos et al. 2020); O(n d^2) time, O(n d) memory",
    KernelCapabilities{},
    {{"feature_map", "elu | relu", "elu", "phi: elu(x)+1 or relu(x)"},
     {"eps", "float > 0", "1e-6", "added to the normaliser phi(q).z"}},
    make_linear}));

}  // namespace attnlab
