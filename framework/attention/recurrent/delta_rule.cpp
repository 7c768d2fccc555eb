// The chunked gated delta rule (see delta_rule.hpp for the recurrence and the chunked form). The
// backward, per chunk in reverse, given dO and dS (the gradient of the state the chunk hands on):
//   dU = P^T dO + diag(c) K dS          (P = lower(Q K^T . Gamma), c_j = g_C / g_j)
//   dQ = (dO U^T . Gamma) K + diag(g) dO S^T,    dK = (dO U^T . Gamma)^T Q + diag(c) U dS^T,
//   dS_start = Q^T diag(g) dO + g_C dS,
// and with the delta correction, B = diag(beta) R, R = V - diag(g) K S, (I + A) U = B:
//   dB = (I + A)^-T dU,  dA = -dB U^T (strictly lower),  A = diag(beta) M,  M = strict_lower(K K^T . Gamma),
//   dbeta_i = sum_j dA_ij M_ij + dB_i . R_i,   dK += (X + X^T) K with X = beta_i dA_ij Gamma_ij,
//   dV = diag(beta) dB,   dK -= diag(g) dV S^T,   dS_start -= K^T diag(g) dV.
// Every Gamma_ij = exp(l_i - l_j), g_i = exp(l_i) and c_j = exp(l_C - l_j) passes its share to the
// cumulative log decays l, and d log_alpha is their reverse cumulative sum within the chunk.
#include "framework/attention/recurrent/delta_rule.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "framework/ops/blas.hpp"
#include "framework/ops/parallel.hpp"
#include "framework/ops/row_kernels.hpp"

