// The `performer` kernel: FAVOR+ (Choromanski et al. 2020, "Rethinking Attention with Performers").
// softmax attention's kernel exp(q.k / sqrt(D)) is estimated without bias by positive random features
//   phi(x) = exp(w_r . x' - |x'|^2 / 2) / sqrt(m),  r = 1..m,  x' = x / D^(1/4),
// with the w_r drawn as blocks of D orthogonal Gaussian directions whose lengths follow the chi(D)
// distribution of a Gaussian vector's norm. The estimate sharpens as m grows; the mixing then runs as in
// linear attention (O(T m D), causal through prefix sums). Stabilisers keep the exponentials in range and
// cancel exactly in the ratio (see features()).
// Features come from the kernel's own seeded generator and are redrawn every `redraw_interval` training
// forwards (0: never). Decoding keeps the causal path's sums, [m, D + 1] per head: O(m D) per new token.
//
// Legend: B batch, H heads, T tokens, D head dim, m features.
#include <cmath>

#include "framework/attention/linear/feature_attention.hpp"
#include "framework/attention/performer/favor_attention.hpp"

namespace attnlab {
namespace {

constexpr double kDenominatorEps = 1e-12;

// m x d rows: blocks of d orthonormal directions (Gram-Schmidt on Gaussian draws, in double) scaled by
// the norms of independent Gaussian d-vectors.
Tensor orthogonal_features(std::size_t m, std::size_t d, Generator& gen) {
  std::vector<double> w(m * d);
  for (std::size_t block = 0; block * d < m; ++block) {
    const std::size_t rows = std::min(d, m - block * d);
    std::vector<double> basis(d * d);
    for (auto& x : basis) x = gen.next_normal();
    for (std::size_t r = 0; r < d; ++r) {
      double* row = basis.data() + r * d;
      for (std::size_t p = 0; p < r; ++p) {
        const double* prev = basis.data() + p * d;
        double dot = 0;
        for (std::size_t c = 0; c < d; ++c) dot += row[c] * prev[c];
        for (std::size_t c = 0; c < d; ++c) row[c] -= dot * prev[c];
      }
      double norm = 0;
      for (std::size_t c = 0; c < d; ++c) norm += row[c] * row[c];
      norm = std::sqrt(norm);
      for (std::size_t c = 0; c < d; ++c) row[c] /= norm;
    }
    for (std::size_t r = 0; r < rows; ++r) {
      double length = 0;
      for (std::size_t c = 0; c < d; ++c) {
        const double g = gen.next_normal();
        length += g * g;
      }
      length = std::sqrt(length);
      for (std::size_t c = 0; c < d; ++c) w[(block * d + r) * d + c] = basis[r * d + c] * length;
    }
  }
  return from_vector(w, {m, d}, DType::float64);
}

class PerformerKernel : public AttentionKernel {
 public:
  static constexpr const char* kName = "performer";
  static constexpr const char* kDescription =
      "FAVOR+ positive orthogonal random features estimating softmax attention (Choromanski et al. 2020); O(n m d)";
  static KernelCapabilities declared_capabilities() {
    KernelCapabilities c;
    c.incremental = true;  // sum phi(k) v^T and sum phi(k) (feature_decode)
    return c;
  }
  struct Options {
    std::size_t features = 256;       // m
    std::size_t redraw_interval = 0;  // training forwards between redraws; 0: fixed features
    double eps = 1e-4;                // added to every feature (keeps them positive) as in the reference code
  };
  static Schema<Options> options_schema() {
    Schema<Options> s;
    s.field("features", &Options::features, "number of random features m (the estimate sharpens as m grows)",
            Range::closed(1, 1 << 20));
    s.field("redraw_interval", &Options::redraw_interval, "training forwards between feature redraws; 0 keeps them fixed");
    s.field("eps", &Options::eps, "added to every feature to keep it positive", Range::at_least(0.0));
    return s;
  }
  // The keys' stabiliser exp(-max_r |w_r|^2 / 2) (see features()) grows with the head dim D: about e^-50
  // at D = 64, e^-89 at D = 128 with 256 features. Float32 still holds the features at D = 128 (the
  // error against softmax is as at D = 16); at D = 160 they underflow and the output is 0 or NaN.
  static constexpr std::size_t kWidestHead = 128;
  static void check(const KernelSpec& spec, const Options&, const ConfigNode& node) {
    if (spec.head_dim > kWidestHead)
      node.fail("features", "performer needs a head dim of at most " + std::to_string(kWidestHead) + " (model.d_model / model.n_heads is " +
                                std::to_string(spec.head_dim) + "): its key features are scaled by exp(-max_r |w_r|^2 / 2), which float32 " +
                                "cannot hold for wider heads; use more heads");
  }
  // The projection [m, D] in float64 while drawn, and the causal path's feature tensors [B, H, T, m] for
  // queries and keys with their gradients.
  static double working_bytes(const KernelSpec& spec, const Options& o, std::size_t batch) {
    const double m = static_cast<double>(o.features);
    return 8 * m * static_cast<double>(spec.head_dim) +
           4 * 4 * static_cast<double>(batch) * static_cast<double>(spec.n_heads) * static_cast<double>(spec.max_len) * m;
  }

