// The chunked gated delta rule's forward pieces (delta_rule.hpp states the recurrence and the chunked
// form; delta_rule.cpp holds the backward and the op): a chunk's gates, its loading (and L2 norm of q and
// k), and one chunk forward. Included by delta_rule.cpp only.
//
// Legend: B batch, H heads, T tokens, C chunk, Dk key dim, Dv value dim, n tokens of the chunk at hand.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "framework/attention/recurrent/chunk_blocks.hpp"
#include "framework/attention/recurrent/delta_rule.hpp"
#include "framework/ops/blas.hpp"
#include "framework/ops/row_kernels.hpp"

namespace attnlab::delta_chunk {


struct RuleDims {
  std::size_t heads = 0, tokens = 0, dk = 0, dv = 0, chunk = 0;
  bool delta = false, gated = false, normalise_qk = false, normalise_output = false;
  std::size_t chunks() const { return (tokens + chunk - 1) / chunk; }
};

// One head's inputs, at its first token (beta and log_alpha null when absent), and with normalise_qk the
// factors 1 / |q_t| and 1 / |k_t| per token (written by the forward, read by the backward).
template <class T>
struct HeadInputs {
  const T *q, *k, *v, *beta, *log_alpha;
  T *q_factor, *k_factor;
  T* out_factor;  // with normalise_output: 1 / rms(o_t) per token, written by the forward
};

// `factors` [2, B H, T]: those of q, then those of k (undefined without normalise_qk); `out_factors`
// [B H, T] (undefined without normalise_output).
template <class T>
HeadInputs<T> head_inputs(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& beta, const Tensor& la, const Tensor& factors,
                          const Tensor& out_factors, const RuleDims& d, std::size_t h) {
  T* f = factors.defined() ? const_cast<T*>(factors.data<T>()) + h * d.tokens : nullptr;
  return {q.data<T>() + h * d.tokens * d.dk,
          k.data<T>() + h * d.tokens * d.dk,
          v.data<T>() + h * d.tokens * d.dv,
          beta.defined() ? beta.data<T>() + h * d.tokens : nullptr,
          la.defined() ? la.data<T>() + h * d.tokens : nullptr,
          f,
          f ? f + d.heads * d.tokens : nullptr,
          out_factors.defined() ? const_cast<T*>(out_factors.data<T>()) + h * d.tokens : nullptr};
}

// Buffers of one worker, reused over chunks and heads (C the chunk).
template <class T>
struct Scratch {
  std::vector<double> l, columns, dl;  // cumulative log decays and their gradient, in double (see chunk_gates); column sums
  std::vector<double> exps;            // [3C]: g, -l, c in double
  rowops::AlignedVector<T> inv_g, g, c, gamma;
  rowops::AlignedVector<T> qk;    // [2C, Dk]: the chunk's Q above its K, so that one product serves both
  rowops::AlignedVector<T> qk_t;  // [Dk, 2C]: its transpose, for the products that would read Q^T or K^T
  rowops::AlignedVector<T> pm;    // [2C, C]: Q K^T above K K^T, then P above M
  rowops::AlignedVector<T> sd;    // [Dk, 2 Dv]: S beside dS
  rowops::AlignedVector<T> qks;   // [2C, 2 Dv]: [Q; K] [S, dS] (the forward: [Q; K] S, [2C, Dv])
  rowops::AlignedVector<T> left;  // [C, 2C]: P^T, then [dP'^T, X + X^T]
  rowops::AlignedVector<T> ob;    // [2C, Dv]: dO above dB, then dR, then both scaled by the gates
  rowops::AlignedVector<T> prod;  // [2C, max(C, Dk)]: dP above -dA, then [dO; dR] S^T
  rowops::AlignedVector<T> ut, st;        // [Dv, C]: U^T; [2, Dv, Dk]: S^T and dS^T
  rowops::AlignedVector<T> du, nk, state;  // [C, Dv], [C, Dk], [Dk, Dv]
  Scratch(const RuleDims& d)
      : l(d.chunk), columns(d.chunk), dl(d.chunk), exps(3 * d.chunk), inv_g(d.chunk), g(d.chunk), c(d.chunk), gamma(d.chunk * d.chunk),
        qk(2 * d.chunk * d.dk), qk_t(2 * d.chunk * d.dk), pm(2 * d.chunk * d.chunk), sd(2 * d.dk * d.dv), qks(4 * d.chunk * d.dv),
        left(2 * d.chunk * d.chunk), ob(2 * d.chunk * d.dv), prod(2 * d.chunk * std::max(d.chunk, d.dk)), ut(d.dv * d.chunk),
        st(2 * d.dv * d.dk), du(d.chunk * d.dv), nk(d.chunk * d.dk), state(d.dk * d.dv) {}
};

// The chunk's cumulative log decay l_i, g_i = exp(l_i), c_i = exp(l_{n-1} - l_i) and, when gated,
// Gamma_ij = exp(l_i - l_j) for j <= i and 0 above the diagonal (whole rows, so that the loops that
// multiply by it run over whole rows, with no short tails); 0, 1, 1 ungated. l is summed in double whatever T is: in float
// the running sum's rounding (about eps |l_i| per term) would enter every g_i and Gamma_ij as a relative
// error that grows with the chunk and the decay's strength, where the token-by-token recurrence has
// about eps per decay. Gamma is g_i / g_j while g stays far from underflow (l > -60 in float, -600 in
// double), else exp of the difference, taken in double and then rounded (strong decays).
template <class T>
void chunk_gates(const T* log_alpha, std::size_t n, Scratch<T>& s) {
  if (!log_alpha) {
    std::fill(s.g.begin(), s.g.end(), T(1));
    std::fill(s.c.begin(), s.c.end(), T(1));
    return;
  }
  double total = 0;
  for (std::size_t i = 0; i < n; ++i) {
    total += static_cast<double>(log_alpha[i]);
    s.l[i] = total;
    s.exps[n + i] = -total;
  }
  double *g = s.exps.data(), *minus_l = g + n, *c = minus_l + n;  // exp in double, by xsimd (std::exp was 3% of a step)
  const double floor = sizeof(T) == 4 ? -60.0 : -600.0;
  if (s.l[n - 1] > floor) {  // one exp per token: 1 / g_i = exp(-l_i), g_i its reciprocal, c_i = g_{n-1} / g_i
    rowops::exp_shifted(minus_l, c, n, 0.0);
    const double g_last = 1.0 / c[n - 1];
    for (std::size_t i = 0; i < n; ++i) {
      s.g[i] = static_cast<T>(1.0 / c[i]);
      s.c[i] = static_cast<T>(g_last * c[i]);
      s.inv_g[i] = static_cast<T>(c[i]);
    }
    for (std::size_t i = 0; i < n; ++i) {
      T* row = s.gamma.data() + i * n;
      const T gi = s.g[i];
#pragma omp simd
      for (std::size_t j = 0; j < i; ++j) row[j] = gi * s.inv_g[j];
      row[i] = T(1);
      std::fill(row + i + 1, row + n, T(0));
    }
    return;
  }
  rowops::exp_shifted(s.l.data(), g, n, 0.0);        // g_i = exp(l_i)
  rowops::exp_shifted(minus_l, c, n, -s.l[n - 1]);  // c_i = exp(l_{n-1} - l_i)
  for (std::size_t i = 0; i < n; ++i) s.g[i] = static_cast<T>(g[i]), s.c[i] = static_cast<T>(c[i]);
  for (std::size_t i = 0; i < n; ++i) {
    T* row = s.gamma.data() + i * n;
    const double li = s.l[i];
#pragma omp simd
    for (std::size_t j = 0; j <= i; ++j) row[j] = static_cast<T>(li - s.l[j]);
    rowops::exp_shifted(row, row, i + 1, T(0));  // exp(l_i - l_j)
    std::fill(row + i + 1, row + n, T(0));
  }
}

// m [n, n] (leading dimension n) times Gamma on and below the diagonal, zero above it (P, which enters
// products whole); `strict`: only the strictly lower part matters (M), the rest may be anything. Gated,
// m . Gamma over whole rows does both (Gamma is zero above the diagonal, one on it).
template <class T>
void decay_lower(T* m, std::size_t n, const Scratch<T>& s, bool strict, bool gated) {
  if (gated) {
#pragma omp simd
    for (std::size_t i = 0; i < n * n; ++i) m[i] *= s.gamma[i];
    return;
  }
  if (strict) return;
  for (std::size_t i = 0; i + 1 < n; ++i) std::fill(m + i * n + i + 1, m + (i + 1) * n, T(0));
}

// The chunk's [Q; K] into s.qk [2n, Dk]; with normalise_qk each row divided by its norm on the way, its
// factor 1 / sqrt(x . x + eps) computed and kept (`fresh`, the forward) or read back (the backward).
template <class T>
void load_chunk(const HeadInputs<T>& in, const RuleDims& d, std::size_t t0, std::size_t n, bool fresh, Scratch<T>& s) {
  const std::size_t dk = d.dk;
  const T *q = in.q + t0 * dk, *k = in.k + t0 * dk;
  if (!d.normalise_qk) {
    std::copy(q, q + n * dk, s.qk.data());
    std::copy(k, k + n * dk, s.qk.data() + n * dk);
    return;
  }
  for (std::size_t i = 0; i < 2 * n; ++i) {
    const T* x = i < n ? q + i * dk : k + (i - n) * dk;
    T& factor = i < n ? in.q_factor[t0 + i] : in.k_factor[t0 + i - n];
    if (fresh) factor = T(1) / std::sqrt(rowops::dot(x, x, dk) + static_cast<T>(kQkNormEps));
    const T f = factor;
#pragma omp simd
    for (std::size_t e = 0; e < dk; ++e) s.qk[i * dk + e] = x[e] * f;
  }
}

// One chunk forward: O [n, Dv] and U [n, Dv] (kept), the state S [Dk, Dv] carried on. Four products:
// [Q; K] K^T, [Q; K] S, P U and K^T diag(c) U (the K K^T and K S halves only with the delta correction).
template <class T>
void forward_chunk(const HeadInputs<T>& in, const RuleDims& d, std::size_t t0, std::size_t n, T* state, T* u, T* out, Scratch<T>& s) {
  const T* v = in.v + t0 * d.dv;
  const std::size_t dk = d.dk, dv = d.dv, rows = d.delta ? 2 * n : n;
  chunk_gates(in.log_alpha ? in.log_alpha + t0 : nullptr, n, s);
  load_chunk(in, d, t0, n, true, s);
  simd::transpose(s.qk.data() + n * dk, n, dk, s.qk_t.data(), n);                                 // K^T [Dk, n]
  gemm(false, false, rows, n, dk, s.qk.data(), dk, s.qk_t.data(), n, s.pm.data(), n);  // [Q K^T; K K^T]
  if (t0 == 0) {  // the state starts at zero (a sequence of one chunk, as MQAR's, has no state products at all)
    std::fill(s.qks.begin(), s.qks.begin() + static_cast<std::ptrdiff_t>(rows * dv), T(0));
  } else {
    gemm(false, false, rows, dv, dk, s.qk.data(), dk, state, dv, s.qks.data(), dv);  // [Q S; K S]
  }
  decay_lower(s.pm.data(), n, s, false, d.gated);                                     // P
  if (d.delta) {
    const T *beta = in.beta + t0, *ks = s.qks.data() + n * dv;
    T* m = s.pm.data() + n * n;
    decay_lower(m, n, s, true, d.gated);  // M
    for (std::size_t i = 0; i < n; ++i) {
      const T b = beta[i], gi = s.g[i];
#pragma omp simd
      for (std::size_t e = 0; e < dv; ++e) u[i * dv + e] = b * (v[i * dv + e] - gi * ks[i * dv + e]);
    }
    chunk_blocks::unit_lower_solve(false, m, beta, n, u, dv);  // (I + diag(beta) M) U = diag(beta) R
  } else {
    std::copy(v, v + n * dv, u);
  }
  for (std::size_t i = 0; i < n; ++i) {
    const T gi = s.g[i];
#pragma omp simd
    for (std::size_t e = 0; e < dv; ++e) out[i * dv + e] = gi * s.qks[i * dv + e];
  }
  gemm(false, false, n, dv, n, s.pm.data(), n, u, dv, out, dv, T(1));  // + P U
  if (d.normalise_output) {
    for (std::size_t i = 0; i < n; ++i) {
      T* oi = out + i * dv;
      const T f = T(1) / std::sqrt(rowops::dot(oi, oi, dv) / static_cast<T>(dv) + static_cast<T>(kQkNormEps));
      in.out_factor[t0 + i] = f;
#pragma omp simd
      for (std::size_t e = 0; e < dv; ++e) oi[e] *= f;
    }
  }
  const T g_last = s.g[n - 1];
#pragma omp simd
  for (std::size_t i = 0; i < dk * dv; ++i) state[i] *= g_last;
  for (std::size_t j = 0; j < n; ++j) {
    const T cj = s.c[j];
#pragma omp simd
    for (std::size_t e = 0; e < dv; ++e) s.du[j * dv + e] = cj * u[j * dv + e];
  }
  gemm(false, false, dk, dv, n, s.qk_t.data(), n, s.du.data(), dv, state, dv, T(1));  // + K^T diag(c) U
}

}  // namespace attnlab::delta_chunk
