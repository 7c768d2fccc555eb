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
#include <memory>
#include <stdexcept>
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
  std::size_t window = 0;              // 0: every key (up to causality); else |p_i - j| <= window
  const double* slopes = nullptr;      // ALiBi, per head (heads_per_batch of them), or null
};

// Query i sits at key position p_i = i + Tk - Tq (Tq == Tk in self-attention).
std::int64_t position(const BlockDims& f, std::size_t i) {
  return static_cast<std::int64_t>(i) + static_cast<std::int64_t>(f.tk) - static_cast<std::int64_t>(f.tq);
}

// Keys row i sees: [first, last) (padded ones excluded separately).
std::size_t first_key(const BlockDims& f, std::size_t i) {
  if (!f.window) return 0;
  const std::int64_t from = position(f, i) - static_cast<std::int64_t>(f.window);
  return from < 0 ? 0 : std::min(f.tk, static_cast<std::size_t>(from));
}
std::size_t last_key(const BlockDims& f, std::size_t i) {
  if (!f.causal && !f.window) return f.tk;
  const std::int64_t end = position(f, i) + 1 + (f.causal ? 0 : static_cast<std::int64_t>(f.window));
  return end < 0 ? 0 : std::min(f.tk, static_cast<std::size_t>(end));
}

// Rows per block: the block's [R, cols] scores within 256K elements (1 MB of floats): fewer rows make
// the K = R products of the backward (dK += dS^T Q, dV += P^T dO) inefficient, more fall out of cache
// (measured at n = 1024 and 4096: 64K elements 40 and 780 ms, 256K 38 and 628 ms, 1M 45 and 658 ms).
// A window's block of R rows spans R - 1 + (its band) keys, of which each row uses the band: R near the
// band keeps the wasted scores under half.
std::size_t block_rows(const BlockDims& f) {
  const std::size_t budget = std::size_t{1} << 18;
  if (!f.window) return std::min(f.tq, std::max<std::size_t>(8, budget / std::max<std::size_t>(f.tk, 1)));
  const std::size_t band = std::min(f.tk, (f.causal ? 1 : 2) * f.window + 1);
  std::size_t rows = std::max<std::size_t>(16, band);
  while (rows > 8 && rows * std::min(f.tk, rows + band) > budget) rows /= 2;
  return std::min(f.tq, rows);
}

// The widest block of keys any block of rows sees (for scratch sizes).
std::size_t block_cols(const BlockDims& f) {
  if (!f.window) return f.tk;
  return std::min(f.tk, f.rows + (f.causal ? 1 : 2) * f.window + 1);
}

