// Causal linear attention as one op (Katharopoulos et al. 2020, "Transformers are RNNs"):
//   S_i = sum_{j <= i} phi(k_j) v_j^T,  z_i = sum_{j <= i} phi(k_j),  out_i = phi(q_i)^T S_i / (phi(q_i) . z_i + eps)
// computed chunk by chunk, as the chunked form of linear attention does (Hua et al. 2022, "Transformer
// Quality in Linear Time"): within a chunk of C tokens the causal part is a masked [C, C] product, and
// the chunks before it enter through one running state. With v extended by a column of ones, numerator
// and denominator come out of the same products:
//   vh = [v, 1],  Sh = [S, z] (state before the chunk),  A = tril(Qc Kc^T),
//   [num, den - eps] = A vh_c + Qc Sh,   then Sh += Kc^T vh_c.
// Every step is a matrix product (BLAS), O(T (C + D) D) time. The backward sweeps the chunks forward
// for dQ (recomputing the state) and backward for dK, dV (accumulating the reverse state
// R = sum over later queries of q_i dh_i^T), so neither direction stores a state per position or per
// chunk: training memory grows as O(T D), not O(T D^2). The running states are summed in double, so a
// long sequence of large activations neither overflows nor loses its small terms.
//
// Legend: B batch, H heads, T tokens, C chunk, Dk feature dim, Dv value dim, W = Dv + 1.
#include <algorithm>
#include <array>
#include <stdexcept>
#include <vector>

#include "framework/attention/linear/linear_attention.hpp"
#include "framework/ops/blas.hpp"
#include "framework/ops/parallel.hpp"

