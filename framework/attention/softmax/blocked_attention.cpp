// softmax(scale q k^T, key padding, causal) v in blocks of queries, for softmax_attention.
// For each block of query rows the scores against the keys it may see are made, normalised and used
// while they are in cache; the forward keeps each row's log-sum-exp L and the backward recomputes the
// weights P = exp(scale s - L) block by block (the FlashAttention recipe: with dP = dO V^T and
// D_i = dO_i . O_i = sum_j P_ij dP_ij, dS = scale P (dP - D)). No [Tq, Tk] tensor is made: memory
// O(T D) per head, and a causal block stops at the last key its last row sees, which saves up to half
// the causal work.
//
// Legend: B batch, H heads, Tq/Tk tokens, D head dim, Dv value dim, R rows per block.
#include "framework/attention/softmax/blocked_attention.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <vector>

#include "framework/ops/blas.hpp"
#include "framework/ops/ops.hpp"
#include "framework/ops/parallel.hpp"
#include "framework/ops/row_kernels.hpp"

namespace attnlab {
namespace {

struct BlockDims {
  std::size_t heads_per_batch = 0, tq = 0, tk = 0, d = 0, dv = 0, rows = 0;
  double scale = 0;
  bool causal = false;
};

// Rows per block: the block's [R, Tk] scores within 256K elements (1 MB of floats): fewer rows make
// the K = R products of the backward (dK += dS^T Q, dV += P^T dO) inefficient, more fall out of cache
// (measured at n = 1024 and 4096: 64K elements 40 and 780 ms, 256K 38 and 628 ms, 1M 45 and 658 ms).
std::size_t block_rows(std::size_t tq, std::size_t tk) {
  return std::min(tq, std::max<std::size_t>(8, (std::size_t{1} << 18) / std::max<std::size_t>(tk, 1)));
}

// Keys row i sees: [0, visible) with padded ones excluded separately.
std::size_t visible_keys(const BlockDims& f, std::size_t i) {
  if (!f.causal) return f.tk;
  const auto last = static_cast<std::int64_t>(i) + static_cast<std::int64_t>(f.tk) - static_cast<std::int64_t>(f.tq);
  return last < 0 ? 0 : std::min(f.tk, static_cast<std::size_t>(last) + 1);
}

// Scores of rows [i0, i0 + rows) into s [rows, cols] (cols = keys the block sees), then the weights in
// place: P = exp(scale s - L) with L the row's log-sum-exp (computed when `lse_out`, else read from lse).
// Invisible and padded keys get 0; a row that sees no key gets zeros and L = +inf.
template <class T>
std::size_t block_weights(const T* q, const T* k, const bool* pad, const BlockDims& f, std::size_t i0, std::size_t rows, T* s,
                          T* lse, bool lse_out) {
  const std::size_t cols = visible_keys(f, i0 + rows - 1);
  if (cols == 0) {
    if (lse_out) std::fill(lse, lse + rows, std::numeric_limits<T>::infinity());
    return 0;
  }
  gemm(false, true, rows, cols, f.d, q + i0 * f.d, f.d, k, f.d, s, cols);
  const T scale = static_cast<T>(f.scale), neg_inf = -std::numeric_limits<T>::infinity();
  for (std::size_t r = 0; r < rows; ++r) {
    T* sr = s + r * cols;
    const std::size_t seen = visible_keys(f, i0 + r);
    // Vectorised loops (a scalar max chain is bound by its latency: it cost a third of the op at n = 512).
    if (pad) {
#pragma omp simd
      for (std::size_t j = 0; j < seen; ++j) sr[j] = pad[j] ? neg_inf : scale * sr[j];
    } else {
#pragma omp simd
      for (std::size_t j = 0; j < seen; ++j) sr[j] *= scale;
    }
    std::fill(sr + seen, sr + cols, neg_inf);
    if (lse_out) {
      T top = neg_inf;
#pragma omp simd reduction(max : top)
      for (std::size_t j = 0; j < seen; ++j) top = sr[j] > top ? sr[j] : top;
      if (top == neg_inf) {  // every visible key is padding
        lse[r] = std::numeric_limits<T>::infinity();
      } else {
        rowops::exp_shifted(sr, sr, cols, top);
        T total = 0;
#pragma omp simd reduction(+ : total)
        for (std::size_t j = 0; j < cols; ++j) total += sr[j];
        lse[r] = top + std::log(total);
        const T inv = T(1) / total;
#pragma omp simd
        for (std::size_t j = 0; j < cols; ++j) sr[j] *= inv;
        continue;
      }
    }
    if (lse[r] == std::numeric_limits<T>::infinity()) {
      std::fill(sr, sr + cols, T(0));
    } else {
      rowops::exp_shifted(sr, sr, cols, lse[r]);
    }
  }
  return cols;
}

template <class T>
void forward_head(const T* q, const T* k, const T* v, const bool* pad, const BlockDims& f, T* out, T* lse, rowops::AlignedVector<T>& s) {
  for (std::size_t i0 = 0; i0 < f.tq; i0 += f.rows) {
    const std::size_t rows = std::min(f.rows, f.tq - i0);
    const std::size_t cols = block_weights(q, k, pad, f, i0, rows, s.data(), lse + i0, true);
    if (cols == 0) {
      std::fill(out + i0 * f.dv, out + (i0 + rows) * f.dv, T(0));
      continue;
    }
    gemm(false, false, rows, f.dv, cols, s.data(), cols, v, f.dv, out + i0 * f.dv, f.dv);
  }
}

// dq, dk, dv of one head; dk and dv start at zero and accumulate over the query blocks.
template <class T>
void backward_head(const T* q, const T* k, const T* v, const bool* pad, const T* lse, const T* g, const BlockDims& f,
                   T* dq, T* dk, T* dv, rowops::AlignedVector<T>& s, rowops::AlignedVector<T>& dp) {
  std::fill(dk, dk + f.tk * f.d, T(0));
  std::fill(dv, dv + f.tk * f.dv, T(0));
  const T scale = static_cast<T>(f.scale);
  for (std::size_t i0 = 0; i0 < f.tq; i0 += f.rows) {
    const std::size_t rows = std::min(f.rows, f.tq - i0);
    std::vector<T> lse_block(lse + i0, lse + i0 + rows);
    const std::size_t cols = block_weights(q, k, pad, f, i0, rows, s.data(), lse_block.data(), false);
    if (cols == 0) {
      std::fill(dq + i0 * f.d, dq + (i0 + rows) * f.d, T(0));
      continue;
    }
    const T* gb = g + i0 * f.dv;
    gemm(false, true, rows, cols, f.dv, gb, f.dv, v, f.dv, dp.data(), cols);             // dP = dO V^T
    for (std::size_t r = 0; r < rows; ++r) {
      T* dr = dp.data() + r * cols;
      const T* pr = s.data() + r * cols;
      // dO_i . O_i, as sum_j P_ij dP_ij (O_i = sum_j P_ij v_j), so the output need not be kept.
      T dr_dot = 0;
#pragma omp simd reduction(+ : dr_dot)
      for (std::size_t j = 0; j < cols; ++j) dr_dot += pr[j] * dr[j];
#pragma omp simd
      for (std::size_t j = 0; j < cols; ++j) dr[j] = scale * pr[j] * (dr[j] - dr_dot);  // dS, d(scores)
    }
    gemm(false, false, rows, f.d, cols, dp.data(), cols, k, f.d, dq + i0 * f.d, f.d);        // dQ = dS K
    gemm(true, false, cols, f.d, rows, dp.data(), cols, q + i0 * f.d, f.d, dk, f.d, T(1));   // dK += dS^T Q
    gemm(true, false, cols, f.dv, rows, s.data(), cols, gb, f.dv, dv, f.dv, T(1));           // dV += P^T dO
  }
}

}  // namespace

namespace detail {

bool blocked_attention_applies(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask) {
  if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4) return false;
  for (std::size_t a = 0; a < 2; ++a)
    if (k.size(a) != q.size(a) || v.size(a) != q.size(a)) return false;
  if (!mask.defined()) return true;
  return mask.dtype() == DType::boolean && mask.dim() == 4 && mask.size(0) == q.size(0) && mask.size(1) == 1 && mask.size(2) == 1 &&
         mask.size(3) == k.size(2);
}

Tensor blocked_softmax_attention(const Tensor& q, const Tensor& k, const Tensor& v, double scale, const Tensor& mask, bool causal) {
  BlockDims f;
  f.heads_per_batch = q.size(1);
  f.tq = q.size(2), f.tk = k.size(2), f.d = q.size(3), f.dv = v.size(3);
  f.rows = block_rows(f.tq, f.tk);
  f.scale = scale, f.causal = causal;
  const std::size_t heads = q.size(0) * q.size(1);
  Tensor out = empty({q.size(0), q.size(1), f.tq, f.dv}, q.dtype());
  Tensor lse = empty({heads, f.tq}, q.dtype());
  const auto pad_of = [&, pm = mask.defined() ? mask.data<bool>() : nullptr](std::size_t h) {
    return pm ? pm + (h / f.heads_per_batch) * f.tk : nullptr;
  };
  dispatch_floating(q.dtype(), "softmax_attention", [&](auto tag) {
    using T = typename decltype(tag)::type;
    parallel_for(heads, 1, [&](std::size_t h0, std::size_t h1) {
      rowops::AlignedVector<T> s(f.rows * f.tk);
      for (std::size_t h = h0; h < h1; ++h)
        forward_head(q.data<T>() + h * f.tq * f.d, k.data<T>() + h * f.tk * f.d, v.data<T>() + h * f.tk * f.dv, pad_of(h), f,
                     out.data<T>() + h * f.tq * f.dv, lse.data<T>() + h * f.tq, s);
    });
  });
  if (needs_grad({&q, &k, &v})) {
    // Keeps q, k, v (the callers keep them anyway) and one number per query row.
    record(out, "softmax_attention", {q, k, v},
           [q = q.detach(), k = k.detach(), v = v.detach(), lse, mask, f, heads](const Tensor& g) {
             Tensor dq = empty(q.shape(), q.dtype()), dk = empty(k.shape(), k.dtype()), dv = empty(v.shape(), v.dtype());
             const bool* pm = mask.defined() ? mask.data<bool>() : nullptr;
             dispatch_floating(q.dtype(), "softmax_attention backward", [&](auto tag) {
               using T = typename decltype(tag)::type;
               parallel_for(heads, 1, [&](std::size_t h0, std::size_t h1) {
                 rowops::AlignedVector<T> s(f.rows * f.tk), dp(f.rows * f.tk);
                 for (std::size_t h = h0; h < h1; ++h)
                   backward_head(q.data<T>() + h * f.tq * f.d, k.data<T>() + h * f.tk * f.d, v.data<T>() + h * f.tk * f.dv,
                                 pm ? pm + (h / f.heads_per_batch) * f.tk : nullptr, lse.data<T>() + h * f.tq, g.data<T>() + h * f.tq * f.dv, f, dq.data<T>() + h * f.tq * f.d,
                                 dk.data<T>() + h * f.tk * f.d, dv.data<T>() + h * f.tk * f.dv, s, dp);
               });
             });
             return std::vector<Tensor>{dq, dk, dv};
           });
  }
  return out;
}

}  // namespace detail
}  // namespace attnlab
