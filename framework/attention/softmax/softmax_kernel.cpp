// The `softmax` kernel: scaled dot-product attention, softmax(Q K^T / sqrt(D)) V (Vaswani et al. 2017),
// with causal masking, key padding masks (a query whose keys are all masked gets zeros, never NaN),
// ALiBi's bias and dropout on the attention weights in training. And `sliding_window`: the same softmax
// over the w keys before each query (and the w after it, when bidirectional) plus its own, as in
// Longformer's and Mistral's local attention, O(T w) in the blocked op. Both decode from a cache of keys
// and values (softmax/cached_attention.hpp): every token's for softmax, O(T D) per new token; the last
// w tokens' for the window, O(w D).
//
// Legend: B batch, H heads, Tq query tokens, Tk key tokens, D head dim.
#include <cmath>

#include "framework/attention/kernel.hpp"
#include "framework/attention/softmax/blocked_attention.hpp"
#include "framework/attention/softmax/cached_attention.hpp"
#include "framework/attention/softmax/softmax_attention.hpp"

namespace attnlab {
namespace {

// The context's key padding mask [B, Tk] as the fused op takes it, [B, 1, 1, Tk] (undefined: none).
Tensor padding_rows(const AttentionContext& context, std::size_t batch, std::size_t tk) {
  if (!context.key_padding_mask.defined()) return Tensor();
  check_key_padding_mask(context.key_padding_mask, batch, tk);
  return reshape(context.key_padding_mask, {static_cast<std::int64_t>(batch), 1, 1, static_cast<std::int64_t>(tk)});
}

// softmax(scale q k^T + bias) v within `window` (0: every key), through the fused op; with dropout in
// training, composed (the weights are then formed).
AttentionResult banded_softmax(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionContext& context, double scale,
                               std::size_t window, double dropout_p, bool training, Generator& gen) {
  const std::size_t tk = k.size(-2);
  const Tensor padding = padding_rows(context, q.size(0), tk);  // [B, 1, 1, Tk]
  const ScoreBand band{window, context.alibi_slopes};
  AttentionResult result;
  if (dropout_p == 0 || !training) {
    // One fused op: its backward recomputes the weights rather than keeping [B, H, Tq, Tk] per layer.
    Tensor weights;
    result.output = softmax_attention(q, k, v, scale, padding, context.causal, context.need_pattern ? &weights : nullptr, band);
    if (context.need_pattern) result.pattern = weights;
    return result;
  }
  const std::size_t tq = q.size(-2);
  Tensor scores = matmul(q, k, false, true);  // [B, H, Tq, Tk]
  double s = scale;
  if (!band.alibi_slopes.empty()) scores = scores * scale + alibi_bias(band.alibi_slopes, tq, tk, q.dtype()), s = 1.0;
  const Tensor weights = scaled_masked_softmax(scores, s, band_mask(padding, tq, tk, window), context.causal);
  result.output = matmul(dropout(weights, dropout_p, true, gen), v);  // [B, H, Tq, D]
  if (context.need_pattern) result.pattern = weights.detach();
  return result;
}

// The same through the fused op on heads still packed as the projection wrote them, qkv [B, T, 3 H D],
// returning them merged [B, T, H D]; undefined where the weights must be formed (dropout in training, a
// pattern asked for) or the shapes are not the blocked op's.
Tensor packed_softmax(const Tensor& qkv, std::size_t heads, const AttentionContext& context, double scale, std::size_t window,
                      double dropout_p, bool training) {
  if ((dropout_p > 0 && training) || context.need_pattern || qkv.dim() != 3) return Tensor();
  const Tensor padding = padding_rows(context, qkv.size(0), qkv.size(1));  // [B, 1, 1, T]
  if (!detail::packed_attention_applies(qkv, heads, padding)) return Tensor();
  return detail::blocked_softmax_attention_packed(qkv, heads, scale, padding, context.causal, ScoreBand{window, context.alibi_slopes});
}

class SoftmaxKernel : public AttentionKernel {
 public:
  static constexpr const char* kName = "softmax";
  static constexpr const char* kDescription = "scaled dot-product attention, softmax(QK^T/sqrt(d))V; O(n^2) time, O(n d) memory";
  static KernelCapabilities declared_capabilities() {
    KernelCapabilities c;
    c.alibi = true;
    c.incremental = true;  // a KV cache
    c.full_softmax = true;
    return c;
  }
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
  static StateSize state_size(const KernelSpec& spec, const Options&) {
    return {0, 2.0 * static_cast<double>(spec.n_heads * spec.head_dim), "keys and values of every token so far"};
  }
  SoftmaxKernel(const KernelSpec& spec, const Options& config, Generator& gen) : config_(config), gen_(gen.split()) {
    scale_ = config.scale > 0 ? config.scale : 1.0 / std::sqrt(static_cast<double>(spec.head_dim));
    register_generator("rng", &gen_);
  }