namespace attnlab {
namespace {

// Tokens per chunk. The masked [C, C] product costs C Dk per token and the state products 2 Dk W; 64
// keeps the products large enough for BLAS to run near its peak (see the note in docs/attention.md).
constexpr std::size_t kChunk = 64;

struct Dims {
  std::size_t heads = 0, tokens = 0, dk = 0, dv = 0;  // heads = B * H
  std::size_t w() const { return dv + 1; }
};

// Scratch of one worker, reused across the heads it handles.
template <class T>
struct Scratch {
  std::vector<T> vh, a, g, state_t, prod;
  std::vector<double> state;
  explicit Scratch(const Dims& d)
      : vh(kChunk * d.w()), a(kChunk * kChunk), g(kChunk * kChunk), state_t(d.dk * d.w()), prod(std::max(kChunk, d.dk) * d.w()),
        state(d.dk * d.w()) {}
};

// vh = [v, 1] for the n rows of a chunk.
template <class T>
void extend_values(const T* v, std::size_t n, const Dims& d, T* vh) {
  const std::size_t w = d.w();
  for (std::size_t i = 0; i < n; ++i) {
    std::copy(v + i * d.dv, v + (i + 1) * d.dv, vh + i * w);
    vh[i * w + d.dv] = T(1);
  }
}

// Zeroes the entries above the diagonal of an [n, n] matrix: query i sees keys j <= i.
template <class T>
void keep_lower(T* m, std::size_t n) {
  for (std::size_t i = 0; i + 1 < n; ++i) std::fill(m + i * n + i + 1, m + (i + 1) * n, T(0));
}

// state (double) += prod [rows, W]; then the T copy the next chunk's products read.
template <class T>
void add_to_state(const std::vector<T>& prod, std::size_t rows, const Dims& d, std::vector<double>& state, std::vector<T>& state_t) {
  const std::size_t n = rows * d.w();
  for (std::size_t i = 0; i < n; ++i) {
    state[i] += prod[i];
    state_t[i] = static_cast<T>(state[i]);
  }
}

// out (and the denominators) for one (batch, head).
template <class T>
void forward_head(const T* q, const T* k, const T* v, T* out, T* den, const Dims& d, double eps, Scratch<T>& s) {
  const std::size_t w = d.w();
  std::fill(s.state.begin(), s.state.end(), 0.0);
  std::fill(s.state_t.begin(), s.state_t.end(), T(0));
  for (std::size_t t0 = 0; t0 < d.tokens; t0 += kChunk) {
    const std::size_t n = std::min(kChunk, d.tokens - t0);
    const T *qc = q + t0 * d.dk, *kc = k + t0 * d.dk;
    extend_values(v + t0 * d.dv, n, d, s.vh.data());
    gemm(false, true, n, n, d.dk, qc, d.dk, kc, d.dk, s.a.data(), n);  // A = Qc Kc^T
    keep_lower(s.a.data(), n);
    T* numer = s.prod.data();  // [n, W]
    gemm(false, false, n, w, n, s.a.data(), n, s.vh.data(), w, numer, w);
    if (t0 > 0) gemm(false, false, n, w, d.dk, qc, d.dk, s.state_t.data(), w, numer, w, T(1));
    for (std::size_t i = 0; i < n; ++i) {
      const double denominator = static_cast<double>(numer[i * w + d.dv]) + eps;
      T* oi = out + (t0 + i) * d.dv;
      for (std::size_t c = 0; c < d.dv; ++c) oi[c] = static_cast<T>(numer[i * w + c] / denominator);
      den[t0 + i] = static_cast<T>(denominator);
    }
    if (t0 + n < d.tokens) {
      gemm(true, false, d.dk, w, n, kc, d.dk, s.vh.data(), w, s.prod.data(), w);  // Kc^T vh
      add_to_state(s.prod, d.dk, d, s.state, s.state_t);
    }
  }
}

template <class T>
void backward_head(const T* q, const T* k, const T* v, const T* out, const T* den, const T* g, T* dq, T* dk, T* dv,
                   const Dims& d, Scratch<T>& s) {
  const std::size_t w = d.w();
  // dh = [dnum, dden]: dnum_i = g_i / den_i, dden_i = -(g_i . out_i) / den_i.
  std::vector<T> dh(d.tokens * w);
  for (std::size_t i = 0; i < d.tokens; ++i) {
    double dot = 0;
    for (std::size_t c = 0; c < d.dv; ++c) {
      dh[i * w + c] = static_cast<T>(static_cast<double>(g[i * d.dv + c]) / den[i]);
      dot += static_cast<double>(g[i * d.dv + c]) * out[i * d.dv + c];
    }
    dh[i * w + d.dv] = static_cast<T>(-dot / den[i]);
  }
  // Forward over the chunks: dQc = tril(dh_c vh_c^T) Kc + dh_c Sh^T.
  std::fill(s.state.begin(), s.state.end(), 0.0);
  std::fill(s.state_t.begin(), s.state_t.end(), T(0));
  for (std::size_t t0 = 0; t0 < d.tokens; t0 += kChunk) {
    const std::size_t n = std::min(kChunk, d.tokens - t0);
    const T* kc = k + t0 * d.dk;
    const T* dhc = dh.data() + t0 * w;
    extend_values(v + t0 * d.dv, n, d, s.vh.data());
    gemm(false, true, n, n, w, dhc, w, s.vh.data(), w, s.g.data(), n);
    keep_lower(s.g.data(), n);
    gemm(false, false, n, d.dk, n, s.g.data(), n, kc, d.dk, dq + t0 * d.dk, d.dk);
    if (t0 > 0) gemm(false, true, n, d.dk, w, dhc, w, s.state_t.data(), w, dq + t0 * d.dk, d.dk, T(1));
    if (t0 + n < d.tokens) {
      gemm(true, false, d.dk, w, n, kc, d.dk, s.vh.data(), w, s.prod.data(), w);
      add_to_state(s.prod, d.dk, d, s.state, s.state_t);
    }
  }
  // Backward over the chunks, with R = sum over later chunks' queries of q_i dh_i^T [Dk, W]:
  //   dKc = tril(dh_c vh_c^T)^T Qc + vh_c R^T,   dVc = tril(Qc Kc^T)^T dnum_c + Kc R[:, :Dv].
  std::fill(s.state.begin(), s.state.end(), 0.0);
  std::fill(s.state_t.begin(), s.state_t.end(), T(0));
  const std::size_t chunks = (d.tokens + kChunk - 1) / kChunk;
  for (std::size_t c = chunks; c-- > 0;) {
    const std::size_t t0 = c * kChunk, n = std::min(kChunk, d.tokens - t0);
    const T *qc = q + t0 * d.dk, *kc = k + t0 * d.dk;
    const T* dhc = dh.data() + t0 * w;
    const bool later = t0 + n < d.tokens;  // R is zero for the last chunk
    extend_values(v + t0 * d.dv, n, d, s.vh.data());
    gemm(false, true, n, n, w, dhc, w, s.vh.data(), w, s.g.data(), n);
    keep_lower(s.g.data(), n);
    gemm(true, false, n, d.dk, n, s.g.data(), n, qc, d.dk, dk + t0 * d.dk, d.dk);
    if (later) gemm(false, true, n, d.dk, w, s.vh.data(), w, s.state_t.data(), w, dk + t0 * d.dk, d.dk, T(1));
    gemm(false, true, n, n, d.dk, qc, d.dk, kc, d.dk, s.a.data(), n);
    keep_lower(s.a.data(), n);
    gemm(true, false, n, d.dv, n, s.a.data(), n, dhc, w, dv + t0 * d.dv, d.dv);
    if (later) gemm(false, false, n, d.dv, d.dk, kc, d.dk, s.state_t.data(), w, dv + t0 * d.dv, d.dv, T(1));
    if (t0 > 0) {
      gemm(true, false, d.dk, w, n, qc, d.dk, dhc, w, s.prod.data(), w);  // Qc^T dh_c
      add_to_state(s.prod, d.dk, d, s.state, s.state_t);
    }
  }
}

}  // namespace

Tensor causal_linear_attention(const Tensor& phi_q, const Tensor& phi_k, const Tensor& v, double eps) {
  if (phi_q.dim() < 2 || phi_q.shape() != phi_k.shape() || v.dim() != phi_q.dim() || v.size(-2) != phi_q.size(-2)) {
    throw std::invalid_argument("causal_linear_attention: expected phi_q and phi_k [..., T, Dk] and v [..., T, Dv], got " +
                                shape_str(phi_q.shape()) + ", " + shape_str(phi_k.shape()) + ", " + shape_str(v.shape()));
  }
  if (phi_q.dtype() != phi_k.dtype() || phi_q.dtype() != v.dtype()) {
    throw std::invalid_argument("causal_linear_attention: operands must share a dtype");
  }
  for (std::size_t i = 0; i + 2 < v.dim(); ++i) {
    if (v.shape()[i] != phi_q.shape()[i]) throw std::invalid_argument("causal_linear_attention: batch axes differ");
  }
  Dims d;
  d.tokens = phi_q.size(-2);
  d.dk = phi_q.size(-1);
  d.dv = v.size(-1);
  d.heads = shape_numel(Shape(phi_q.shape().begin(), phi_q.shape().end() - 2));
  Shape out_shape = v.shape();
  Tensor out = empty(out_shape, v.dtype());
  Shape den_shape(out_shape.begin(), out_shape.end() - 1);
  Tensor den = empty(den_shape, v.dtype());  // saved for backward
  dispatch_floating(v.dtype(), "causal_linear_attention", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T *pq = phi_q.data<T>(), *pk = phi_k.data<T>(), *pv = v.data<T>();
    T *po = out.data<T>(), *pd = den.data<T>();
    parallel_for(d.heads, 1, [&](std::size_t h0, std::size_t h1) {
      Scratch<T> scratch(d);
      for (std::size_t h = h0; h < h1; ++h)
        forward_head(pq + h * d.tokens * d.dk, pk + h * d.tokens * d.dk, pv + h * d.tokens * d.dv, po + h * d.tokens * d.dv,
                     pd + h * d.tokens, d, eps, scratch);
    });
  });
  if (needs_grad({&phi_q, &phi_k, &v})) {
    record(out, "causal_linear_attention", {phi_q, phi_k, v},
           [q = phi_q.detach(), k = phi_k.detach(), v = v.detach(), o = out.detach(), den, d](const Tensor& g) {
             Tensor dq = empty(q.shape(), q.dtype()), dk = empty(k.shape(), k.dtype()), dv = empty(v.shape(), v.dtype());
             dispatch_floating(q.dtype(), "causal_linear_attention_backward", [&](auto tag) {
               using T = typename decltype(tag)::type;
               const std::size_t nk = d.tokens * d.dk, nv = d.tokens * d.dv;
               parallel_for(d.heads, 1, [&](std::size_t h0, std::size_t h1) {
                 Scratch<T> scratch(d);
                 for (std::size_t h = h0; h < h1; ++h)
                   backward_head(q.data<T>() + h * nk, k.data<T>() + h * nk, v.data<T>() + h * nv, o.data<T>() + h * nv,
                                 den.data<T>() + h * d.tokens, g.data<T>() + h * nv, dq.data<T>() + h * nk,
                                 dk.data<T>() + h * nk, dv.data<T>() + h * nv, d, scratch);
               });
             });
             return std::vector<Tensor>{dq, dk, dv};
           });
  }
  return out;
}