namespace attnlab {
namespace {

struct RuleDims {
  std::size_t heads = 0, tokens = 0, dk = 0, dv = 0, chunk = 0;
  bool delta = false, gated = false;
  std::size_t chunks() const { return (tokens + chunk - 1) / chunk; }
};

// One head's inputs, at its first token (beta and log_alpha null when absent).
template <class T>
struct HeadInputs {
  const T *q, *k, *v, *beta, *log_alpha;
};

template <class T>
HeadInputs<T> head_inputs(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& beta, const Tensor& la, const RuleDims& d,
                          std::size_t h) {
  return {q.data<T>() + h * d.tokens * d.dk, k.data<T>() + h * d.tokens * d.dk, v.data<T>() + h * d.tokens * d.dv,
          beta.defined() ? beta.data<T>() + h * d.tokens : nullptr, la.defined() ? la.data<T>() + h * d.tokens : nullptr};
}

// Buffers of one worker, reused over chunks and heads.
template <class T>
struct Scratch {
  std::vector<double> l, columns;  // cumulative log decays, summed in double (see chunk_gates); column sums
  rowops::AlignedVector<T> inv_g, g, c, gamma, p, m, x, du, nd, nk, state;
  explicit Scratch(const RuleDims& d)
      : l(d.chunk), columns(d.chunk), inv_g(d.chunk), g(d.chunk), c(d.chunk), gamma(d.chunk * d.chunk), p(d.chunk * d.chunk), m(d.chunk * d.chunk),
        x(d.chunk * d.chunk), du(d.chunk * d.dv), nd(d.chunk * d.dv), nk(d.chunk * d.dk), state(d.dk * d.dv) {}
};

// The chunk's cumulative log decay l_i, g_i = exp(l_i), c_i = exp(l_{n-1} - l_i) and, when gated,
// Gamma_ij = exp(l_i - l_j) for j <= i; 0, 1, 1 ungated. l is summed in double whatever T is: in float
// the running sum's rounding (about eps |l_i| per term) would enter every g_i and Gamma_ij as a relative
// error that grows with the chunk and the decay's strength, where the token-by-token recurrence has
// about eps per decay. Gamma is g_i / g_j while g stays far from underflow (l > -60 in float, -600 in
// double), else exp of the difference, taken in double and then rounded (strong decays).
template <class T>
void chunk_gates(const T* log_alpha, std::size_t n, Scratch<T>& s) {
  double total = 0;
  for (std::size_t i = 0; i < n; ++i) {
    total += log_alpha ? static_cast<double>(log_alpha[i]) : 0.0;
    s.l[i] = total;
    s.g[i] = static_cast<T>(std::exp(total));
  }
  for (std::size_t i = 0; i < n; ++i) s.c[i] = static_cast<T>(std::exp(s.l[n - 1] - s.l[i]));
  if (!log_alpha) return;
  const double floor = sizeof(T) == 4 ? -60.0 : -600.0;
  if (s.l[n - 1] > floor) {
    for (std::size_t j = 0; j < n; ++j) s.inv_g[j] = static_cast<T>(std::exp(-s.l[j]));  // 1 / g_j
    for (std::size_t i = 0; i < n; ++i) {
      T* row = s.gamma.data() + i * n;
      const T gi = s.g[i];
#pragma omp simd
      for (std::size_t j = 0; j < i; ++j) row[j] = gi * s.inv_g[j];
      row[i] = T(1);
    }
    return;
  }
  for (std::size_t i = 0; i < n; ++i) {
    T* row = s.gamma.data() + i * n;
    const double li = s.l[i];
#pragma omp simd
    for (std::size_t j = 0; j <= i; ++j) row[j] = static_cast<T>(li - s.l[j]);
    rowops::exp_shifted(row, row, i + 1, T(0));  // exp(l_i - l_j)
  }
}

// m [n, n] (leading dimension n) times Gamma on and below the diagonal (strictly below when `strict`),
// zero elsewhere.
template <class T>
void decay_lower(T* m, std::size_t n, const Scratch<T>& s, bool strict, bool gated) {
  for (std::size_t i = 0; i < n; ++i) {
    T* row = m + i * n;
    const T* gamma = s.gamma.data() + i * n;
    const std::size_t end = strict ? i : i + 1;
    if (gated) {
#pragma omp simd
      for (std::size_t j = 0; j < end; ++j) row[j] *= gamma[j];
    }
    std::fill(row + end, row + n, T(0));
  }
}

// M = strict_lower(K K^T . Gamma) into s.m; A = diag(beta) M into s.x (the unit lower system's strict part).
template <class T>
void delta_system(const T* k, const T* beta, std::size_t n, const RuleDims& d, Scratch<T>& s) {
  gemm(false, true, n, n, d.dk, k, d.dk, k, d.dk, s.m.data(), n);
  decay_lower(s.m.data(), n, s, true, d.gated);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < n; ++j) s.x[i * n + j] = beta[i] * s.m[i * n + j];
}

// One chunk forward: O [n, Dv] and U [n, Dv] (kept), the state S [Dk, Dv] carried on.
template <class T>
void forward_chunk(const HeadInputs<T>& in, const RuleDims& d, std::size_t t0, std::size_t n, T* state, T* u, T* out, Scratch<T>& s) {
  const T *q = in.q + t0 * d.dk, *k = in.k + t0 * d.dk, *v = in.v + t0 * d.dv;
  chunk_gates(in.log_alpha ? in.log_alpha + t0 : nullptr, n, s);
  if (d.delta) {
    const T* beta = in.beta + t0;
    gemm(false, false, n, d.dv, d.dk, k, d.dk, state, d.dv, u, d.dv);  // K S
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t e = 0; e < d.dv; ++e) u[i * d.dv + e] = beta[i] * (v[i * d.dv + e] - s.g[i] * u[i * d.dv + e]);
    delta_system(k, beta, n, d, s);
    unit_lower_solve(false, n, d.dv, s.x.data(), n, u, d.dv);  // (I + A) U = diag(beta) R
  } else {
    std::copy(v, v + n * d.dv, u);
  }
  gemm(false, true, n, n, d.dk, q, d.dk, k, d.dk, s.p.data(), n);
  decay_lower(s.p.data(), n, s, false, d.gated);                   // P
  gemm(false, false, n, d.dv, d.dk, q, d.dk, state, d.dv, out, d.dv);       // Q S
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t e = 0; e < d.dv; ++e) out[i * d.dv + e] *= s.g[i];
  gemm(false, false, n, d.dv, n, s.p.data(), n, u, d.dv, out, d.dv, T(1));  // + P U
  for (std::size_t i = 0; i < d.dk * d.dv; ++i) state[i] *= s.g[n - 1];
  for (std::size_t j = 0; j < n; ++j)
    for (std::size_t e = 0; e < d.dv; ++e) s.nd[j * d.dv + e] = s.c[j] * u[j * d.dv + e];
  gemm(true, false, d.dk, d.dv, n, k, d.dk, s.nd.data(), d.dv, state, d.dv, T(1));  // + K^T diag(c) U
}