  static StateSize state_size(const KernelSpec& spec, const Options& o) {
    const double d = static_cast<double>(spec.head_dim), m = static_cast<double>(o.features);
    return {static_cast<double>(spec.n_heads) * m * (d + 1), 0, "sum phi(k) v^T and sum phi(k) over m features, per head"};
  }
  PerformerKernel(const KernelSpec& spec, const Options& config, Generator& gen)
      : config_(config), heads_(spec.n_heads), head_dim_(spec.head_dim), gen_(gen.split()) {
    draw_features();
    register_generator("rng", &gen_);
    calls_ = register_buffer("calls", zeros({1}, DType::int64));  // training forwards so far (redraw schedule)
  }

  AttentionResult forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionContext& context) override {
    if (is_training() && config_.redraw_interval > 0) {
      std::int64_t& calls = calls_.data<std::int64_t>()[0];
      if (calls++ % static_cast<std::int64_t>(config_.redraw_interval) == 0 && calls > 1) draw_features();
    }
    // Every key feature carries the factor exp(-bound); the denominator's floor must carry it too, or
    // the ratio is no longer the estimator's: at head dim 64 the bound is about 50, the sums of key
    // features about e^-50, and an unscaled 1e-12 outweighed them (the output fell to about zero).
    const double bound = key_bound(), eps = kDenominatorEps * std::exp(-bound);
    if (!context.causal && !context.need_pattern) {
      // One op in blocks of tokens (favor_attention.cpp, beside this file): no [T, m] tensor at all.
      return AttentionResult{favor_attention(q, k, v, projection_.to(q.dtype()), context.key_padding_mask, config_.eps, eps, bound), Tensor()};
    }
    return feature_attention(features(q, true, bound), features(k, false, bound), v, context, eps, "performer");
  }
  // Decoding: the causal path's prefix sums as a state, [m, D + 1] per head.
  std::unique_ptr<DecodeState> start_decoding(std::size_t batch) const override {
    return std::make_unique<MatrixState>(batch, heads_, config_.features, head_dim_ + 1);
  }
  Tensor decode(DecodeState& state, const Tensor& q, const Tensor& k, const Tensor& v, const AttentionContext& context) override {
    const double bound = key_bound(), eps = kDenominatorEps * std::exp(-bound);
    return feature_decode(state_as<MatrixState>(state, name()), features(q, true, bound), features(k, false, bound), v,
                          context.key_padding_mask, eps);
  }

 private:
  // x [B, H, T, D] -> phi(x) [B, H, T, m], as c * (exp(w . x' - |x'|^2 / 2) + eps) with c = exp(-stabiliser):
  // per query row the largest exponent (c cancels in that row's ratio, exactly, eps included), for keys
  // the bound max_r |w_r|^2 / 2 of every key's exponent (a constant: no key depends on another, so no
  // future key leaks into a causal output).
  Tensor features(const Tensor& x, bool is_query, double bound) const {
    const Tensor scaled = mul(x, std::pow(static_cast<double>(head_dim_), -0.25));  // x'
    const Tensor proj = matmul(scaled, projection_.to(x.dtype()), false, true);    // [B, H, T, m]
    const Tensor half_norm = mul(sum(scaled * scaled, -1, true), 0.5);            // [B, H, T, 1]
    // One op from the projections to the features: the composed form held about six [B, H, T, m]
    // tensors per call and spent more time in them than in the matrix products.
    return positive_random_features(proj, half_norm, 1.0 / std::sqrt(static_cast<double>(config_.features)), config_.eps,
                                    is_query, is_query ? 0.0 : bound);
  }

  // The keys' stabiliser, max_r |w_r|^2 / 2, recomputed from the buffer each time so that a loaded
  // checkpoint's features bring their own bound.
  double key_bound() const {
    NoGradGuard constant;
    return 0.5 * max(sum(projection_ * projection_, -1)).item();
  }

  void draw_features() {
    const Tensor w = orthogonal_features(config_.features, head_dim_, gen_);
    if (projection_.defined()) {
      projection_.set_data(w.to(projection_.dtype()));
    } else {
      projection_ = register_buffer("projection", w.to(DType::float32));
    }
  }

  Options config_;
  std::size_t heads_, head_dim_;
  Generator gen_;
  Tensor projection_;  // [m, D]
  Tensor calls_;  // int64 [1]
};

}  // namespace

ATTNLAB_REGISTER_KERNEL(PerformerKernel);

}  // namespace attnlab
