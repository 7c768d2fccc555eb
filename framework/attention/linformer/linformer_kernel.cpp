// The `linformer` kernel (Wang et al. 2020, "Linformer: Self-Attention with Linear Complexity"): keys and
// values are projected along the sequence axis by learned E, F [k, max_len] to k positions, and queries
// attend to those: softmax(Q (E K)^T / sqrt(D)) (F V). O(T k D) time and memory. A sequence shorter than
// max_len uses the leading T columns of E and F; a longer one is an error. Padded keys and values are
// zeroed before the projection. Not causal: a projection mixes every position into every projected one.
//
// The pattern is the effective token-to-token mixing of values, P F [Tq, T] (P the attention over the
// projected positions): output = P F V exactly. F is learned and signed, so the rows do not sum to one
// (the kernel declares no normalised pattern).
//
// Legend: B batch, H heads, Tq query tokens, T key tokens, k projected length, D head dim.
#include <cmath>

#include "framework/attention/kernel.hpp"
#include "framework/attention/softmax/softmax_attention.hpp"

namespace attnlab {
namespace {

using I = std::int64_t;

class LinformerKernel : public AttentionKernel {
 public:
  static constexpr const char* kName = "linformer";
  static constexpr const char* kDescription =
      "keys and values projected to k positions along the sequence by learned E, F (Wang et al. 2020); O(n k d), not causal";
  static KernelCapabilities declared_capabilities() {
    KernelCapabilities c;
    c.causal = false;
    c.fixed_max_length = true;
    c.normalised_pattern = false;
    return c;
  }
  struct Options {
    std::size_t proj_dim = 64;  // k
    std::size_t max_len = 0;    // 0: the model's block size
    bool share_kv = false;      // one projection for keys and values (E = F)
  };
  static Schema<Options> options_schema() {
    Schema<Options> s;
    s.field("proj_dim", &Options::proj_dim, "k, the projected length", Range::closed(1, 1 << 20));
    s.field("max_len", &Options::max_len, "longest sequence, E and F are [k, max_len]; 0 means the model's block size",
            Range::closed(0, 1 << 24));
    s.field("share_kv", &Options::share_kv, "one projection for keys and values");
    return s;
  }
  static void check(const KernelSpec& spec, const Options& o, const ConfigNode& node) {
    if (o.max_len != 0 && spec.max_len > o.max_len) {
      node.fail("max_len", "'" + node.dotted("max_len") + "' (" + std::to_string(o.max_len) +
                               ") is shorter than the model's sequences (" + std::to_string(spec.max_len) + "); raise it or set 0");
    }
  }
  // E and F [k, max_len], and the projected keys and values [B, H, k, D].
  static double working_bytes(const KernelSpec& spec, const Options& o, std::size_t batch) {
    const double k = static_cast<double>(o.proj_dim), n = static_cast<double>(o.max_len ? o.max_len : spec.max_len);
    return 4 * 2 * k * n + 4 * 2 * static_cast<double>(batch) * static_cast<double>(spec.n_heads) * k * static_cast<double>(spec.head_dim);
  }

  static StateSize state_size(const KernelSpec& spec, const Options&) {
    return {0, 2.0 * static_cast<double>(spec.n_heads * spec.head_dim),
            "keys and values of the whole sequence (projected along it, no token-by-token form)"};
  }
  LinformerKernel(const KernelSpec& spec, const Options& options, Generator& gen)
      : config_(options), scale_(1.0 / std::sqrt(static_cast<double>(spec.head_dim))) {
    if (config_.max_len == 0) config_.max_len = spec.max_len;
    const Options& config = config_;
    NoGradGuard no_grad;
    const double std = 1.0 / std::sqrt(static_cast<double>(config.max_len));
    e_ = register_parameter("e", randn({config.proj_dim, config.max_len}, gen, {}, 0.0, std), ParamKind::weight);
    if (!config.share_kv) f_ = register_parameter("f", randn({config.proj_dim, config.max_len}, gen, {}, 0.0, std), ParamKind::weight);
  }

  AttentionResult forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionContext& context) override {
    if (context.causal) {
      throw std::invalid_argument("linformer does not support causal attention: its projection mixes every position into every "
                                  "projected one");
    }
    const std::size_t batch = k.size(0), n = k.size(2);
    if (n > config_.max_len) {
      throw std::invalid_argument("linformer: a sequence of " + std::to_string(n) + " keys exceeds max_len " +
                                  std::to_string(config_.max_len) + "; raise model.attention.options.max_len");
    }
    Tensor keys = k, values = v, keep;
    if (context.key_padding_mask.defined()) {
      check_key_padding_mask(context.key_padding_mask, batch, n);
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
      result.pattern = mixing;
    }
    return result;
  }

 private:
  Options config_;
  double scale_;
  Tensor e_, f_;  // [k, max_len]
};

}  // namespace

ATTNLAB_REGISTER_KERNEL(LinformerKernel);

}  // namespace attnlab
