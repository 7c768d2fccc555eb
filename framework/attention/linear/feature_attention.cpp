#include "framework/attention/linear/feature_attention.hpp"

#include <stdexcept>
#include <vector>

#include "framework/ops/parallel.hpp"

namespace attnlab {
namespace {

struct FeatureDims {
  std::size_t tokens = 0, features = 0, dim = 0;
};

// One sequence and head: folds each new key into the state [F, D + 1] and reads its query's output.
template <class T>
void feature_steps(const T* fq, const T* fk, const T* v, const bool* padding, const FeatureDims& d, double eps, double* state, T* out) {
  const std::size_t w = d.dim + 1;
  std::vector<double> numerator(w);
  for (std::size_t i = 0; i < d.tokens; ++i) {
    const T *q = fq + i * d.features, *k = fk + i * d.features, *value = v + i * d.dim;
    if (!(padding && padding[i])) {
      for (std::size_t r = 0; r < d.features; ++r) {
        const double a = k[r];
        double* row = state + r * w;
        for (std::size_t c = 0; c < d.dim; ++c) row[c] += a * static_cast<double>(value[c]);
        row[d.dim] += a;
      }
    }
    std::fill(numerator.begin(), numerator.end(), 0.0);
    for (std::size_t r = 0; r < d.features; ++r) {
      const double a = q[r];
      const double* row = state + r * w;
      for (std::size_t c = 0; c < w; ++c) numerator[c] += a * row[c];
    }
    const double denominator = numerator[d.dim] + eps;
    for (std::size_t c = 0; c < d.dim; ++c) out[i * d.dim + c] = static_cast<T>(numerator[c] / denominator);
  }
}

}  // namespace

Tensor feature_decode(MatrixState& state, const Tensor& fq, const Tensor& fk, const Tensor& v, const Tensor& key_padding_mask, double eps) {
  const std::size_t batch = fq.size(0), heads = fq.size(1);
  const FeatureDims d{fq.size(2), fq.size(3), v.size(3)};
  if (fk.shape() != fq.shape() || v.size(2) != d.tokens || batch != state.batch() || heads != state.heads() || d.features != state.rows() ||
      d.dim + 1 != state.cols()) {
    throw std::invalid_argument("feature_decode: features " + shape_str(fq.shape()) + " and " + shape_str(fk.shape()) + ", values " +
                                shape_str(v.shape()) + " do not fit a state of " + std::to_string(state.batch()) + " x " +
                                std::to_string(state.heads()) + " matrices [" + std::to_string(state.rows()) + ", " + std::to_string(state.cols()) + "]");
  }
  if (key_padding_mask.defined()) check_key_padding_mask(key_padding_mask, batch, d.tokens);
  Tensor out = empty(v.shape(), v.dtype());
  dispatch_floating(v.dtype(), "feature_decode", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const std::size_t work = d.tokens * d.features * d.dim;  // multiply-adds per head
    parallel_for(batch * heads, work >= (1u << 15) ? 1 : batch * heads, [&](std::size_t first, std::size_t last) {
      for (std::size_t bh = first; bh < last; ++bh) {
        const std::size_t b = bh / heads;
        feature_steps(fq.data<T>() + bh * d.tokens * d.features, fk.data<T>() + bh * d.tokens * d.features, v.data<T>() + bh * d.tokens * d.dim,
                      key_padding_mask.defined() ? key_padding_mask.data<bool>() + b * d.tokens : nullptr, d, eps,
                      state.matrix(b, bh % heads), out.data<T>() + bh * d.tokens * d.dim);
      }
    });
  });
  state.advance(d.tokens);
  return out;
}

AttentionResult feature_attention(const Tensor& fq, const Tensor& fk_in, const Tensor& v, const AttentionContext& context,
                                  double eps, const char* kernel_name) {
  using I = std::int64_t;
  const std::size_t batch = fq.size(0), tq = fq.size(2), tk = fk_in.size(2);
  Tensor fk = fk_in;  // [B, H, Tk, F]
  if (context.key_padding_mask.defined()) {
    check_key_padding_mask(context.key_padding_mask, batch, tk);
    const Tensor keep = where(reshape(context.key_padding_mask, {static_cast<I>(batch), 1, static_cast<I>(tk), 1}),
                              zeros({}, fk.dtype()), ones({}, fk.dtype()));
    fk = fk * keep;
  }
  AttentionResult result;
  if (context.causal) {
    if (tq != tk) throw std::invalid_argument(std::string(kernel_name) + " attention: causal mode needs as many queries as keys");
    result.output = causal_linear_attention(fq, fk, v, eps);  // [B, H, T, D]
  } else {
    result.output = linear_attention(fq, fk, v, eps);  // [B, H, Tq, D]
  }
  if (context.need_pattern) {
    NoGradGuard no_grad;
    Tensor a = matmul(fq, fk, false, true);  // [B, H, Tq, Tk]
    if (context.causal) a = masked_fill(a, attention_mask(1, tq, tk, AttentionContext{true, Tensor(), false}), 0.0);
    const Tensor total = sum(a, -1, true);  // [B, H, Tq, 1]; 0 only when every visible key is padding
    result.pattern = a / where(total.to(DType::boolean), total, ones({}, total.dtype()));
  }
  return result;
}

}  // namespace attnlab
