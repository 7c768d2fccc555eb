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

#include "framework/attention/recurrent/delta_chunk.hpp"
#include "framework/ops/blas.hpp"
#include "framework/ops/parallel.hpp"
#include "framework/ops/row_kernels.hpp"
#include "framework/ops/simd.hpp"

namespace attnlab {
namespace {

using namespace delta_chunk;

// Gradients of one chunk's outputs. Pointers are at the chunk's first token.
template <class T>
struct ChunkGrads {
  const T* go;  // dO [n, Dv]
  T *dq, *dk, *dv, *dbeta, *dla;
};

// dP = dO U^T (s.prod's first n rows) becomes dP' = lower(dP . Gamma), with the shares of dP . P in the
// cumulative log decays' gradient; its transpose fills s.left's first n columns (leading dimension 2n).
template <class T>
void output_pair_grad(std::size_t n, const RuleDims& d, Scratch<T>& s) {
  std::fill(s.columns.begin(), s.columns.end(), 0.0);
  for (std::size_t i = 0; i < n; ++i) {
    T* dp = s.prod.data() + i * n;
    std::fill(dp + i + 1, dp + n, T(0));
    if (!d.gated) continue;
    const T *pi = s.pm.data() + i * n, *gamma = s.gamma.data() + i * n;
    s.dl[i] += chunk_blocks::shares(dp, pi, i, s.columns.data());  // j < i: the diagonal's would add to row i and take from column i alike
#pragma omp simd
    for (std::size_t j = 0; j < i; ++j) dp[j] *= gamma[j];  // Gamma_ii = 1
  }
  if (d.gated)
    for (std::size_t j = 0; j < n; ++j) s.dl[j] -= s.columns[j];
  simd::transpose(s.prod.data(), n, n, s.left.data(), 2 * n);
}

// The delta correction's share through A = diag(beta) M, given -dA = dB U^T in s.prod's last n rows:
// dbeta's dA . M part, the shares in dl, and X + X^T (X = dM . Gamma) into s.left's last n columns.
// Only the strictly lower parts (j < i) of M and dA enter; X is zero elsewhere.
template <class T>
void delta_pair_grad(const T* beta, std::size_t n, const RuleDims& d, const ChunkGrads<T>& gr, Scratch<T>& s) {
  std::fill(s.columns.begin(), s.columns.end(), 0.0);
  T* x = s.prod.data() + n * n;  // -dA, becomes X
  for (std::size_t i = 0; i < n; ++i) {
    const T *mi = s.pm.data() + (n + i) * n, *gamma = s.gamma.data() + i * n;
    T* xi = x + i * n;
    const T b = beta[i];
    gr.dbeta[i] = -rowops::dot(xi, mi, i);
#pragma omp simd
    for (std::size_t j = 0; j < i; ++j) xi[j] *= -b;  // dM
    std::fill(xi + i, xi + n, T(0));
    if (!d.gated) continue;
    s.dl[i] += chunk_blocks::shares(xi, mi, i, s.columns.data());
#pragma omp simd
    for (std::size_t j = 0; j < i; ++j) xi[j] *= gamma[j];
  }
  if (d.gated)
    for (std::size_t j = 0; j < n; ++j) s.dl[j] -= s.columns[j];
  T* sym = s.left.data() + n;  // X + X^T, leading dimension 2n
  simd::transpose(x, n, n, sym, 2 * n);
  for (std::size_t i = 0; i < n; ++i) {
#pragma omp simd
    for (std::size_t j = 0; j < i; ++j) sym[i * 2 * n + j] += x[i * n + j];
  }
}

// dV = dR = diag(beta) dB (also into s.ob's last n rows), and dbeta's dB . R part, R = V - diag(g) K S.
template <class T>
void delta_value_grad(const T* v, const T* beta, std::size_t n, const RuleDims& d, const ChunkGrads<T>& gr, Scratch<T>& s) {
  const std::size_t dv = d.dv, wide = 2 * dv;
  for (std::size_t i = 0; i < n; ++i) {
    const T* ks = s.qks.data() + (n + i) * wide;  // (K S)_i
    const T* vi = v + i * dv;
    const T gi = s.g[i], b = beta[i];
    T *db = s.ob.data() + (n + i) * dv, *dvi = gr.dv + i * dv;
    constexpr std::size_t W = simd::kLanes<T>;
    simd::Vec<T> lanes_r{}, lanes_ks{};
    std::size_t e = 0;
    for (; e + W <= dv; e += W) {
      const simd::Vec<T> dbe = simd::load(db + e), kse = simd::load(ks + e), dr = b * dbe;
      lanes_r += dbe * (simd::load(vi + e) - gi * kse);
      lanes_ks += dr * kse;
      simd::store(dvi + e, dr);
      simd::store(db + e, dr);
    }
    T db_r = simd::horizontal_sum<T>(lanes_r), dv_ks = simd::horizontal_sum<T>(lanes_ks);
    for (; e < dv; ++e) {
      db_r += db[e] * (vi[e] - gi * ks[e]);
      const T dr = b * db[e];
      dvi[e] = dr;
      db[e] = dr;
      dv_ks += dr * ks[e];
    }
    gr.dbeta[i] += db_r;
    if (d.gated) s.dl[i] -= gi * dv_ks;
  }
}

// dQ += diag(g) dO S^T and, with the delta correction, dK -= diag(g) dR S^T.
template <class T>
void state_products(std::size_t n, const RuleDims& d, const T* state, const ChunkGrads<T>& gr, Scratch<T>& s) {
  const std::size_t dk = d.dk, dv = d.dv, rows = d.delta ? 2 * n : n;
  simd::transpose(state, dk, dv, s.st.data(), dk);
  gemm(false, false, rows, dk, dv, s.ob.data(), dv, s.st.data(), dk, s.prod.data(), dk);  // [dO S^T; dR S^T]
  for (std::size_t i = 0; i < n; ++i) {
    const T gi = s.g[i];
    const T *dos = s.prod.data() + i * dk, *drs = s.prod.data() + (n + i) * dk;
#pragma omp simd
    for (std::size_t e = 0; e < dk; ++e) gr.dq[i * dk + e] += gi * dos[e];
    if (!d.delta) continue;
#pragma omp simd
    for (std::size_t e = 0; e < dk; ++e) gr.dk[i * dk + e] -= gi * drs[e];
  }
}

// What passes through the state S the chunk started from: dQ += diag(g) dO S^T, dK -= diag(g) dR S^T
// and += diag(c) U dS^T, the decays' shares, and dS_start = g_C dS + Q^T diag(g) dO - K^T diag(g) dR
// (into s.state).
// The first chunk starts from S = 0 and hands on no dS_start; the last one receives dS = 0.
template <class T>
void state_grads(std::size_t t0, std::size_t n, const RuleDims& d, const T* state, const T* u, const ChunkGrads<T>& gr, const T* ds,
                 Scratch<T>& s) {
  const std::size_t dk = d.dk, dv = d.dv, rows = d.delta ? 2 * n : n, last = n - 1;
  const bool first = t0 == 0, final = t0 + n == d.tokens;
  if (!first) state_products(n, d, state, gr, s);
  if (d.gated && !first) {
    for (std::size_t i = 0; i < n; ++i) s.dl[i] += s.g[i] * rowops::dot(gr.go + i * dv, s.qks.data() + i * 2 * dv, dv);  // dO . Q S
    s.dl[last] += s.g[last] * rowops::dot(state, ds, dk * dv);
  }
  if (!final) {
    T* ds_t = s.st.data() + dv * dk;
    simd::transpose(ds, dk, dv, ds_t, dk);
    gemm(false, false, n, dk, dv, u, dv, ds_t, dk, s.nk.data(), dk);  // U dS^T
    for (std::size_t j = 0; j < n; ++j) {
      const T cj = s.c[j];
#pragma omp simd
      for (std::size_t e = 0; e < dk; ++e) gr.dk[j * dk + e] += cj * s.nk[j * dk + e];
    }
  }
  if (first) return;
  for (std::size_t i = 0; i < rows; ++i) {
    const T scale = i < n ? s.g[i] : -s.g[i - n];
#pragma omp simd
    for (std::size_t e = 0; e < dv; ++e) s.ob[i * dv + e] *= scale;
  }
  const T g_last = s.g[last];
#pragma omp simd
  for (std::size_t i = 0; i < dk * dv; ++i) s.state[i] = g_last * ds[i];
  gemm(false, false, dk, dv, rows, s.qk_t.data(), 2 * n, s.ob.data(), dv, s.state.data(), dv, T(1));  // + [Q; K]^T [g dO; -g dR]
}

// With normalise_qk, the chunk's dQ and dK (taken with respect to the normalised rows x^ = f x) become
// those of the raw rows: dx = f (dx^ - x^ (x^ . dx^)).
template <class T>
void unnormalise_grads(const HeadInputs<T>& in, const RuleDims& d, std::size_t t0, std::size_t n, const ChunkGrads<T>& gr, const Scratch<T>& s) {
  const std::size_t dk = d.dk;
  for (std::size_t i = 0; i < 2 * n; ++i) {
    const T* x = s.qk.data() + i * dk;
    T* dx = i < n ? gr.dq + i * dk : gr.dk + (i - n) * dk;
    const T f = i < n ? in.q_factor[t0 + i] : in.k_factor[t0 + i - n], along = rowops::dot(x, dx, dk);
#pragma omp simd
    for (std::size_t e = 0; e < dk; ++e) dx[e] = f * (dx[e] - x[e] * along);
  }
}

// One chunk backward: fills the chunk's dq, dk, dv (and dbeta, dla); `ds` enters as the gradient of the
// state after the chunk and leaves as that of the state before it.
template <class T>
void backward_chunk(const HeadInputs<T>& in, const RuleDims& d, std::size_t t0, std::size_t n, const T* state, const T* u,
                    const ChunkGrads<T>& gr, T* ds, Scratch<T>& s) {
  const T *k = s.qk.data() + n * d.dk, *beta = d.delta ? in.beta + t0 : nullptr;  // K as the recurrence reads it
  const std::size_t dk = d.dk, dv = d.dv, wide = 2 * dv, rows = d.delta ? 2 * n : n, last = n - 1;
  chunk_gates(in.log_alpha ? in.log_alpha + t0 : nullptr, n, s);
  std::fill(s.dl.begin(), s.dl.end(), 0.0);
  load_chunk(in, d, t0, n, false, s);
  simd::transpose(s.qk.data(), 2 * n, dk, s.qk_t.data(), 2 * n);                           // [Q; K]^T [Dk, 2n]
  gemm(false, false, rows, n, dk, s.qk.data(), dk, s.qk_t.data() + n, 2 * n, s.pm.data(), n);  // [Q K^T; K K^T]
  for (std::size_t r = 0; r < dk; ++r) {
    std::copy(state + r * dv, state + (r + 1) * dv, s.sd.data() + r * wide);
    std::copy(ds + r * dv, ds + (r + 1) * dv, s.sd.data() + r * wide + dv);
  }
  if (t0 == 0 && t0 + n == d.tokens) {  // one chunk: S and dS are zero
    std::fill(s.qks.begin(), s.qks.begin() + static_cast<std::ptrdiff_t>(2 * n * wide), T(0));
  } else {
    gemm(false, false, 2 * n, wide, dk, s.qk.data(), dk, s.sd.data(), wide, s.qks.data(), wide);  // [Q S, Q dS; K S, K dS]
  }
  decay_lower(s.pm.data(), n, s, false, d.gated);                                                   // P
  if (d.delta) decay_lower(s.pm.data() + n * n, n, s, true, d.gated);                              // M
  gemm(true, false, n, dv, n, s.pm.data(), n, gr.go, dv, s.du.data(), dv);  // dU = P^T dO
  for (std::size_t j = 0; j < n; ++j) {  // dU += diag(c) K dS
    const T* kds = s.qks.data() + (n + j) * wide + dv;
    const T cj = s.c[j], dc = rowops::dot(kds, u + j * dv, dv);
#pragma omp simd
    for (std::size_t e = 0; e < dv; ++e) s.du[j * dv + e] += cj * kds[e];
    s.dl[last] += cj * dc;
    s.dl[j] -= cj * dc;
  }
  std::copy(gr.go, gr.go + n * dv, s.ob.data());
  if (d.delta) {
    std::copy(s.du.begin(), s.du.begin() + static_cast<std::ptrdiff_t>(n * dv), s.ob.begin() + static_cast<std::ptrdiff_t>(n * dv));
    chunk_blocks::unit_lower_solve(true, s.pm.data() + n * n, beta, n, s.ob.data() + n * dv, dv);  // dB = (I + A)^-T dU
  }
  simd::transpose(u, n, dv, s.ut.data(), n);
  gemm(false, false, rows, n, dv, s.ob.data(), dv, s.ut.data(), n, s.prod.data(), n);  // [dP; -dA] = [dO; dB] U^T
  output_pair_grad(n, d, s);
  if (d.delta) delta_pair_grad(beta, n, d, gr, s);
  gemm(false, false, n, dk, n, s.prod.data(), n, k, dk, gr.dq, dk);                // dQ = dP' K
  gemm(false, false, n, dk, rows, s.left.data(), 2 * n, s.qk.data(), dk, gr.dk, dk);  // dK = dP'^T Q + (X + X^T) K
  if (d.delta) {
    delta_value_grad(in.v + t0 * dv, beta, n, d, gr, s);
  } else {
    std::copy(s.du.begin(), s.du.begin() + static_cast<std::ptrdiff_t>(n * dv), gr.dv);
  }
  state_grads(t0, n, d, state, u, gr, ds, s);
  if (d.gated) {
    double total = 0;
    for (std::size_t i = n; i-- > 0;) gr.dla[i] = static_cast<T>(total += s.dl[i]);
  }
  if (d.normalise_qk) unnormalise_grads(in, d, t0, n, gr, s);
  if (t0 > 0) std::copy(s.state.begin(), s.state.end(), ds);
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

// Every head forward: out, and what the backward reads (each chunk's starting state, U, the norms' factors).
struct Saved {
  Tensor states, u, factors, out, out_factors;  // out (normalised) and its factors with normalise_output
};

void run_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& beta, const Tensor& la, const RuleDims& d, Tensor& out,
                 Saved& saved) {
  dispatch_floating(q.dtype(), "gated_delta_rule", [&](auto tag) {
    using T = typename decltype(tag)::type;
    parallel_for(d.heads, 1, [&](std::size_t h0, std::size_t h1) {
      Scratch<T> s(d);
      rowops::AlignedVector<T> state(d.dk * d.dv);
      for (std::size_t h = h0; h < h1; ++h) {
        const HeadInputs<T> in = head_inputs<T>(q, k, v, beta, la, saved.factors, saved.out_factors, d, h);
        std::fill(state.begin(), state.end(), T(0));
        for (std::size_t c = 0, t0 = 0; t0 < d.tokens; ++c, t0 += d.chunk) {
          const std::size_t n = std::min(d.chunk, d.tokens - t0);
          std::copy(state.begin(), state.end(), saved.states.data<T>() + (h * d.chunks() + c) * d.dk * d.dv);
          forward_chunk(in, d, t0, n, state.data(), saved.u.data<T>() + (h * d.tokens + t0) * d.dv,
                        out.data<T>() + (h * d.tokens + t0) * d.dv, s);
        }
      }
    });
  });
}

// The chunk's dO from g, the gradient of what the op returned, at token `at` of every head's tokens:
// g itself, or with normalise_output that of the rows before the norm, into `raw`:
// dO_t = f_t (g_t - y_t (y_t . g_t) / Dv), y the normalised rows, f their factors.
template <class T>
const T* output_grad(const RuleDims& d, const Saved& saved, const Tensor& g, std::size_t at, std::size_t n, T* raw) {
  const T* gi = g.data<T>() + at * d.dv;
  if (!d.normalise_output) return gi;
  const T *y = saved.out.data<T>() + at * d.dv, *f = saved.out_factors.data<T>() + at;
  for (std::size_t i = 0; i < n; ++i) {
    const T along = rowops::dot(y + i * d.dv, gi + i * d.dv, d.dv) / static_cast<T>(d.dv);
#pragma omp simd
    for (std::size_t e = 0; e < d.dv; ++e) raw[i * d.dv + e] = f[i] * (gi[i * d.dv + e] - y[i * d.dv + e] * along);
  }
  return raw;
}

// Every head backward, from the output's gradient g: the gradients of q, k, v (and beta, log_alpha).
std::vector<Tensor> run_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& beta, const Tensor& la, const RuleDims& d,
                                 const Saved& saved, const Tensor& g) {
  Tensor dq = empty(q.shape(), q.dtype()), dk = empty(k.shape(), k.dtype()), dv = empty(v.shape(), v.dtype());
  Tensor dbeta = d.delta ? empty(beta.shape(), q.dtype()) : Tensor(), dla = d.gated ? empty(la.shape(), q.dtype()) : Tensor();
  dispatch_floating(q.dtype(), "gated_delta_rule backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    parallel_for(d.heads, 1, [&](std::size_t h0, std::size_t h1) {
      Scratch<T> s(d);
      rowops::AlignedVector<T> ds(d.dk * d.dv), go(d.chunk * d.dv);
      for (std::size_t h = h0; h < h1; ++h) {
        const HeadInputs<T> in = head_inputs<T>(q, k, v, beta, la, saved.factors, saved.out_factors, d, h);
        std::fill(ds.begin(), ds.end(), T(0));
        for (std::size_t c = d.chunks(); c-- > 0;) {
          const std::size_t t0 = c * d.chunk, n = std::min(d.chunk, d.tokens - t0), at = h * d.tokens + t0;
          const ChunkGrads<T> gr{output_grad(d, saved, g, at, n, go.data()), dq.data<T>() + at * d.dk, dk.data<T>() + at * d.dk,
                                 dv.data<T>() + at * d.dv, d.delta ? dbeta.data<T>() + at : nullptr,
                                 d.gated ? dla.data<T>() + at : nullptr};
          backward_chunk(in, d, t0, n, saved.states.data<T>() + (h * d.chunks() + c) * d.dk * d.dv,
                         saved.u.data<T>() + at * d.dv, gr, ds.data(), s);
        }
      }
    });
  });
  std::vector<Tensor> grads{dq, dk, dv};
  if (d.delta) grads.push_back(dbeta);
  if (d.gated) grads.push_back(dla);
  return grads;
}

}  // namespace

