// The performer kernel's fused ops. Bidirectional FAVOR+ attention (Choromanski et al. 2020) as one op, in
// blocks of tokens:
//   x' = x / D^(1/4),  phi(x) = c * (exp(w . x' - |x'|^2 / 2 - s) + eps_f * exp(-s)),  c = 1 / sqrt(m)
//   S = sum_j phi(k_j) v_j^T,  z = sum_j phi(k_j),  out_i = phi(q_i)^T S / (phi(q_i) . z + eps)
// The composed form (projections, features, linear attention) holds [T, m] tensors per head, several
// of them in the backward; at m = 256 features those outgrow the L2 cache as T grows, and time grows
// faster than T. Here the features of a block of kBlock tokens are made, used and dropped while they are
// in cache: the forward keeps S and z per head ([m, Dv + 1]) and the backward recomputes each block's
// features from q, k and w. Memory O(T D + m D) per head, time O(T m D).
// The stabiliser s: per query row the largest exponent, for keys the constant key_bound; both cancel in
// the ratio (up to eps) and are held constant in the backward. Padded keys have phi = 0.
//
// Legend: B batch, H heads, Tq/Tk tokens, D head dim, Dv value dim, m features.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include "framework/attention/performer/favor_attention.hpp"
#include "framework/ops/blas.hpp"
#include "framework/ops/parallel.hpp"
#include "framework/ops/row_kernels.hpp"