template <class T>
T dot(const T* a, const T* b, std::size_t n) {
  T total = 0;
  for (std::size_t i = 0; i < n; ++i) total += a[i] * b[i];
  return total;
}

// Gradients of one chunk's outputs. Pointers are at the chunk's first token.
template <class T>
struct ChunkGrads {
  const T* go;  // dO [n, Dv]
  T *dq, *dk, *dv, *dbeta, *dla;
};

// The delta correction's share of a chunk's backward, given dU in s.du (dk, dS_start and dl accumulate).
template <class T>
void backward_delta(const HeadInputs<T>& in, const RuleDims& d, std::size_t t0, std::size_t n, const T* state, const T* u,
                    const ChunkGrads<T>& gr, T* ds_start, std::vector<double>& dl, Scratch<T>& s) {
  const T *k = in.k + t0 * d.dk, *v = in.v + t0 * d.dv, *beta = in.beta + t0;
  delta_system(k, beta, n, d, s);
  T* db = s.du.data();
  unit_lower_solve(true, n, d.dv, s.x.data(), n, db, d.dv);          // dB = (I + A)^-T dU
  gemm(false, true, n, n, d.dv, db, d.dv, u, d.dv, s.p.data(), n);   // -dA = dB U^T
  std::fill(s.columns.begin(), s.columns.end(), 0.0);  // column sums of dM . M (in double, as dl)
  for (std::size_t i = 0; i < n; ++i) {
    const T* mi = s.m.data() + i * n;
    const T* gamma = s.gamma.data() + i * n;
    T* pi = s.p.data() + i * n;
    T* xi = s.x.data() + i * n;
    double* column = s.columns.data();
    T dbeta = 0;
    double row = 0;
    const T b = beta[i];
#pragma omp simd reduction(+ : dbeta, row)
    for (std::size_t j = 0; j < i; ++j) {
      const T da = -pi[j], dm = b * da;
      dbeta += da * mi[j];
      const double share = static_cast<double>(dm) * static_cast<double>(mi[j]);
      row += share;
      column[j] += share;
      xi[j] = d.gated ? dm * gamma[j] : dm;  // X
    }
    std::fill(xi + i, xi + n, T(0));
    gr.dbeta[i] = dbeta;
    if (d.gated) dl[i] += row;
  }
  if (d.gated)
    for (std::size_t j = 0; j < n; ++j) dl[j] -= s.columns[j];
  gemm(false, false, n, d.dk, n, s.x.data(), n, k, d.dk, gr.dk, d.dk, T(1));  // dK += X K
  gemm(true, false, n, d.dk, n, s.x.data(), n, k, d.dk, gr.dk, d.dk, T(1));   // dK += X^T K
  gemm(false, false, n, d.dv, d.dk, k, d.dk, state, d.dv, s.nd.data(), d.dv);  // K S
  for (std::size_t i = 0; i < n; ++i) {
    T* dvi = gr.dv + i * d.dv;
    const T* ksi = s.nd.data() + i * d.dv;
    T db_r = 0, dv_ks = 0;
    for (std::size_t e = 0; e < d.dv; ++e) {
      db_r += db[i * d.dv + e] * (v[i * d.dv + e] - s.g[i] * ksi[e]);  // dB . R
      dvi[e] = beta[i] * db[i * d.dv + e];                               // dR = dV
      dv_ks += dvi[e] * ksi[e];
    }
    gr.dbeta[i] += db_r;
    if (d.gated) dl[i] -= s.g[i] * dv_ks;
  }
  gemm(false, true, n, d.dk, d.dv, gr.dv, d.dv, state, d.dv, s.nk.data(), d.dk);  // dR S^T
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t e = 0; e < d.dk; ++e) gr.dk[i * d.dk + e] -= s.g[i] * s.nk[i * d.dk + e];
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t e = 0; e < d.dv; ++e) s.nd[i * d.dv + e] = -s.g[i] * gr.dv[i * d.dv + e];
  gemm(true, false, d.dk, d.dv, n, k, d.dk, s.nd.data(), d.dv, ds_start, d.dv, T(1));  // -= K^T diag(g) dR
}

