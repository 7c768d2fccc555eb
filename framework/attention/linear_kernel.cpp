// The `linear` kernel (Katharopoulos et al. 2020, "Transformers are RNNs"): attention with a positive
// feature map phi in place of exp,
//   out_i = phi(q_i)^T S / (phi(q_i) . z + eps),  S = sum_j phi(k_j) v_j^T,  z = sum_j phi(k_j),
// with phi(x) = elu(x) + 1 (option: relu). Bidirectional: O(T D^2) through two products. Causal: the
// prefix sums of the fused causal_linear_attention op, O(T D^2) time and O(T D) training memory. Padded
// keys get phi(k) = 0, so they add nothing to S or z. The pattern is phi(q_i) . phi(k_j) normalised
// over j, the weights the values are actually mixed with.
//
// Legend: B batch, H heads, Tq query tokens, Tk key tokens, D head dim.
#include "framework/attention/feature_attention.hpp"
#include "framework/io/config_node.hpp"

namespace attnlab {
namespace {

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
    return feature_attention(features(q), features(k), v, context, config_.eps, "linear");
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
