// Causal linear attention as one op (Katharopoulos et al. 2020, "Transformers are RNNs"):
//   S_i = sum_{j <= i} phi(k_j) v_j^T,  z_i = sum_{j <= i} phi(k_j),  out_i = phi(q_i)^T S_i / (phi(q_i) . z_i + eps)
// in O(T Dk Dv) time. Neither direction stores a [Dk, Dv] state per position: the forward keeps one
// running state per (batch, head), and the backward recomputes it going forward while it accumulates the
// reverse prefix sums R_j = sum_{i >= j} phi(q_i) dnum_i^T and r_j = sum_{i >= j} dden_i phi(q_i) going
// backward, so training memory grows as O(T D), not O(T D^2). States accumulate in double: a long
// sequence of large activations neither overflows nor loses the small terms.
//
// Legend: B batch, H heads, T tokens, Dk feature dim, Dv value dim.
#include <array>
#include <stdexcept>
#include <vector>

#include "framework/ops/ops.hpp"
#include "framework/ops/parallel.hpp"

namespace attnlab {
namespace {

struct Dims {
  std::size_t heads = 0, tokens = 0, dk = 0, dv = 0;  // heads = B * H
};

// S += k_i v_i^T, z += k_i: one step of the running state.
template <class T>
void accumulate_state(const T* ki, const T* vi, const Dims& d, std::vector<double>& s, std::vector<double>& z) {
  for (std::size_t a = 0; a < d.dk; ++a) {
    z[a] += ki[a];
    double* row = s.data() + a * d.dv;
    for (std::size_t c = 0; c < d.dv; ++c) row[c] += static_cast<double>(ki[a]) * vi[c];
  }
}

// out (and the denominators) for one (batch, head).
template <class T>
void forward_head(const T* q, const T* k, const T* v, T* out, T* den, const Dims& d, double eps) {
  std::vector<double> s(d.dk * d.dv, 0.0), z(d.dk, 0.0);
  for (std::size_t i = 0; i < d.tokens; ++i) {
    accumulate_state(k + i * d.dk, v + i * d.dv, d, s, z);
    const T* qi = q + i * d.dk;
    double denominator = eps;
    for (std::size_t a = 0; a < d.dk; ++a) denominator += qi[a] * z[a];
    T* oi = out + i * d.dv;
    for (std::size_t c = 0; c < d.dv; ++c) {
      double num = 0;
      for (std::size_t a = 0; a < d.dk; ++a) num += qi[a] * s[a * d.dv + c];
      oi[c] = static_cast<T>(num / denominator);
    }
    den[i] = static_cast<T>(denominator);
  }
}

template <class T>
void backward_head(const T* q, const T* k, const T* v, const T* out, const T* den, const T* g, T* dq, T* dk, T* dv,
                   const Dims& d) {
  // dnum_i = g_i / den_i, dden_i = -(g_i . out_i) / den_i.
  std::vector<double> dnum(d.tokens * d.dv), dden(d.tokens);
  for (std::size_t i = 0; i < d.tokens; ++i) {
    double dot = 0;
    for (std::size_t c = 0; c < d.dv; ++c) {
      dnum[i * d.dv + c] = static_cast<double>(g[i * d.dv + c]) / den[i];
      dot += static_cast<double>(g[i * d.dv + c]) * out[i * d.dv + c];
    }
    dden[i] = -dot / den[i];
  }
  // Forward sweep: dq_i = S_i dnum_i + dden_i z_i.
  std::vector<double> s(d.dk * d.dv, 0.0), z(d.dk, 0.0);
  for (std::size_t i = 0; i < d.tokens; ++i) {
    accumulate_state(k + i * d.dk, v + i * d.dv, d, s, z);
    for (std::size_t a = 0; a < d.dk; ++a) {
      double acc = dden[i] * z[a];
      const double* row = s.data() + a * d.dv;
      for (std::size_t c = 0; c < d.dv; ++c) acc += row[c] * dnum[i * d.dv + c];
      dq[i * d.dk + a] = static_cast<T>(acc);
    }
  }
  // Backward sweep: R_j = sum_{i >= j} q_i dnum_i^T, r_j = sum_{i >= j} dden_i q_i;
  // dk_j = R_j v_j + r_j, dv_j = R_j^T k_j.
  std::vector<double> r_mat(d.dk * d.dv, 0.0), r_vec(d.dk, 0.0);
  for (std::size_t j = d.tokens; j-- > 0;) {
    const T* qj = q + j * d.dk;
    for (std::size_t a = 0; a < d.dk; ++a) {
      r_vec[a] += dden[j] * qj[a];
      double* row = r_mat.data() + a * d.dv;
      for (std::size_t c = 0; c < d.dv; ++c) row[c] += static_cast<double>(qj[a]) * dnum[j * d.dv + c];
    }
    const T* kj = k + j * d.dk;
    const T* vj = v + j * d.dv;
    for (std::size_t a = 0; a < d.dk; ++a) {
      double acc = r_vec[a];
      const double* row = r_mat.data() + a * d.dv;
      for (std::size_t c = 0; c < d.dv; ++c) acc += row[c] * vj[c];
      dk[j * d.dk + a] = static_cast<T>(acc);
    }
    for (std::size_t c = 0; c < d.dv; ++c) {
      double acc = 0;
      for (std::size_t a = 0; a < d.dk; ++a) acc += r_mat[a * d.dv + c] * kj[a];
      dv[j * d.dv + c] = static_cast<T>(acc);
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
      for (std::size_t h = h0; h < h1; ++h)
        forward_head(pq + h * d.tokens * d.dk, pk + h * d.tokens * d.dk, pv + h * d.tokens * d.dv, po + h * d.tokens * d.dv,
                     pd + h * d.tokens, d, eps);
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
                 for (std::size_t h = h0; h < h1; ++h)
                   backward_head(q.data<T>() + h * nk, k.data<T>() + h * nk, v.data<T>() + h * nv, o.data<T>() + h * nv,
                                 den.data<T>() + h * d.tokens, g.data<T>() + h * nv, dq.data<T>() + h * nk,
                                 dk.data<T>() + h * nk, dv.data<T>() + h * nv, d);
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