// One chunk backward: fills the chunk's dq, dk, dv (and dbeta, dla); `ds` enters as the gradient of the
// state after the chunk and leaves as that of the state before it.
template <class T>
void backward_chunk(const HeadInputs<T>& in, const RuleDims& d, std::size_t t0, std::size_t n, const T* state, const T* u,
                    const ChunkGrads<T>& gr, T* ds, Scratch<T>& s) {
  const T *q = in.q + t0 * d.dk, *k = in.k + t0 * d.dk;
  chunk_gates(in.log_alpha ? in.log_alpha + t0 : nullptr, n, s);
  std::vector<double> dl(n, 0.0);  // the cumulative log decays' gradient, summed in double as l is
  const std::size_t last = n - 1;
  gemm(false, true, n, n, d.dk, q, d.dk, k, d.dk, s.p.data(), n);
  decay_lower(s.p.data(), n, s, false, d.gated);                         // P
  gemm(true, false, n, d.dv, n, s.p.data(), n, gr.go, d.dv, s.du.data(), d.dv);   // dU = P^T dO
  gemm(false, false, n, d.dv, d.dk, k, d.dk, ds, d.dv, s.nd.data(), d.dv);        // K dS
  for (std::size_t j = 0; j < n; ++j) {
    const T dc = dot(s.nd.data() + j * d.dv, u + j * d.dv, d.dv);
    for (std::size_t e = 0; e < d.dv; ++e) s.du[j * d.dv + e] += s.c[j] * s.nd[j * d.dv + e];
    dl[last] += s.c[j] * dc;
    dl[j] -= s.c[j] * dc;
  }
  gemm(false, true, n, n, d.dv, gr.go, d.dv, u, d.dv, s.x.data(), n);  // dP = dO U^T
  std::fill(s.columns.begin(), s.columns.end(), 0.0);  // column sums of dP . P
  for (std::size_t i = 0; i < n; ++i) {
    T* dp = s.x.data() + i * n;
    std::fill(dp + i + 1, dp + n, T(0));
    if (!d.gated) continue;
    const T *pi = s.p.data() + i * n, *gamma = s.gamma.data() + i * n;
    double* column = s.columns.data();
    double row = 0;
#pragma omp simd reduction(+ : row)
    for (std::size_t j = 0; j < i; ++j) {  // the diagonal (Gamma_ii = 1) would add to row i and take from column i alike
      const double share = static_cast<double>(dp[j]) * static_cast<double>(pi[j]);
      row += share;
      column[j] += share;
      dp[j] *= gamma[j];
    }
    dl[i] += row;
  }
  if (d.gated)
    for (std::size_t j = 0; j < n; ++j) dl[j] -= s.columns[j];
  gemm(false, false, n, d.dk, n, s.x.data(), n, k, d.dk, gr.dq, d.dk);  // dQ = dP' K
  gemm(true, false, n, d.dk, n, s.x.data(), n, q, d.dk, gr.dk, d.dk);   // dK = dP'^T Q
  gemm(false, true, n, d.dk, d.dv, gr.go, d.dv, state, d.dv, s.nk.data(), d.dk);  // dO S^T
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t e = 0; e < d.dk; ++e) gr.dq[i * d.dk + e] += s.g[i] * s.nk[i * d.dk + e];
  if (d.gated) {
    gemm(false, false, n, d.dv, d.dk, q, d.dk, state, d.dv, s.nd.data(), d.dv);  // Q S
    for (std::size_t i = 0; i < n; ++i) dl[i] += s.g[i] * dot(gr.go + i * d.dv, s.nd.data() + i * d.dv, d.dv);
    dl[last] += s.g[last] * dot(state, ds, d.dk * d.dv);
  }
  gemm(false, true, n, d.dk, d.dv, u, d.dv, ds, d.dv, s.nk.data(), d.dk);  // U dS^T
  for (std::size_t j = 0; j < n; ++j)
    for (std::size_t e = 0; e < d.dk; ++e) gr.dk[j * d.dk + e] += s.c[j] * s.nk[j * d.dk + e];
  T* ds_start = s.state.data();
  for (std::size_t i = 0; i < d.dk * d.dv; ++i) ds_start[i] = s.g[last] * ds[i];
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t e = 0; e < d.dv; ++e) s.nd[i * d.dv + e] = s.g[i] * gr.go[i * d.dv + e];
  gemm(true, false, d.dk, d.dv, n, q, d.dk, s.nd.data(), d.dv, ds_start, d.dv, T(1));  // + Q^T diag(g) dO
  if (d.delta) {
    backward_delta(in, d, t0, n, state, u, gr, ds_start, dl, s);
  } else {
    std::copy(s.du.begin(), s.du.begin() + static_cast<std::ptrdiff_t>(n * d.dv), gr.dv);
  }
  if (d.gated) {
    double total = 0;
    for (std::size_t i = n; i-- > 0;) gr.dla[i] = static_cast<T>(total += dl[i]);
  }
  std::copy(ds_start, ds_start + d.dk * d.dv, ds);
}

