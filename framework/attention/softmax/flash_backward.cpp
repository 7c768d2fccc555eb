// One head of softmax attention in register tiles (FlashAttention-2 on a CPU core), its backward.
//
// Per chunk of keys (its K^T, V^T packed, its dK, dV accumulated in place), per block of
// query rows that see it: the logits and dP = dO V^T tile by tile, then P = exp(scale s + bias - L) and
// dS' = P (dP - D) with D_i = dO_i . O_i in a streaming pass per row, then dQ += dS' K for the block's rows, dV += P^T dO and
// dK += dS'^T (scale Q) (A read down its columns, as broadcasts); dQ is scaled at the end.
//
// Legend: Tq/Tk tokens, D head dim, Dv value dim, Dp/Dvp the dims rounded up to whole vectors, W lanes,
// Br query rows per block, Bc keys per chunk, R rows of this block, C keys of this chunk.
#include "framework/attention/softmax/flash_attention.hpp"

#include <algorithm>
#include <stdexcept>

#include "framework/attention/softmax/flash_head.hpp"

namespace attnlab::detail {
namespace {

// One chunk of keys [c0, c0 + c) with its packed operands and its dK, dV accumulators [c, Dp] / [c, Dvp]
// (rows of each the given distance apart).
template <class T>
struct BackwardChunk {
  const T* keys_t;    // [D, Bc]
  const T* values_t;  // [Dv, Bc]
  const T* keys;      // the chunk's K rows [c, Dp]
  std::size_t keys_ld;
  std::size_t c0, c;
  T* dk;
  T* dv;
  std::size_t dk_ld, dv_ld;
};

// Operands of the whole head the backward reads by rows (g, g_rows and dq with their row distances).
template <class T>
struct BackwardRows {
  const T* g;       // dO [Tq, Dv]
  std::size_t g_ld;
  const T* g_rows;  // dO [Tq, Dvp]
  std::size_t g_rows_ld;
  const T* q_rows;  // scale Q [Tq, Dp]
  const T* lse;     // [Tq]
  const T* delta;   // D_i = dO_i . O_i, [Tq]; null when one chunk holds every key (D is then sum_j P_ij dP_ij)
  T* dq;            // [Tq, Dp]
  std::size_t dq_ld;
  // One chunk holds every key: each row's dQ is one tile's product, stored with its scale (scale dS' K)
  // rather than added to zeros and scaled at the end; a tile whose rows see no key stores zeros.
  bool dq_once;
  T scale;
};

// Rows [i, i + MR) of a tile, their logits in p and dP in ds (vectors [v_lo, v_hi) of rows bc apart):
// P = exp(logit - L) into p, then dS = P (dP - D) into ds. With D from the output (several chunks), row
// by row. When one chunk holds every key, D = sum_j P_ij dP_ij is summed in P's pass, and every row's P
// comes first, then the rows' D, then their dS: a short head's rows (one or two vectors each) overlap
// their exp passes and folds instead of each row's dS waiting on its own fold (the toy's heads, T = 16,
// 3% off the op's forward and backward; the GPT's, T = 64, about 1%; the same bits).
template <class T, int MR>
void weights_and_dscores(const BackwardRows<T>& a, std::size_t i, std::size_t bc, std::size_t v_lo, std::size_t v_hi, T* p, T* ds) {
  constexpr std::size_t W = kLanes<T>;
  const auto scale_ds = [&](int r, T d_row) {
    const T* pr = p + r * bc;
    T* dr = ds + r * bc;
    const Vec<T> d = flash::splat(d_row);
    for (std::size_t v = v_lo; v < v_hi; ++v) flash::store(dr + v * W, flash::load(pr + v * W) * (flash::load(dr + v * W) - d));
  };
  if (a.delta) {
    for (int r = 0; r < MR; ++r) {
      T* pr = p + r * bc;
      const Vec<T> lse = flash::splat(a.lse[i + r]);
      for (std::size_t v = v_lo; v < v_hi; ++v) flash::store(pr + v * W, flash::exp<T>(flash::load(pr + v * W) - lse));
      scale_ds(r, a.delta[i + r]);
    }
  } else {
    Vec<T> total[MR];
    for (int r = 0; r < MR; ++r) {
      T* pr = p + r * bc;
      const T* dr = ds + r * bc;
      const Vec<T> lse = flash::splat(a.lse[i + r]);
      total[r] = Vec<T>{};
      for (std::size_t v = v_lo; v < v_hi; ++v) {
        const Vec<T> weight = flash::exp<T>(flash::load(pr + v * W) - lse);
        flash::store(pr + v * W, weight);
        total[r] += weight * flash::load(dr + v * W);
      }
    }
    T d_rows[MR];
    for (int r = 0; r < MR; ++r) d_rows[r] = flash::horizontal_sum<T>(total[r]);
    for (int r = 0; r < MR; ++r) scale_ds(r, d_rows[r]);
  }
}

// Rows [i, i + MR) against the chunk: P = exp(scale s + bias - L) and dS' = P (dP - D) (dS without its
// scale) into p, ds (rows of [., Bc], zero outside the keys the rows see), then dQ += dS' K for these
// rows. The logits and dP = dO V^T come from register tiles (stored straight from the registers where
// no mask or bias touches the tile); the exp and dS' follow in streaming passes (weights_and_dscores).
template <class T, int MR>
__attribute__((noinline)) void backward_row_tile(const Head<T>& h, const BackwardChunk<T>& ch, const BackwardRows<T>& a, std::size_t i,
                                                 T* p, T* ds) {
  constexpr std::size_t W = kLanes<T>;
  const HeadShape& s = h.shape;
  const std::size_t bc = h.t.bc, dp = h.t.dp;
  const std::size_t vectors = (ch.c + W - 1) / W;
  const RowSpan rows(s, i, MR);
  const std::pair<std::size_t, std::size_t> seen = h.seen_keys(rows, ch.c0, ch.c);
  const std::size_t lo = seen.first, hi = seen.second;
  if (lo >= hi) {
    for (int r = 0; r < MR; ++r) {
      std::fill(p + r * bc, p + r * bc + vectors * W, T(0));
      std::fill(ds + r * bc, ds + r * bc + vectors * W, T(0));
      if (a.dq_once) std::fill(a.dq + (i + r) * a.dq_ld, a.dq + (i + r) * a.dq_ld + dp, T(0));
    }
    return;
  }
  const std::size_t v_lo = lo / W, v_hi = (hi + W - 1) / W;
  for (int r = 0; r < MR; ++r) {  // keys none of the rows sees: weights 0
    std::fill(p + r * bc, p + r * bc + v_lo * W, T(0));
    std::fill(p + r * bc + v_hi * W, p + r * bc + vectors * W, T(0));
    std::fill(ds + r * bc, ds + r * bc + v_lo * W, T(0));
    std::fill(ds + r * bc + v_hi * W, ds + r * bc + vectors * W, T(0));
  }
  Vec<T> top[MR];  // unused: the backward knows each row's L
  store_logits<T, MR>(h, ch.keys_t, ch.c0, rows, i, v_lo, v_hi, p, top);
  flash::for_each_col_tile(v_lo, v_hi, [&](auto nv, std::size_t v0) {
    constexpr int NV = decltype(nv)::value;
    if (h.kind(rows, ch.c0 + v0 * W, NV * W) == TileKind::hidden) {
      for (int r = 0; r < MR; ++r)
        for (int v = 0; v < NV; ++v) flash::store(ds + r * bc + (v0 + v) * W, Vec<T>{});
      return;
    }
    const Acc<T, MR, NV> dweights = flash::multiply<T, MR, NV>(a.g + i * a.g_ld, a.g_ld, 1, ch.values_t + v0 * W, bc, 0, s.dv);
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) flash::store(ds + r * bc + (v0 + v) * W, dweights.v[r][v]);
  });
  weights_and_dscores<T, MR>(a, i, bc, v_lo, v_hi, p, ds);
  flash::for_each_col_tile(0, dp / W, [&](auto nv, std::size_t v0) {
    constexpr int NV = decltype(nv)::value;
    const Acc<T, MR, NV> acc = flash::multiply<T, MR, NV>(ds, bc, 1, ch.keys + v0 * W, ch.keys_ld, lo, hi);
    for (int r = 0; r < MR; ++r)
      for (int v = 0; v < NV; ++v) {
        T* o = a.dq + (i + r) * a.dq_ld + (v0 + v) * W;
        flash::store(o, a.dq_once ? acc.v[r][v] * a.scale : flash::load(o) + acc.v[r][v]);
      }
  });
}

// dacc [c, cols] (rows ldd apart) += A^T B for the chunk's keys: A = p [rows, Bc] of block rows
// [i0, i0 + rows), B = b's rows [Tq, cols] (ldb apart) from i0; each tile of keys sums over the block's
// rows that see one of its keys. `once`: this block holds every row that sees the chunk, so dacc = A^T B
// is stored (zeros where no row sees a tile's keys) and dacc need not be zeroed first.
template <class T>
void add_transposed_product(const Head<T>& h, const BackwardChunk<T>& ch, std::size_t i0, std::size_t rows, const T* p, const T* b,
                            std::size_t ldb, std::size_t cols, T* dacc, std::size_t ldd, bool once) {
  constexpr std::size_t W = kLanes<T>;
  const HeadShape& s = h.shape;
  flash::for_each_tile(ch.c, cols / W, [&](auto mr, auto nv, std::size_t k0, std::size_t v0) {
    constexpr int MR = decltype(mr)::value, NV = decltype(nv)::value;
    const std::size_t lo = std::max(s.first_row(ch.c0 + k0), i0), hi = std::min(s.end_row(ch.c0 + k0 + MR - 1), i0 + rows);
    if (lo >= hi) {
      if (once)
        for (int r = 0; r < MR; ++r)
          for (int v = 0; v < NV; ++v) flash::store(dacc + (k0 + r) * ldd + (v0 + v) * W, Vec<T>{});
      return;
    }
    const Acc<T, MR, NV> acc = flash::multiply<T, MR, NV>(p + k0, 1, h.t.bc, b + i0 * ldb + v0 * W, ldb, lo - i0, hi - i0);
    for (int r = 0; r < MR; ++r)
      for (int v = 0; v < NV; ++v) {
        T* o = dacc + (k0 + r) * ldd + (v0 + v) * W;
        flash::store(o, once ? acc.v[r][v] : flash::load(o) + acc.v[r][v]);
      }
  });
}

// n rows of `cols` zeros, ld apart.
template <class T>
void zero_rows(T* rows, std::size_t n, std::size_t cols, std::size_t ld) {
  if (ld == cols) {
    std::fill(rows, rows + n * cols, T(0));
    return;
  }
  for (std::size_t i = 0; i < n; ++i) std::fill(rows + i * ld, rows + i * ld + cols, T(0));
}

// rows [n, padded] into [n, cols] (rows ld apart), dropping the padding columns.
template <class T>
void unpad_rows(const T* rows, std::size_t n, std::size_t padded, std::size_t cols, T* out, std::size_t ld) {
  for (std::size_t i = 0; i < n; ++i) copy_row(rows + i * padded, cols, out + i * ld);
}

}  // namespace