namespace attnlab {
namespace {

constexpr std::size_t kBlock = 128;  // tokens per block: [128, 256] floats is 128 KB

struct FavorDims {
  std::size_t heads_per_batch = 0, tq = 0, tk = 0, d = 0, dv = 0, m = 0;
  double alpha = 0, scale = 0, feature_eps = 0, eps = 0, key_bound = 0;
};

// Features of `rows` tokens x [rows, D]: xs = alpha x, proj = xs w^T, phi = scale * (exp(proj - hn - s) +
// feature_eps * exp(-s)); floor[r] = scale * feature_eps * exp(-s_r) (the part of phi without gradient).
// A row with masked[r] gets phi = 0 and floor = 0.
template <class T>
void block_features(const T* x, std::size_t rows, const T* w, const FavorDims& f, bool row_stabiliser, const bool* masked,
                    T* xs, T* hn, T* phi, T* floor) {
  const std::size_t d = f.d, m = f.m;
  for (std::size_t r = 0; r < rows; ++r) {
    T norm = 0;
    for (std::size_t c = 0; c < d; ++c) {
      xs[r * d + c] = static_cast<T>(f.alpha) * x[r * d + c];
      norm += xs[r * d + c] * xs[r * d + c];
    }
    hn[r] = T(0.5) * norm;
  }
  gemm(false, true, rows, m, d, xs, d, w, d, phi, m);  // proj, in place of phi
  const T c = static_cast<T>(f.scale);
  for (std::size_t r = 0; r < rows; ++r) {
    T* pr = phi + r * m;
    if (masked && masked[r]) {
      std::fill(pr, pr + m, T(0));
      floor[r] = 0;
      continue;
    }
    const T s = row_stabiliser ? rowops::max(pr, m) - hn[r] : static_cast<T>(f.key_bound);
    rowops::exp_shifted(pr, pr, m, hn[r] + s);
    floor[r] = c * static_cast<T>(f.feature_eps) * std::exp(-s);
    const T fl = floor[r];
#pragma omp simd
    for (std::size_t i = 0; i < m; ++i) pr[i] = c * pr[i] + fl;
  }
}

// From dphi [rows, m] (overwritten by dproj) to dx [rows, D]: dproj = dphi * (phi - floor),
// dhn = -sum dproj, dxs = dproj w + dhn xs, dx = alpha dxs.
template <class T>
void block_input_grad(T* dphi, const T* phi, const T* floor, const T* xs, std::size_t rows, const T* w, const FavorDims& f,
                      T* dx) {
  const std::size_t d = f.d, m = f.m;
  std::vector<T> dhn(rows);
  for (std::size_t r = 0; r < rows; ++r) {
    T* dr = dphi + r * m;
    const T* pr = phi + r * m;
    const T fl = floor[r];
    T total = 0;
#pragma omp simd reduction(+ : total)
    for (std::size_t i = 0; i < m; ++i) {
      dr[i] *= pr[i] - fl;
      total += dr[i];
    }
    dhn[r] = -total;
  }
  gemm(false, false, rows, d, m, dphi, m, w, d, dx, d);
  const T alpha = static_cast<T>(f.alpha);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < d; ++c) dx[r * d + c] = alpha * (dx[r * d + c] + dhn[r] * xs[r * d + c]);
}

// Per-thread block buffers.
template <class T>
struct Scratch {
  rowops::AlignedVector<T> xs, hn, phi, floor, dphi, rows_dv, den;
  explicit Scratch(const FavorDims& f)
      : xs(kBlock * f.d), hn(kBlock), phi(kBlock * f.m), floor(kBlock), dphi(kBlock * f.m), rows_dv(kBlock * f.dv), den(kBlock) {}
};

// S [m, Dv] and z [m] of one head's keys.
template <class T>
void key_summaries(const T* k, const T* v, const bool* masked, const T* w, const FavorDims& f, T* s, T* z, Scratch<T>& b) {
  std::fill(s, s + f.m * f.dv, T(0));
  std::fill(z, z + f.m, T(0));
  for (std::size_t j0 = 0; j0 < f.tk; j0 += kBlock) {
    const std::size_t rows = std::min(kBlock, f.tk - j0);
    block_features(k + j0 * f.d, rows, w, f, false, masked ? masked + j0 : nullptr, b.xs.data(), b.hn.data(), b.phi.data(),
                   b.floor.data());
    gemm(true, false, f.m, f.dv, rows, b.phi.data(), f.m, v + j0 * f.dv, f.dv, s, f.dv, T(1));
    for (std::size_t r = 0; r < rows; ++r) {
      const T* pr = b.phi.data() + r * f.m;
#pragma omp simd
      for (std::size_t i = 0; i < f.m; ++i) z[i] += pr[i];
    }
  }
}

// One block of queries: features into b.phi, out [rows, Dv] = phi S / den, den = phi . z + eps.
template <class T>
void query_block(const T* q, std::size_t rows, const T* w, const T* s, const T* z, const FavorDims& f, T* out, Scratch<T>& b) {
  block_features(q, rows, w, f, true, nullptr, b.xs.data(), b.hn.data(), b.phi.data(), b.floor.data());
  gemm(false, false, rows, f.dv, f.m, b.phi.data(), f.m, s, f.dv, out, f.dv);
  for (std::size_t r = 0; r < rows; ++r) {
    const T* pr = b.phi.data() + r * f.m;
    T den = static_cast<T>(f.eps);
#pragma omp simd reduction(+ : den)
    for (std::size_t i = 0; i < f.m; ++i) den += pr[i] * z[i];
    b.den[r] = den;
    for (std::size_t c = 0; c < f.dv; ++c) out[r * f.dv + c] /= den;
  }
}

template <class T>
void forward_head(const T* q, const T* k, const T* v, const bool* masked, const T* w, const FavorDims& f, T* out, T* s, T* z,
                  Scratch<T>& b) {
  key_summaries(k, v, masked, w, f, s, z, b);
  for (std::size_t i0 = 0; i0 < f.tq; i0 += kBlock)
    query_block(q + i0 * f.d, std::min(kBlock, f.tq - i0), w, s, z, f, out + i0 * f.dv, b);
}

template <class T>
void backward_head(const T* q, const T* k, const T* v, const bool* masked, const T* w, const T* s, const T* z, const T* g,
                   const FavorDims& f, T* dq, T* dk, T* dv, Scratch<T>& b) {
  const std::size_t m = f.m, dvd = f.dv;
  std::vector<T> ds(m * dvd, T(0)), dz(m, T(0));
  // Queries: out = num / den with num = phi S, den = phi . z + eps. With u = g / den and
  // c = -(g . out) / den: dphi = u S^T + c z^T, dS += phi^T u, dz += c phi.
  for (std::size_t i0 = 0; i0 < f.tq; i0 += kBlock) {
    const std::size_t rows = std::min(kBlock, f.tq - i0);
    T* out = b.rows_dv.data();
    query_block(q + i0 * f.d, rows, w, s, z, f, out, b);
    std::vector<T> cc(rows);
    for (std::size_t r = 0; r < rows; ++r) {
      const T* gr = g + (i0 + r) * dvd;
      T* orow = out + r * dvd;  // becomes u
      T dot = 0;
      for (std::size_t c = 0; c < dvd; ++c) dot += gr[c] * orow[c];
      cc[r] = -dot / b.den[r];
      for (std::size_t c = 0; c < dvd; ++c) orow[c] = gr[c] / b.den[r];
    }
    const T* u = out;
    gemm(false, true, rows, m, dvd, u, dvd, s, dvd, b.dphi.data(), m);
    for (std::size_t r = 0; r < rows; ++r) {
      T* dr = b.dphi.data() + r * m;
      const T* pr = b.phi.data() + r * m;
      const T cr = cc[r];
#pragma omp simd
      for (std::size_t i = 0; i < m; ++i) {
        dr[i] += cr * z[i];
        dz[i] += cr * pr[i];
      }
    }
    gemm(true, false, m, dvd, rows, b.phi.data(), m, u, dvd, ds.data(), dvd, T(1));
    block_input_grad(b.dphi.data(), b.phi.data(), b.floor.data(), b.xs.data(), rows, w, f, dq + i0 * f.d);
  }
  // Keys: dphi = v dS^T + 1 dz^T (0 for padded keys, whose phi is a constant 0), dv = phi dS.
  for (std::size_t j0 = 0; j0 < f.tk; j0 += kBlock) {
    const std::size_t rows = std::min(kBlock, f.tk - j0);
    const bool* mrow = masked ? masked + j0 : nullptr;
    block_features(k + j0 * f.d, rows, w, f, false, mrow, b.xs.data(), b.hn.data(), b.phi.data(), b.floor.data());
    gemm(false, false, rows, dvd, m, b.phi.data(), m, ds.data(), dvd, dv + j0 * dvd, dvd);
    gemm(false, true, rows, m, dvd, v + j0 * dvd, dvd, ds.data(), dvd, b.dphi.data(), m);
    for (std::size_t r = 0; r < rows; ++r) {
      T* dr = b.dphi.data() + r * m;
      if (mrow && mrow[r]) {
        std::fill(dr, dr + m, T(0));
        continue;
      }
#pragma omp simd
      for (std::size_t i = 0; i < m; ++i) dr[i] += dz[i];
    }
    block_input_grad(b.dphi.data(), b.phi.data(), b.floor.data(), b.xs.data(), rows, w, f, dk + j0 * f.d);
  }
}

void check_inputs(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& w, const Tensor& mask) {
  const auto fail = [&](const std::string& what) {
    throw std::invalid_argument("favor_attention: " + what + " (q " + shape_str(q.shape()) + ", k " + shape_str(k.shape()) +
                                ", v " + shape_str(v.shape()) + ", w " + shape_str(w.shape()) + ")");
  };
  if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4) fail("q, k and v must be [B, H, T, D]");
  for (std::size_t a = 0; a < 2; ++a)
    if (k.size(a) != q.size(a) || v.size(a) != q.size(a)) fail("q, k and v need the same batch and heads");
  if (k.size(3) != q.size(3) || v.size(2) != k.size(2)) fail("k must match q's head dim and v k's tokens");
  if (w.dim() != 2 || w.size(1) != q.size(3)) fail("w must be [m, D]");
  if (k.dtype() != q.dtype() || v.dtype() != q.dtype() || w.dtype() != q.dtype()) fail("q, k, v and w need one dtype");
  if (mask.defined() && (mask.dtype() != DType::boolean || mask.dim() != 2 || mask.size(0) != q.size(0) || mask.size(1) != k.size(2)))
    fail("the key padding mask must be bool [B, Tk], got " + shape_str(mask.shape()));
}

}  // namespace

