// The `linformer` kernel (Wang et al. 2020, "Linformer: Self-Attention with Linear Complexity"): keys and
// values are projected along the sequence axis by learned E, F [k, max_len] to k positions, and queries
// attend to those: softmax(Q (E K)^T / sqrt(D)) (F V). O(T k D) time and memory. A sequence shorter than
// max_len uses the leading T columns of E and F; a longer one is an error. Padded keys and values are
// zeroed before the projection. Not causal: a projection mixes every position into every projected one.
//
// The pattern is the effective token-to-token mixing of values, P F [Tq, T] (P the attention over the
// projected positions), with each row divided by its sum so that rows sum to one like every kernel's.
//
// Legend: B batch, H heads, Tq query tokens, T key tokens, k projected length, D head dim.
#include <cmath>

#include "framework/attention/kernel.hpp"
#include "framework/io/config_node.hpp"

namespace attnlab {
namespace {

using I = std::int64_t;

struct LinformerKernelConfig {
  std::size_t proj_dim = 64;  // k
  std::size_t max_len = 0;    // 0: the model's block size
  bool share_kv = false;      // one projection for keys and values (E = F)
};

class LinformerKernel : public AttentionKernel {
 public:
  LinformerKernel(const KernelSpec& spec, const LinformerKernelConfig& config, Generator& gen)
      : config_(config), scale_(1.0 / std::sqrt(static_cast<double>(spec.head_dim))) {
    NoGradGuard no_grad;
    const double std = 1.0 / std::sqrt(static_cast<double>(config.max_len));
    e_ = register_parameter("e", randn({config.proj_dim, config.max_len}, gen, {}, 0.0, std), ParamKind::weight);
    if (!config.share_kv) f_ = register_parameter("f", randn({config.proj_dim, config.max_len}, gen, {}, 0.0, std), ParamKind::weight);
  }
  std::string name() const override { return "linformer"; }
  KernelCapabilities capabilities() const override { return linformer_capabilities(); }
  static KernelCapabilities linformer_capabilities() {
    KernelCapabilities c;
    c.causal = false;
    c.fixed_max_length = true;
    return c;
  }

  AttentionResult forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionContext& context) override {
    if (context.causal) {
      throw std::invalid_argument("linformer does not support causal attention; use softmax, linear, sparse or performer");
    }
    const std::size_t batch = k.size(0), n = k.size(2);
    if (n > config_.max_len) {
      throw std::invalid_argument("linformer: a sequence of " + std::to_string(n) + " keys exceeds max_len " +
                                  std::to_string(config_.max_len) + "; raise model.attention.options.max_len");
    }
    Tensor keys = k, values = v, keep;
    if (context.key_padding_mask.defined()) {
      attention_mask(batch, 1, n, AttentionContext{false, context.key_padding_mask, false});  // validates the shape
      keep = where(reshape(context.key_padding_mask, {static_cast<I>(batch), 1, static_cast<I>(n), 1}), zeros({}, k.dtype()),
                   ones({}, k.dtype()));  // [B, 1, T, 1]
      keys = keys * keep;
      values = values * keep;
    }
    const Tensor e = slice(e_, 1, 0, static_cast<I>(n));                         // [k, T]
    const Tensor f = config_.share_kv ? e : slice(f_, 1, 0, static_cast<I>(n));  // [k, T]
    const Tensor projected_keys = matmul(e, keys);                                // [B, H, k, D]
    const Tensor projected_values = matmul(f, values);                            // [B, H, k, D]
    // Attention over the k projected keys as one op (blocks of queries, no [B, H, Tq, k] tensor kept);
    // the weights are formed only when a pattern is asked for.
    Tensor weights;
    AttentionResult result;
    result.output = softmax_attention(q, projected_keys, projected_values, scale_, Tensor(), false,
                                      context.need_pattern ? &weights : nullptr);  // [B, H, Tq, D]
    if (context.need_pattern) {
      NoGradGuard no_grad;
      Tensor mixing = matmul(weights, f);  // [B, H, Tq, T]
      if (keep.defined()) mixing = mixing * transpose(keep, 2, 3);  // padded values are zero: so is their weight
      const Tensor total = sum(mixing, -1, true);
      result.pattern = mixing / where(total.to(DType::boolean), total, ones({}, total.dtype()));
    }
    return result;
  }

 private:
  LinformerKernelConfig config_;
  double scale_;
  Tensor e_, f_;  // [k, max_len]
};

std::shared_ptr<AttentionKernel> make_linformer(const KernelSpec& spec, const YAML::Node& options, const std::string& file,
                                                Generator& gen) {
  ConfigNode node(options, "model.attention.options", file);
  LinformerKernelConfig config;
  config.proj_dim = node.get<std::size_t>("proj_dim", config.proj_dim, Range::at_least(1));
  config.max_len = node.get<std::size_t>("max_len", spec.max_len, Range::at_least(1));
  config.share_kv = node.get("share_kv", config.share_kv);
  if (spec.max_len > config.max_len) {
    node.fail("max_len", "model.attention.options.max_len (" + std::to_string(config.max_len) +
                             ") is shorter than the model's sequences (" + std::to_string(spec.max_len) + "); raise it");
  }
  node.finish();
  return std::make_shared<LinformerKernel>(spec, config, gen);
}

}  // namespace

ATTNLAB_REGISTER_KERNEL(linformer, (KernelInfo{
    "linformer",
    "keys and values projected to k positions along the sequence by learned E, F (Wang et al. 2020); O(n k d), not causal",
    LinformerKernel::linformer_capabilities(),
    {{"proj_dim", "int >= 1", "64", "k, the projected length"},
     {"max_len", "int >= 1", "block size", "longest sequence; E and F are [k, max_len]"},
     {"share_kv", "bool", "false", "one projection for keys and values"}},
    make_linformer}));

}  // namespace attnlab