template <class T>
void flash_backward(const HeadShape& shape, const HeadOperands<T>& x, const T* out, const T* lse, const T* g, T* dq, T* dk, T* dv,
                    FlashScratch<T>& scratch) {
  auto& w = scratch.buffers();
  count_padding(x, shape.tk, w.padded_before);
  const Tiling<T> t = tiling<T>(shape);
  const T scale = static_cast<T>(shape.scale);
  const std::size_t q_ld = x.q_ld, k_ld = x.k_ld, v_ld = x.v_ld, o_ld = x.o_ld;
  const Head<T> h{shape, x, t, w.padded_before, {x.slope, shape.shift()}, scaled_rows(x.q, shape.tq, shape.d, q_ld, t.dp, scale, w.q_rows)};
  T* delta = nullptr;  // D_i = dO_i . O_i, from the output when it was kept
  if (!out && t.chunks > 1) throw std::logic_error("flash_backward: keys in several chunks need the forward's output");
  if (out) {
    delta = w.delta.take(shape.tq);
    for (std::size_t i = 0; i < shape.tq; ++i) {
      T sum = 0;
      for (std::size_t c = 0; c < shape.dv; ++c) sum += g[i * o_ld + c] * out[i * o_ld + c];
      delta[i] = sum;
    }
  }
  // dO, K, dQ, dK, dV are read and accumulated in place, rows their own distance apart, when their rows
  // need no padding to whole vectors; else through dense padded copies.
  const bool whole_d = t.dp == shape.d, whole_dv = t.dvp == shape.dv;
  const BackwardRows<T> a{g,
                          o_ld,
                          whole_dv ? g : padded_rows(g, shape.tq, shape.dv, o_ld, t.dvp, w.g_rows),
                          whole_dv ? o_ld : t.dvp,
                          h.queries,
                          lse,
                          delta,
                          whole_d ? dq : w.dq_acc.take(shape.tq * t.dp),
                          whole_d ? q_ld : t.dp,
                          t.chunks == 1,
                          scale};
  if (a.dq_once) {  // the rows outside [first_row(0), end_row(Tk - 1)), which no tile of the one chunk reaches
    const std::size_t first = shape.first_row(0), end = shape.end_row(shape.tk - 1);
    zero_rows(a.dq, first, t.dp, a.dq_ld);
    zero_rows(a.dq + end * a.dq_ld, shape.tq - end, t.dp, a.dq_ld);
  } else {
    zero_rows(a.dq, shape.tq, t.dp, a.dq_ld);
  }
  const T* keys = whole_d ? x.k : padded_rows(x.k, shape.tk, shape.d, k_ld, t.dp, w.k_rows);
  const std::size_t keys_ld = whole_d ? k_ld : t.dp;
  T* keys_t = w.keys_t.take(shape.d * t.bc);
  T* values_t = w.values_t.take(shape.dv * t.bc);
  T* p = w.scores.take(t.br * t.bc);
  T* ds = w.dscores.take(t.br * t.bc);
  for (std::size_t c0 = 0; c0 < shape.tk; c0 += t.bc) {
    const std::size_t c = std::min(t.bc, shape.tk - c0);
    pack_transposed(x.k, shape.d, k_ld, c0, c, t.bc, keys_t);
    pack_transposed(x.v, shape.dv, v_ld, c0, c, t.bc, values_t);
    T* dk_rows = whole_d ? dk + c0 * k_ld : w.dk_acc.take(c * t.dp);
    T* dv_rows = whole_dv ? dv + c0 * v_ld : w.dv_acc.take(c * t.dvp);
    const std::size_t dk_ld = whole_d ? k_ld : t.dp, dv_ld = whole_dv ? v_ld : t.dvp;
    const BackwardChunk<T> ch{keys_t, values_t, keys + c0 * keys_ld, keys_ld, c0, c, dk_rows, dv_rows, dk_ld, dv_ld};
    const std::size_t row_lo = shape.first_row(c0), row_hi = shape.end_row(c0 + c - 1);
    const bool once = row_lo < row_hi && row_hi - row_lo <= t.br;  // one block of rows: dK, dV stored, not added
    if (!once) {
      zero_rows(dk_rows, c, t.dp, dk_ld);
      zero_rows(dv_rows, c, t.dvp, dv_ld);
    }
    for (std::size_t i0 = row_lo; i0 < row_hi; i0 += t.br) {
      const std::size_t rows = std::min(t.br, row_hi - i0);
      flash::for_each_row_tile(rows, [&](auto mr, std::size_t r0) {
        backward_row_tile<T, decltype(mr)::value>(h, ch, a, i0 + r0, p + r0 * t.bc, ds + r0 * t.bc);
      });
      add_transposed_product(h, ch, i0, rows, p, a.g_rows, a.g_rows_ld, t.dvp, ch.dv, dv_ld, once);  // dV += P^T dO
      add_transposed_product(h, ch, i0, rows, ds, a.q_rows, t.dp, t.dp, ch.dk, dk_ld, once);       // dK += dS^T Q
    }
    if (!whole_d) unpad_rows(dk_rows, c, t.dp, shape.d, dk + c0 * k_ld, k_ld);
    if (!whole_dv) unpad_rows(dv_rows, c, t.dvp, shape.dv, dv + c0 * v_ld, v_ld);
  }
  if (!whole_d) unpad_rows(a.dq, shape.tq, t.dp, shape.d, dq, q_ld);
  if (!a.dq_once)  // dS was left unscaled: dQ = scale dS K
    for (std::size_t i = 0; i < shape.tq; ++i)
      for (std::size_t c = 0; c < shape.d; ++c) dq[i * q_ld + c] *= scale;
}

template void flash_backward(const HeadShape&, const HeadOperands<float>&, const float*, const float*, const float*, float*, float*,
                             float*, FlashScratch<float>&);
template void flash_backward(const HeadShape&, const HeadOperands<double>&, const double*, const double*, const double*, double*,
                             double*, double*, FlashScratch<double>&);

}  // namespace attnlab::detail