Tensor linear_attention(const Tensor& phi_q, const Tensor& phi_k, const Tensor& v, double eps) {
  if (phi_q.dim() < 2 || phi_k.dim() != phi_q.dim() || v.dim() != phi_q.dim()) {
    throw std::invalid_argument("linear_attention: phi_q, phi_k, v need the same rank >= 2, got " + shape_str(phi_q.shape()) +
                                ", " + shape_str(phi_k.shape()) + ", " + shape_str(v.shape()));
  }
  // out = (phi_q S) / (phi_q z + eps), S = phi_k^T v [.., F, D], z = sum_j phi_k_j [.., 1, F].
  auto summaries = [eps](const Tensor& fq, const Tensor& fk, const Tensor& values) {
    const Tensor s = matmul(fk, values, true, false);
    const Tensor z = sum(fk, -2, true);
    const Tensor denominator = add(matmul(fq, z, false, true), eps);  // [.., Tq, 1]
    return std::array<Tensor, 3>{s, z, denominator};
  };
  Tensor out;
  {
    NoGradGuard no_grad;
    const auto [s, z, denominator] = summaries(phi_q, phi_k, v);
    out = matmul(phi_q, s) / denominator;
  }
  if (needs_grad({&phi_q, &phi_k, &v})) {
    // Keeps only the inputs; the backward recomputes the small summaries and works in a few products,
    // rather than holding every intermediate of the composed ops.
    record(out, "linear_attention", {phi_q, phi_k, v},
           [fq = phi_q.detach(), fk = phi_k.detach(), values = v.detach(), summaries](const Tensor& g) {
             NoGradGuard no_grad;
             const auto [s, z, denominator] = summaries(fq, fk, values);
             const Tensor u = g / denominator;                                  // dL/d(numerator) [.., Tq, D]
             const Tensor c = neg(sum(u * matmul(fq, s), -1, true)) / denominator;  // dL/d(denominator) [.., Tq, 1]
             const Tensor ds = matmul(fq, u, true, false);                       // [.., F, D]
             const Tensor dz = matmul(c, fq, true, false);                       // [.., 1, F]
             // d fq = u s^T + c z and d fk = v ds^T + 1 dz, each one product over an extra column, so no
             // [.., T, F] temporary is made beside the two results.
             Shape ones_shape = values.shape();
             ones_shape.back() = 1;
             const Tensor dfq = matmul(concat({u, c}, -1), concat({s, transpose(z, -1, -2)}, -1), false, true);
             const Tensor dfk = matmul(concat({values, ones(ones_shape, values.dtype())}, -1),
                                       concat({ds, transpose(dz, -1, -2)}, -1), false, true);
             return std::vector<Tensor>{dfq, dfk, matmul(fk, ds)};
           });
  }
  return out;
}

}  // namespace attnlab
