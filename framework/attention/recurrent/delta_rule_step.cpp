// The gated delta rule token by token (delta_rule.hpp): the recurrence as written, on a state kept in
// double between calls, for decoding. Per token, with S the state before it:
//   S <- alpha S,   u = beta (v - S^T k)  (u = v without the delta correction),   S <- S + k u^T,   o = S^T q,
// with q and k L2-normalised first and o RMS-normalised last when the options say so, as the chunked op.
#include <cmath>
#include <stdexcept>
#include <vector>

#include "framework/attention/recurrent/delta_rule.hpp"
#include "framework/ops/parallel.hpp"

namespace attnlab {
namespace {

struct StepDims {
  std::size_t tokens = 0, dk = 0, dv = 0;
  bool normalise_qk = false, normalise_output = false;
};

// 1 / sqrt(x . x / divisor + kQkNormEps) when `normalise`, else 1: the chunked op's factors.
template <class T>
double norm_factor(const T* x, std::size_t n, double divisor, bool normalise) {
  if (!normalise) return 1.0;
  double sum = 0;
  for (std::size_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  return 1.0 / std::sqrt(sum / divisor + kQkNormEps);
}

// One sequence and head over its n tokens (beta and log_alpha null when absent).
template <class T>
void head_steps(const T* q, const T* k, const T* v, const T* beta, const T* log_alpha, const StepDims& d, double* s, T* out) {
  std::vector<double> u(d.dv), o(d.dv);
  for (std::size_t t = 0; t < d.tokens; ++t) {
    const T *qt = q + t * d.dk, *kt = k + t * d.dk, *vt = v + t * d.dv;
    const double qn = norm_factor(qt, d.dk, 1.0, d.normalise_qk), kn = norm_factor(kt, d.dk, 1.0, d.normalise_qk);
    if (log_alpha) {
      const double alpha = std::exp(static_cast<double>(log_alpha[t]));
      for (std::size_t i = 0; i < d.dk * d.dv; ++i) s[i] *= alpha;
    }
    for (std::size_t c = 0; c < d.dv; ++c) u[c] = vt[c];
    if (beta) {
      for (std::size_t r = 0; r < d.dk; ++r) {  // u = beta (v - S^T k)
        const double a = kn * kt[r];
        const double* row = s + r * d.dv;
        for (std::size_t c = 0; c < d.dv; ++c) u[c] -= a * row[c];
      }
      for (std::size_t c = 0; c < d.dv; ++c) u[c] *= static_cast<double>(beta[t]);
    }
    std::fill(o.begin(), o.end(), 0.0);
    for (std::size_t r = 0; r < d.dk; ++r) {  // S += k u^T, o = S^T q
      const double a = kn * kt[r], b = qn * qt[r];
      double* row = s + r * d.dv;
      for (std::size_t c = 0; c < d.dv; ++c) {
        row[c] += a * u[c];
        o[c] += b * row[c];
      }
    }
    const double on = norm_factor(o.data(), d.dv, static_cast<double>(d.dv), d.normalise_output);
    for (std::size_t c = 0; c < d.dv; ++c) out[t * d.dv + c] = static_cast<T>(on * o[c]);
  }
}

}  // namespace

Tensor gated_delta_step(MatrixState& state, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& beta, const Tensor& log_alpha,
                        const DeltaRuleOptions& options) {
  const std::size_t batch = q.size(0), heads = q.size(1);
  const StepDims d{q.size(2), q.size(3), v.size(3), options.normalise_qk, options.normalise_output};
  const Shape gates{batch, heads, d.tokens};
  if (k.shape() != q.shape() || v.size(2) != d.tokens || batch != state.batch() || heads != state.heads() || d.dk != state.rows() ||
      d.dv != state.cols() || (beta.defined() && beta.shape() != gates) || (log_alpha.defined() && log_alpha.shape() != gates)) {
    throw std::invalid_argument("gated_delta_step: q " + shape_str(q.shape()) + ", k " + shape_str(k.shape()) + ", v " + shape_str(v.shape()) +
                                " and the gates do not fit a state of " + std::to_string(state.batch()) + " x " + std::to_string(state.heads()) +
                                " matrices [" + std::to_string(state.rows()) + ", " + std::to_string(state.cols()) + "]");
  }
  Tensor out = empty(v.shape(), v.dtype());
  dispatch_floating(q.dtype(), "gated_delta_step", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const std::size_t work = d.tokens * d.dk * d.dv;  // multiply-adds per head, three times over
    parallel_for(batch * heads, work >= (1u << 15) ? 1 : batch * heads, [&](std::size_t first, std::size_t last) {
      for (std::size_t bh = first; bh < last; ++bh) {
        head_steps(q.data<T>() + bh * d.tokens * d.dk, k.data<T>() + bh * d.tokens * d.dk, v.data<T>() + bh * d.tokens * d.dv,
                   beta.defined() ? beta.data<T>() + bh * d.tokens : nullptr, log_alpha.defined() ? log_alpha.data<T>() + bh * d.tokens : nullptr,
                   d, state.matrix(bh / heads, bh % heads), out.data<T>() + bh * d.tokens * d.dv);
      }
    });
  });
  state.advance(d.tokens);
  return out;
}

}  // namespace attnlab