Tensor favor_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& w_in, const Tensor& mask,
                       double feature_eps, double eps, double key_bound) {
  check_inputs(q, k, v, w_in, mask);
  const Tensor w = w_in.detach();  // tensors are contiguous row-major (tensor.hpp)
  FavorDims f;
  f.heads_per_batch = q.size(1);
  f.tq = q.size(2), f.tk = k.size(2), f.d = q.size(3), f.dv = v.size(3), f.m = w.size(0);
  f.alpha = std::pow(static_cast<double>(f.d), -0.25);
  f.scale = 1.0 / std::sqrt(static_cast<double>(f.m));
  f.feature_eps = feature_eps, f.eps = eps, f.key_bound = key_bound;
  const std::size_t heads = q.size(0) * q.size(1);
  Tensor out = empty({q.size(0), q.size(1), f.tq, f.dv}, q.dtype());
  Tensor summaries = empty({heads, f.m * (f.dv + 1)}, q.dtype());  // S and z of every head, for the backward
  dispatch_floating(q.dtype(), "favor_attention", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const bool* pm = mask.defined() ? mask.data<bool>() : nullptr;
    parallel_for(heads, 1, [&](std::size_t h0, std::size_t h1) {
      Scratch<T> b(f);
      for (std::size_t h = h0; h < h1; ++h) {
        T* sz = summaries.data<T>() + h * f.m * (f.dv + 1);
        forward_head(q.data<T>() + h * f.tq * f.d, k.data<T>() + h * f.tk * f.d, v.data<T>() + h * f.tk * f.dv,
                     pm ? pm + (h / f.heads_per_batch) * f.tk : nullptr, w.data<T>(), f, out.data<T>() + h * f.tq * f.dv, sz,
                     sz + f.m * f.dv, b);
      }
    });
  });
  if (needs_grad({&q, &k, &v})) {
    record(out, "favor_attention", {q, k, v},
           [q = q.detach(), k = k.detach(), v = v.detach(), w, mask, summaries, f, heads](const Tensor& g) {
             Tensor dq = empty(q.shape(), q.dtype()), dk = empty(k.shape(), k.dtype()), dv = empty(v.shape(), v.dtype());
             dispatch_floating(q.dtype(), "favor_attention backward", [&](auto tag) {
               using T = typename decltype(tag)::type;
               const bool* pm = mask.defined() ? mask.data<bool>() : nullptr;
               parallel_for(heads, 1, [&](std::size_t h0, std::size_t h1) {
                 Scratch<T> b(f);
                 for (std::size_t h = h0; h < h1; ++h) {
                   const T* sz = summaries.data<T>() + h * f.m * (f.dv + 1);
                   backward_head(q.data<T>() + h * f.tq * f.d, k.data<T>() + h * f.tk * f.d, v.data<T>() + h * f.tk * f.dv,
                                 pm ? pm + (h / f.heads_per_batch) * f.tk : nullptr, w.data<T>(), sz, sz + f.m * f.dv,
                                 g.data<T>() + h * f.tq * f.dv, f, dq.data<T>() + h * f.tq * f.d, dk.data<T>() + h * f.tk * f.d,
                                 dv.data<T>() + h * f.tk * f.dv, b);
                 }
               });
             });
             return std::vector<Tensor>{dq, dk, dv};
           });
  }
  return out;
}

