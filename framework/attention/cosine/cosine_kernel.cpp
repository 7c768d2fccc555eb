// The `cosine` kernel: the worked example of docs/attention.md ("Adding an attention kernel").
// Cosine-similarity attention (as in Swin Transformer v2): scores are the cosine of the angle between
// query and key, times a temperature, so no score can blow up with the norms of q and k:
//   out = softmax(tau * (q / |q|) . (k / |k|)) v
// Composed from differentiable ops, so its backward comes for free; causal and padding masks come from
// the fused scaled_masked_softmax. O(T^2 D) like softmax. Decoding keeps the keys and values of every
// token (a KV cache) and attends each new query over them, O(T D) per new token.
//
// Legend: B batch, H heads, Tq query tokens, Tk key tokens, D head dim.
#include "framework/attention/decode_state.hpp"
#include "framework/attention/kernel.hpp"

namespace attnlab {
namespace {

// The kernel: a Module deriving from AttentionKernel that states its facts once, as static members.
class CosineKernel : public AttentionKernel {
 public:
  // 1. Its name, a line saying what it computes, and what it can do.
  static constexpr const char* kName = "cosine";
  static constexpr const char* kDescription =
      "cosine-similarity attention, softmax(tau cos(q, k)) V (the worked example of docs/attention.md); O(n^2 d)";
  static KernelCapabilities declared_capabilities() {
    KernelCapabilities c;   // causal, bidirectional, padding masks, cross-attention, a normalised pattern
    c.incremental = true;   // continues a sequence from a cache of keys and values (5.)
    return c;
  }

  // 2. Its options with their defaults, and one description of each: the config reads them through it
  //    (unknown keys and bad values are errors with file:line:column), `attnlab list` and the docs show it.
  struct Options {
    double temperature = 10.0;  // tau: how sharp the softmax over cosines in [-1, 1] can get
  };
  static Schema<Options> options_schema() {
    Schema<Options> s;
    s.field("temperature", &Options::temperature, "tau, the scale of the cosines before the softmax", Range::greater_than(0.0));
    return s;
  }

  // 3. What it keeps per layer and sequence to continue a sequence token by token: like softmax, the keys
  //    and values of every token.
  static StateSize state_size(const KernelSpec& spec, const Options&) {
    return {0, 2.0 * static_cast<double>(spec.n_heads * spec.head_dim), "keys and values of every token so far"};
  }

  // 4. The constructor the registry calls with the model's spec and the options read from the config, and
  //    the forward.
  CosineKernel(const KernelSpec&, const Options& config, Generator&) : config_(config) {}

  AttentionResult forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionContext& context) override {
    Tensor padding;  // [B, 1, 1, Tk]
    if (context.key_padding_mask.defined()) {
      check_key_padding_mask(context.key_padding_mask, q.size(0), k.size(2));
      padding = reshape(context.key_padding_mask, {static_cast<std::int64_t>(k.size(0)), 1, 1, static_cast<std::int64_t>(k.size(2))});
    }
    const Tensor cosines = matmul(unit(q), unit(k), false, true);                                   // [B, H, Tq, Tk]
    const Tensor weights = scaled_masked_softmax(cosines, config_.temperature, padding, context.causal);  // rows sum to 1
    AttentionResult result;
    result.output = matmul(weights, v);  // [B, H, Tq, D]
    if (context.need_pattern) result.pattern = weights.detach();
    return result;
  }

  // 5. How it continues a causal sequence token by token (generation, beam search): the state it keeps, and
  //    the outputs of the new tokens from it. The new keys and values join a cache of every token's; the
  //    new queries attend over it through forward (the contract puts query i at key position i + Tk - Tq).
  std::unique_ptr<DecodeState> start_decoding(std::size_t batch) const override { return std::make_unique<KeyValueCache>(batch); }
  Tensor decode(DecodeState& state, const Tensor& q, const Tensor& k, const Tensor& v, const AttentionContext& context) override {
    KeyValueCache& cache = state_as<KeyValueCache>(state, name());
    cache.append(k, v, context.key_padding_mask);
    return forward(q, cache.keys(), cache.values(), cache.context(context)).output;
  }

 private:
  static Tensor unit(const Tensor& x) { return x / sqrt(add(sum(x * x, -1, true), 1e-12)); }  // x / |x|
  Options config_;
};

}  // namespace

// 6. One line registers it under its name.
ATTNLAB_REGISTER_KERNEL(CosineKernel);

}  // namespace attnlab