void check_inputs(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& beta, const Tensor& la) {
  const auto fail = [&](const std::string& what) {
    throw std::invalid_argument("gated_delta_rule: " + what + "; got q " + shape_str(q.shape()) + ", k " + shape_str(k.shape()) +
                                ", v " + shape_str(v.shape()) + (beta.defined() ? ", beta " + shape_str(beta.shape()) : "") +
                                (la.defined() ? ", log_alpha " + shape_str(la.shape()) : ""));
  };
  if (q.dim() != 4 || q.shape() != k.shape() || v.dim() != 4) fail("q and k must be [B, H, T, Dk] and v [B, H, T, Dv]");
  for (std::size_t a = 0; a < 3; ++a)
    if (v.size(a) != q.size(a)) fail("v must share B, H and T with q");
  for (const Tensor* gate : {&beta, &la}) {
    if (!gate->defined()) continue;
    if (gate->shape() != Shape{q.size(0), q.size(1), q.size(2)}) fail("beta and log_alpha must be [B, H, T]");
    if (gate->dtype() != q.dtype()) fail("every input must have one dtype");
  }
  if (k.dtype() != q.dtype() || v.dtype() != q.dtype()) fail("every input must have one dtype");
}

}  // namespace

Tensor gated_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& beta, const Tensor& log_alpha, std::size_t chunk) {
  check_inputs(q, k, v, beta, log_alpha);
  if (chunk == 0) throw std::invalid_argument("gated_delta_rule: chunk must be positive");
  RuleDims d;
  d.heads = q.size(0) * q.size(1), d.tokens = q.size(2), d.dk = q.size(3), d.dv = v.size(3);
  d.chunk = std::min(chunk, std::max<std::size_t>(d.tokens, 1));
  d.delta = beta.defined(), d.gated = log_alpha.defined();
  Tensor out = empty(v.shape(), q.dtype());
  Tensor states = empty({d.heads, d.chunks(), d.dk, d.dv}, q.dtype());  // each chunk's starting state
  Tensor u = empty({d.heads, d.tokens, d.dv}, q.dtype());
  dispatch_floating(q.dtype(), "gated_delta_rule", [&](auto tag) {
    using T = typename decltype(tag)::type;
    parallel_for(d.heads, 1, [&](std::size_t h0, std::size_t h1) {
      Scratch<T> s(d);
      std::vector<T> state(d.dk * d.dv);
      for (std::size_t h = h0; h < h1; ++h) {
        const HeadInputs<T> in = head_inputs<T>(q, k, v, beta, log_alpha, d, h);
        std::fill(state.begin(), state.end(), T(0));
        for (std::size_t c = 0, t0 = 0; t0 < d.tokens; ++c, t0 += d.chunk) {
          const std::size_t n = std::min(d.chunk, d.tokens - t0);
          std::copy(state.begin(), state.end(), states.data<T>() + (h * d.chunks() + c) * d.dk * d.dv);
          forward_chunk(in, d, t0, n, state.data(), u.data<T>() + (h * d.tokens + t0) * d.dv,
                        out.data<T>() + (h * d.tokens + t0) * d.dv, s);
        }
      }
    });
  });
  std::vector<Tensor> inputs{q, k, v};
  if (d.delta) inputs.push_back(beta);
  if (d.gated) inputs.push_back(log_alpha);
  if (needs_grad({&q, &k, &v, &beta, &log_alpha})) {
    record(out, "gated_delta_rule", inputs,
           [q = q.detach(), k = k.detach(), v = v.detach(), beta = beta.defined() ? beta.detach() : Tensor(),
            la = log_alpha.defined() ? log_alpha.detach() : Tensor(), states, u, d](const Tensor& g) {
             Tensor dq = empty(q.shape(), q.dtype()), dk = empty(k.shape(), k.dtype()), dv = empty(v.shape(), v.dtype());
             Tensor dbeta = d.delta ? empty(beta.shape(), q.dtype()) : Tensor(), dla = d.gated ? empty(la.shape(), q.dtype()) : Tensor();
             dispatch_floating(q.dtype(), "gated_delta_rule backward", [&](auto tag) {
               using T = typename decltype(tag)::type;
               parallel_for(d.heads, 1, [&](std::size_t h0, std::size_t h1) {
                 Scratch<T> s(d);
                 std::vector<T> ds(d.dk * d.dv);
                 for (std::size_t h = h0; h < h1; ++h) {
                   const HeadInputs<T> in = head_inputs<T>(q, k, v, beta, la, d, h);
                   std::fill(ds.begin(), ds.end(), T(0));
                   for (std::size_t c = d.chunks(); c-- > 0;) {
                     const std::size_t t0 = c * d.chunk, n = std::min(d.chunk, d.tokens - t0), at = h * d.tokens + t0;
                     const ChunkGrads<T> gr{g.data<T>() + at * d.dv, dq.data<T>() + at * d.dk, dk.data<T>() + at * d.dk,
                                            dv.data<T>() + at * d.dv, d.delta ? dbeta.data<T>() + at : nullptr,
                                            d.gated ? dla.data<T>() + at : nullptr};
                     backward_chunk(in, d, t0, n, states.data<T>() + (h * d.chunks() + c) * d.dk * d.dv,
                                    u.data<T>() + at * d.dv, gr, ds.data(), s);
                   }
                 }
               });
             });
             std::vector<Tensor> grads{dq, dk, dv};
             if (d.delta) grads.push_back(dbeta);
             if (d.gated) grads.push_back(dla);
             return grads;
           });
  }
  return out;
}

}  // namespace attnlab