  AttentionResult forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionContext& context) override {
    return banded_softmax(q, k, v, context, scale_, 0, config_.dropout, is_training(), gen_);
  }
  Tensor forward_packed(const Tensor& qkv, std::size_t heads, const AttentionContext& context) override {
    return packed_softmax(qkv, heads, context, scale_, 0, config_.dropout, is_training());
  }
  std::unique_ptr<DecodeState> start_decoding(std::size_t batch) const override { return std::make_unique<KeyValueCache>(batch); }
  Tensor decode(DecodeState& state, const Tensor& q, const Tensor& k, const Tensor& v, const AttentionContext& context) override {
    return cached_softmax_attention(state_as<KeyValueCache>(state, name()), q, k, v, context, scale_, 0);
  }

 private:
  Options config_;
  double scale_;
  Generator gen_;
};

class SlidingWindowKernel : public AttentionKernel {
 public:
  static constexpr const char* kName = "sliding_window";
  static constexpr const char* kDescription =
      "softmax over the w keys before (and after, bidirectional) each query and its own (local attention, Beltagy et al. 2020); "
      "O(n w d) time, O(n d) memory";
  static KernelCapabilities declared_capabilities() {
    KernelCapabilities c;
    c.alibi = true;
    c.cross_attention = false;  // a window is a distance within one sequence
    c.incremental = true;       // the last w keys and values
    return c;
  }
  struct Options {
    std::size_t window = 16;  // w: keys on each side a query sees
    double dropout = 0.0;
  };
  static Schema<Options> options_schema() {
    Schema<Options> s;
    s.field("window", &Options::window,
            "w, per side: a query sees the w keys before it and its own (w + 1, Mistral's W = w), bidirectional also the w after "
            "it (2w + 1; Longformer's w is the whole window, w / 2 per side)",
            Range::at_least(1));
    s.field("dropout", &Options::dropout, "dropout on the attention weights (training only)", Range::closed_open(0.0, 1.0));
    return s;
  }
  static StateSize state_size(const KernelSpec& spec, const Options& o) {
    return {2.0 * static_cast<double>(spec.n_heads * spec.head_dim * o.window), 0, "keys and values of the last w tokens"};
  }
  SlidingWindowKernel(const KernelSpec& spec, const Options& config, Generator& gen)
      : config_(config), scale_(1.0 / std::sqrt(static_cast<double>(spec.head_dim))), gen_(gen.split()) {
    register_generator("rng", &gen_);
  }

  AttentionResult forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionContext& context) override {
    return banded_softmax(q, k, v, context, scale_, config_.window, config_.dropout, is_training(), gen_);
  }
  Tensor forward_packed(const Tensor& qkv, std::size_t heads, const AttentionContext& context) override {
    return packed_softmax(qkv, heads, context, scale_, config_.window, config_.dropout, is_training());
  }
  std::unique_ptr<DecodeState> start_decoding(std::size_t batch) const override {
    return std::make_unique<KeyValueCache>(batch, config_.window);
  }
  Tensor decode(DecodeState& state, const Tensor& q, const Tensor& k, const Tensor& v, const AttentionContext& context) override {
    return cached_softmax_attention(state_as<KeyValueCache>(state, name()), q, k, v, context, scale_, config_.window);
  }

 private:
  Options config_;
  double scale_;
  Generator gen_;
};

}  // namespace

ATTNLAB_REGISTER_KERNEL(SoftmaxKernel);
ATTNLAB_REGISTER_KERNEL(SlidingWindowKernel);

}  // namespace attnlab