Tensor gated_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& beta, const Tensor& log_alpha, std::size_t chunk,
                        bool normalise_qk) {
  DeltaRuleOptions options;
  options.chunk = chunk, options.normalise_qk = normalise_qk;
  return gated_delta_rule(q, k, v, beta, log_alpha, options);
}

Tensor gated_delta_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& beta, const Tensor& log_alpha,
                        const DeltaRuleOptions& options, Tensor* output_factors) {
  check_inputs(q, k, v, beta, log_alpha);
  if (options.chunk == 0) throw std::invalid_argument("gated_delta_rule: chunk must be positive");
  RuleDims d;
  d.heads = q.size(0) * q.size(1), d.tokens = q.size(2), d.dk = q.size(3), d.dv = v.size(3);
  d.chunk = std::min(options.chunk, std::max<std::size_t>(d.tokens, 1));
  d.delta = beta.defined(), d.gated = log_alpha.defined();
  d.normalise_qk = options.normalise_qk, d.normalise_output = options.normalise_output;
  Tensor out = empty(v.shape(), q.dtype());
  Saved saved{empty({d.heads, d.chunks(), d.dk, d.dv}, q.dtype()), empty({d.heads, d.tokens, d.dv}, q.dtype()),
              d.normalise_qk ? empty({2, d.heads, d.tokens}, q.dtype()) : Tensor(), Tensor(),
              d.normalise_output ? empty({q.size(0), q.size(1), d.tokens, 1}, q.dtype()) : Tensor()};
  run_forward(q, k, v, beta, log_alpha, d, out, saved);
  if (d.normalise_output) {
    saved.out = out.detach();  // the storage, not the handle that will hold this op's node
    if (output_factors) *output_factors = saved.out_factors;
  }
  std::vector<Tensor> inputs{q, k, v};
  if (d.delta) inputs.push_back(beta);
  if (d.gated) inputs.push_back(log_alpha);
  if (needs_grad({&q, &k, &v, &beta, &log_alpha})) {
    record(out, "gated_delta_rule", inputs,
           [q = q.detach(), k = k.detach(), v = v.detach(), beta = beta.defined() ? beta.detach() : Tensor(),
            la = log_alpha.defined() ? log_alpha.detach() : Tensor(), saved, d](const Tensor& g) {
             return run_backward(q, k, v, beta, la, d, saved, g);
           });
  }
  return out;
}

}  // namespace attnlab