// Scores of rows [i0, i0 + rows) against keys [c0, c0 + cols) into s [rows, cols], then the weights in
// place: P = exp(scale s + bias - L) with L the row's log-sum-exp (computed when `lse_out`, else read from
// lse) and bias ALiBi's -m |p_i - j|. Invisible and padded keys get 0; a row that sees no key gets zeros
// and L = +inf. Returns {c0, cols}.
template <class T>
std::pair<std::size_t, std::size_t> block_weights(const T* q, const T* k, const bool* pad, const BlockDims& f, std::size_t head,
                                                  std::size_t i0, std::size_t rows, T* s, T* lse, bool lse_out) {
  const std::size_t c0 = first_key(f, i0), c1 = last_key(f, i0 + rows - 1);
  const std::size_t cols = c1 > c0 ? c1 - c0 : 0;
  if (cols == 0) {
    if (lse_out) std::fill(lse, lse + rows, std::numeric_limits<T>::infinity());
    return {c0, 0};
  }
  gemm(false, true, rows, cols, f.d, q + i0 * f.d, f.d, k + c0 * f.d, f.d, s, cols);
  const T scale = static_cast<T>(f.scale), neg_inf = -std::numeric_limits<T>::infinity();
  const T slope = f.slopes ? static_cast<T>(f.slopes[head % f.heads_per_batch]) : T(0);
  for (std::size_t r = 0; r < rows; ++r) {
    T* sr = s + r * cols;
    const std::size_t from = first_key(f, i0 + r) - c0, to = last_key(f, i0 + r) - c0;
    // Vectorised loops (a scalar max chain is bound by its latency: it cost a third of the op at n = 512).
    if (f.slopes) {
      const T at = static_cast<T>(position(f, i0 + r) - static_cast<std::int64_t>(c0));  // p_i in block columns
#pragma omp simd
      for (std::size_t j = from; j < to; ++j) {
        const T distance = at > static_cast<T>(j) ? at - static_cast<T>(j) : static_cast<T>(j) - at;
        sr[j] = scale * sr[j] - slope * distance;
      }
    } else {
#pragma omp simd
      for (std::size_t j = from; j < to; ++j) sr[j] *= scale;
    }
    if (pad) {
      const bool* pc = pad + c0;
#pragma omp simd
      for (std::size_t j = from; j < to; ++j) sr[j] = pc[j] ? neg_inf : sr[j];
    }
    std::fill(sr, sr + from, neg_inf);
    std::fill(sr + to, sr + cols, neg_inf);
    if (lse_out) {
      T top = neg_inf;
#pragma omp simd reduction(max : top)
      for (std::size_t j = from; j < to; ++j) top = sr[j] > top ? sr[j] : top;
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
  return {c0, cols};
}

template <class T>
void forward_head(const T* q, const T* k, const T* v, const bool* pad, const BlockDims& f, std::size_t head, T* out, T* lse,
                  rowops::AlignedVector<T>& s) {
  for (std::size_t i0 = 0; i0 < f.tq; i0 += f.rows) {
    const std::size_t rows = std::min(f.rows, f.tq - i0);
    const auto [c0, cols] = block_weights(q, k, pad, f, head, i0, rows, s.data(), lse + i0, true);
    if (cols == 0) {
      std::fill(out + i0 * f.dv, out + (i0 + rows) * f.dv, T(0));
      continue;
    }
    gemm(false, false, rows, f.dv, cols, s.data(), cols, v + c0 * f.dv, f.dv, out + i0 * f.dv, f.dv);
  }
}

// dq, dk, dv of one head; dk and dv start at zero and accumulate over the query blocks.
template <class T>
void backward_head(const T* q, const T* k, const T* v, const bool* pad, const T* lse, const T* g, const BlockDims& f, std::size_t head,
                   T* dq, T* dk, T* dv, rowops::AlignedVector<T>& s, rowops::AlignedVector<T>& dp) {
  std::fill(dk, dk + f.tk * f.d, T(0));
  std::fill(dv, dv + f.tk * f.dv, T(0));
  const T scale = static_cast<T>(f.scale);
  for (std::size_t i0 = 0; i0 < f.tq; i0 += f.rows) {
    const std::size_t rows = std::min(f.rows, f.tq - i0);
    std::vector<T> lse_block(lse + i0, lse + i0 + rows);
    const auto [c0, cols] = block_weights(q, k, pad, f, head, i0, rows, s.data(), lse_block.data(), false);
    if (cols == 0) {
      std::fill(dq + i0 * f.d, dq + (i0 + rows) * f.d, T(0));
      continue;
    }
    const T* gb = g + i0 * f.dv;
    gemm(false, true, rows, cols, f.dv, gb, f.dv, v + c0 * f.dv, f.dv, dp.data(), cols);  // dP = dO V^T
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
    gemm(false, false, rows, f.d, cols, dp.data(), cols, k + c0 * f.d, f.d, dq + i0 * f.d, f.d);        // dQ = dS K
    gemm(true, false, cols, f.d, rows, dp.data(), cols, q + i0 * f.d, f.d, dk + c0 * f.d, f.d, T(1));    // dK += dS^T Q
    gemm(true, false, cols, f.dv, rows, s.data(), cols, gb, f.dv, dv + c0 * f.dv, f.dv, T(1));           // dV += P^T dO
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

Tensor blocked_softmax_attention(const Tensor& q, const Tensor& k, const Tensor& v, double scale, const Tensor& mask, bool causal,
                                 const ScoreBand& band) {
  BlockDims f;
  f.heads_per_batch = q.size(1);
  f.tq = q.size(2), f.tk = k.size(2), f.d = q.size(3), f.dv = v.size(3);
  f.scale = scale, f.causal = causal, f.window = band.window;
  f.rows = block_rows(f);
  const auto slopes = std::make_shared<const std::vector<double>>(band.alibi_slopes);  // kept by the backward
  if (!slopes->empty()) {
    if (slopes->size() != f.heads_per_batch) {
      throw std::invalid_argument("softmax_attention: " + std::to_string(slopes->size()) + " ALiBi slopes for " +
                                  std::to_string(f.heads_per_batch) + " heads");
    }
    f.slopes = slopes->data();
  }
  const std::size_t heads = q.size(0) * q.size(1), scratch = f.rows * block_cols(f);
  Tensor out = empty({q.size(0), q.size(1), f.tq, f.dv}, q.dtype());
  Tensor lse = empty({heads, f.tq}, q.dtype());
  const auto pad_of = [&, pm = mask.defined() ? mask.data<bool>() : nullptr](std::size_t h) {
    return pm ? pm + (h / f.heads_per_batch) * f.tk : nullptr;
  };
  dispatch_floating(q.dtype(), "softmax_attention", [&](auto tag) {
    using T = typename decltype(tag)::type;
    parallel_for(heads, 1, [&](std::size_t h0, std::size_t h1) {
      rowops::AlignedVector<T> s(scratch);
      for (std::size_t h = h0; h < h1; ++h)
        forward_head(q.data<T>() + h * f.tq * f.d, k.data<T>() + h * f.tk * f.d, v.data<T>() + h * f.tk * f.dv, pad_of(h), f, h,
                     out.data<T>() + h * f.tq * f.dv, lse.data<T>() + h * f.tq, s);
    });
  });
  if (needs_grad({&q, &k, &v})) {
    // Keeps q, k, v (the callers keep them anyway) and one number per query row.
    record(out, "softmax_attention", {q, k, v},
           [q = q.detach(), k = k.detach(), v = v.detach(), lse, mask, f, heads, scratch, slopes](const Tensor& g) {
             Tensor dq = empty(q.shape(), q.dtype()), dk = empty(k.shape(), k.dtype()), dv = empty(v.shape(), v.dtype());
             const bool* pm = mask.defined() ? mask.data<bool>() : nullptr;
             dispatch_floating(q.dtype(), "softmax_attention backward", [&](auto tag) {
               using T = typename decltype(tag)::type;
               parallel_for(heads, 1, [&](std::size_t h0, std::size_t h1) {
                 rowops::AlignedVector<T> s(scratch), dp(scratch);
                 for (std::size_t h = h0; h < h1; ++h)
                   backward_head(q.data<T>() + h * f.tq * f.d, k.data<T>() + h * f.tk * f.d, v.data<T>() + h * f.tk * f.dv,
                                 pm ? pm + (h / f.heads_per_batch) * f.tk : nullptr, lse.data<T>() + h * f.tq,
                                 g.data<T>() + h * f.tq * f.dv, f, h, dq.data<T>() + h * f.tq * f.d, dk.data<T>() + h * f.tk * f.d,
                                 dv.data<T>() + h * f.tk * f.dv, s, dp);
               });
             });
             return std::vector<Tensor>{dq, dk, dv};
           });
  }
  return out;
}

}  // namespace detail
}  // namespace attnlab
