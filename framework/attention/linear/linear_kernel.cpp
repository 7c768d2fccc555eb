// The `linear` kernel (Katharopoulos et al. 2020, "Transformers are RNNs"): attention with a positive
// feature map phi in place of exp,
//   out_i = phi(q_i)^T S / (phi(q_i) . z + eps),  S = sum_j phi(k_j) v_j^T,  z = sum_j phi(k_j),
// with phi(x) = elu(x) + 1 (option: relu). Bidirectional: O(T D^2) through two products. Causal: the
// prefix sums of the fused causal_linear_attention op, O(T D^2) time and O(T D) training memory. Padded
// keys get phi(k) = 0, so they add nothing to S or z. Decoding keeps S and z per head: O(D^2) per new
// token, whatever the length so far (an RNN, the paper's section 3.4). The pattern is
// phi(q_i) . phi(k_j) normalised over j, the weights the values are actually mixed with.
//
// Legend: B batch, H heads, Tq query tokens, Tk key tokens, D head dim.
#include "framework/attention/linear/feature_attention.hpp"

namespace attnlab {
namespace {

enum class FeatureMap { elu, relu };

class LinearKernel : public AttentionKernel {
 public:
  static constexpr const char* kName = "linear";
  static constexpr const char* kDescription =
      "linear attention, phi(Q)(phi(K)^T V) with phi = elu+1 (Katharopoulos et al. 2020); O(n d^2) time, O(n d) memory";
  static KernelCapabilities declared_capabilities() {
    KernelCapabilities c;
    c.incremental = true;  // S and z (feature_decode)
    return c;
  }
  struct Options {
    FeatureMap feature_map = FeatureMap::elu;
    double eps = 1e-6;  // added to the denominator
  };
  static Schema<Options> options_schema() {
    static const EnumNames<FeatureMap> maps{{"elu", FeatureMap::elu}, {"relu", FeatureMap::relu}};
    Schema<Options> s;
    s.choice("feature_map", &Options::feature_map, maps, "phi: elu(x)+1 or relu(x)");
    s.field("eps", &Options::eps, "added to the normaliser phi(q).z", Range::greater_than(0.0));
    return s;
  }

  static StateSize state_size(const KernelSpec& spec, const Options&) {
    const double d = static_cast<double>(spec.head_dim);
    return {static_cast<double>(spec.n_heads) * d * (d + 1), 0, "S = sum phi(k) v^T and z = sum phi(k), per head"};
  }
  LinearKernel(const KernelSpec& spec, const Options& config, Generator&) : config_(config), heads_(spec.n_heads), dim_(spec.head_dim) {}

  AttentionResult forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionContext& context) override {
    return feature_attention(features(q), features(k), v, context, config_.eps, "linear");
  }
  std::unique_ptr<DecodeState> start_decoding(std::size_t batch) const override {
    return std::make_unique<MatrixState>(batch, heads_, dim_, dim_ + 1);  // [S, z] per head
  }
  Tensor decode(DecodeState& state, const Tensor& q, const Tensor& k, const Tensor& v, const AttentionContext& context) override {
    return feature_decode(state_as<MatrixState>(state, name()), features(q), features(k), v, context.key_padding_mask, config_.eps);
  }

 private:
  Tensor features(const Tensor& x) const { return config_.feature_map == FeatureMap::elu ? add(elu(x), 1.0) : relu(x); }
  Options config_;
  std::size_t heads_, dim_;
};

}  // namespace

ATTNLAB_REGISTER_KERNEL(LinearKernel);

}  // namespace attnlab