// ---- positive random features (the causal path's feature map) ----

Tensor positive_random_features(const Tensor& proj, const Tensor& half_norm, double scale, double eps, bool row_stabiliser,
                                double stabiliser) {
  if (proj.dim() == 0) throw std::invalid_argument("positive_random_features: needs a tensor of rank >= 1");
  Shape norm_shape = proj.shape();
  norm_shape.back() = 1;
  if (half_norm.shape() != norm_shape || half_norm.dtype() != proj.dtype()) {
    throw std::invalid_argument("positive_random_features: half_norm must be " + shape_str(norm_shape) + " of proj's dtype, got " +
                                shape_str(half_norm.shape()));
  }
  const std::size_t cols = proj.size(-1);
  const std::size_t rows = cols ? proj.numel() / cols : 0;
  Tensor out = empty(proj.shape(), proj.dtype());
  Tensor floor = empty({rows}, proj.dtype());  // scale * eps * exp(-s) per row: the part of out without a gradient
  dispatch_floating(proj.dtype(), "positive_random_features", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* pp = proj.data<T>();
    const T* ph = half_norm.data<T>();
    T* po = out.data<T>();
    T* pf = floor.data<T>();
    const T c = static_cast<T>(scale);
    parallel_for(rows, rowops::grain(cols), [&](std::size_t r0, std::size_t r1) {
      for (std::size_t r = r0; r < r1; ++r) {
        const T* pr = pp + r * cols;
        T* orow = po + r * cols;
        const T s = row_stabiliser ? rowops::max(pr, cols) - ph[r] : static_cast<T>(stabiliser);
        rowops::exp_shifted(pr, orow, cols, ph[r] + s);
        pf[r] = c * static_cast<T>(eps) * std::exp(-s);
        for (std::size_t i = 0; i < cols; ++i) orow[i] = c * orow[i] + pf[r];
      }
    });
  });
  if (needs_grad({&proj, &half_norm})) {
    // d out / d proj = out - floor (the exponential term); d out / d half_norm = -(out - floor).
    record(out, "positive_random_features", {proj, half_norm}, [y = out.detach(), floor, rows, cols](const Tensor& g) {
      Tensor dproj = empty(y.shape(), y.dtype());
      Shape norm_shape = y.shape();
      norm_shape.back() = 1;
      Tensor dnorm = empty(norm_shape, y.dtype());
      dispatch_floating(y.dtype(), "positive_random_features backward", [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* py = y.data<T>();
        const T* pg = g.data<T>();
        const T* pf = floor.data<T>();
        T* pd = dproj.data<T>();
        T* pn = dnorm.data<T>();
        parallel_for(rows, rowops::grain(cols), [&](std::size_t r0, std::size_t r1) {
          for (std::size_t r = r0; r < r1; ++r) {
            const T* yr = py + r * cols;
            const T* gr = pg + r * cols;
            T* dr = pd + r * cols;
            const T f = pf[r];
#pragma omp simd
            for (std::size_t i = 0; i < cols; ++i) dr[i] = gr[i] * (yr[i] - f);
            pn[r] = -rowops::sum(dr, cols);
          }
        });
      });
      return std::vector<Tensor>{dproj, dnorm};
    });
  }
  return out;
}

}  // namespace attnlab
