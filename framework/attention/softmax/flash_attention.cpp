// One head of softmax attention in register tiles (FlashAttention-2 on a CPU core).
//
// Forward, per block of Br query rows and chunk of Bc keys (K^T packed once per head in chunks
// [D, Bc], so a tile's B rows are contiguous; Q scaled once): for each tile of up to 6 rows, the scores
// against the chunk's keys those rows may see (tiles of 6 rows by 2 vectors: Q values broadcast, K^T rows loaded; ALiBi
// bias and masks applied in registers) with each row's max over them, then per row an online-softmax
// update of its running max and sum (the accumulated output rescaled when the max grows) and the exp in
// one streaming pass over the row's logits, and O += P V over the keys the rows see. The block's
// output and per-row log-sum-exp L are written once at the end.
//
// Backward, per chunk of keys (its K^T, V^T packed, its dK, dV accumulated in place), per block of
// query rows that see it: the logits and dP = dO V^T tile by tile, then P = exp(scale s + bias - L) and
// dS' = P (dP - D) with D_i = dO_i . O_i in a streaming pass per row, then dQ += dS' K for the block's rows, dV += P^T dO and
// dK += dS'^T (scale Q) (A read down its columns, as broadcasts); dQ is scaled at the end. Tiles that
// no row of them may see are skipped (causal: about half of them; a window: all but its band), and each
// product's inner range is cut to the keys (or rows) the tile's rows (or keys) see.
//
// Legend: Tq/Tk tokens, D head dim, Dv value dim, Dp/Dvp the dims rounded up to whole vectors, W lanes,
// Br query rows per block, Bc keys per chunk, R rows of this block, C keys of this chunk.
#include "framework/attention/softmax/flash_attention.hpp"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <stdexcept>
#include <vector>

#include "framework/attention/softmax/flash_tiles.hpp"

namespace attnlab::detail {
namespace {

using flash::Acc;
using flash::kLanes;
using flash::Vec;

std::size_t round_up(std::size_t x, std::size_t m) { return (x + m - 1) / m * m; }

// A 64-byte aligned array that only grows (scratch reused across heads).
template <class T>
class Buffer {
 public:
  T* take(std::size_t n) {
    if (n > size_) {
      std::free(data_);
      size_ = round_up(std::max<std::size_t>(n, 16), 16);
      data_ = static_cast<T*>(std::aligned_alloc(64, round_up(size_ * sizeof(T), 64)));
      if (!data_) throw std::bad_alloc();
    }
    return data_;
  }
  Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { std::free(data_); }

 private:
  T* data_ = nullptr;
  std::size_t size_ = 0;
};

// Sizes of one head's tiling. Bc: keys per chunk, at least 128 and up to 256 while the chunk's K^T and
// V fill no more than 32 KB (an L1's worth of floats; double takes the same key counts): 256 keys at
// D = 16, 128 from D = 32 on. Br: 96 query rows per block. Measured (min of 3, one thread, 4 heads): at
// n = 4096, D = 32, chunks of 64 to 256 keys and blocks of 48 to 192 rows within the machine's noise
// (about 5%) of each other, the forward a little faster from 128 keys on; at n = 2048, D = 16, 256 keys
// 69 ms against 79 for 64; at D = 128, 128 keys 485 ms (n = 2048) and 2012 ms (n = 4096) against 511
// and 2249 for the 32 an L1 budget alone would give. Sequences up to Bc keys are one chunk.
template <class T>
struct Tiling {
  std::size_t dp, dvp;  // D, Dv rounded up to whole vectors
  std::size_t bc;       // keys per chunk (a multiple of 16)
  std::size_t br;       // query rows per block
  std::size_t chunks;   // ceil(Tk / Bc)
};

template <class T>
Tiling<T> tiling(const HeadShape& s) {
  constexpr std::size_t W = kLanes<T>;
  Tiling<T> t;
  t.dp = round_up(s.d, W), t.dvp = round_up(s.dv, W);
  const std::size_t budget = (std::size_t{32} << 10) / sizeof(float);
  t.bc = std::clamp<std::size_t>(budget / (t.dp + t.dvp) / 16 * 16, 128, 256);
  t.br = 96;
  t.chunks = (s.tk + t.bc - 1) / t.bc;
  return t;
}

}  // namespace

template <class T>
struct FlashScratch<T>::Buffers {
  Buffer<T> keys_t, values_t;                    // K^T, V^T in chunks [D, Bc]
  Buffer<T> q_rows;                              // scale Q [Tq, Dp]
  Buffer<T> k_rows, v_rows, g_rows;              // copies [T, Dp] padded to whole vectors, when D needs it
  Buffer<T> scores, dscores;                     // P and dS of a block [Br, Bc]
  Buffer<T> out_acc, row_max, row_sum;           // forward: a block's output [Br, Dvp], running max and sum
  Buffer<T> dq_acc, dk_acc, dv_acc, delta;       // backward: dQ [Tq, Dp], a chunk's dK, dV [Bc, Dp], D [Tq]
  std::vector<std::uint32_t> padded_before;      // padded keys before key j, [Tk + 1]
};

template <class T>
FlashScratch<T>::FlashScratch() : buffers_(std::make_unique<Buffers>()) {}
template <class T>
FlashScratch<T>::~FlashScratch() = default;

namespace {

// rows [T, cols] as [T, padded] with zero columns after cols (or the rows themselves when no padding).
template <class T>
const T* padded_rows(const T* rows, std::size_t n, std::size_t cols, std::size_t padded, Buffer<T>& buffer) {
  if (cols == padded) return rows;
  T* out = buffer.take(n * padded);
  for (std::size_t i = 0; i < n; ++i) {
    std::copy(rows + i * cols, rows + (i + 1) * cols, out + i * padded);
    std::fill(out + i * padded + cols, out + (i + 1) * padded, T(0));
  }
  return out;
}

// factor * rows [T, cols] as [T, padded], zero columns after cols.
template <class T>
const T* scaled_rows(const T* rows, std::size_t n, std::size_t cols, std::size_t padded, T factor, Buffer<T>& buffer) {
  T* out = buffer.take(n * padded);
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t c = 0; c < cols; ++c) out[i * padded + c] = factor * rows[i * cols + c];
    std::fill(out + i * padded + cols, out + (i + 1) * padded, T(0));
  }
  return out;
}

// Keys [c0, c0 + C) of rows [Tk, D] transposed into out [D, ld]; the columns from C to
// the next whole vector are zero (tiles read whole vectors).
template <class T>
void pack_transposed(const T* rows, std::size_t d, std::size_t c0, std::size_t c, std::size_t ld, T* out) {
  // Each key's row is read once, front to back, and scattered down its column: plain loads and stores
  // (building each vector lane by lane cost a shuffle per element: 3% of a toy model's step).
  constexpr std::size_t W = kLanes<T>;
  const std::size_t padded = (c + W - 1) / W * W;
  for (std::size_t a = 0; a < c; ++a) {
    const T* r = rows + (c0 + a) * d;
    for (std::size_t kk = 0; kk < d; ++kk) out[kk * ld + a] = r[kk];
  }
  if (padded > c)
    for (std::size_t kk = 0; kk < d; ++kk) std::fill(out + kk * ld + c, out + kk * ld + padded, T(0));
}

// What a tile of rows [i, i + MR) and keys [j, j + width) holds: keys none of its rows may see (skip it),
// keys all of its rows see, unpadded (no mask), or a mix (mask lane by lane).
enum class TileKind { hidden, visible, mixed };

// The rows of one row tile: first_key and last_key of its first and last row.
struct RowSpan {
  std::size_t first_lo, first_hi, last_lo, last_hi;
  RowSpan(const HeadShape& s, std::size_t i, std::size_t rows)
      : first_lo(s.first_key(i)), first_hi(s.first_key(i + rows - 1)), last_lo(s.last_key(i)), last_hi(s.last_key(i + rows - 1)) {}
  // Keys any of the rows sees: [first_lo, last_hi).
  bool sees_any(std::size_t j, std::size_t width) const { return j < last_hi && j + width > first_lo && first_lo < last_hi; }
  bool all_see(std::size_t j, std::size_t width) const { return j >= first_hi && j + width <= last_lo; }
};

// ALiBi's bias -m |p_i - j| added to the (scaled) scores. Tile loops copy it into a local, so that
// their stores (through T*, which may alias a T member of a struct behind a reference) do not force its
// fields to be reloaded for every vector.
template <class T>
struct Bias {
  T slope;
  std::int64_t shift;  // p_i - i
  bool any() const { return slope != T(0); }
  // Row i against the W keys from j.
  Vec<T> operator()(Vec<T> s, std::size_t i, std::size_t j, bool any) const {
    if (!any) return s;
    const Vec<T> distance = static_cast<T>(static_cast<std::int64_t>(i) + shift) - (flash::iota<T>() + static_cast<T>(j));
    return s - slope * flash::max(distance, -distance);
  }
};

// One head with its tiling: its queries, the masks and the bias of its scores.
template <class T>
struct Head {
  const HeadShape& shape;
  const HeadOperands<T>& x;
  Tiling<T> t;
  const std::vector<std::uint32_t>& padded_before;  // empty without padding
  Bias<T> bias;
  // scale q [Tq, Dp]: the scale is applied once per query element rather than once per score, and
  // dS^T (scale Q) is dK with its scale (dQ takes it at the end).
  const T* queries;

  bool padded_in(std::size_t j, std::size_t width) const {
    if (!x.padding) return false;
    const std::size_t a = std::min(j, shape.tk), b = std::min(j + width, shape.tk);
    return padded_before[b] != padded_before[a];
  }
  TileKind kind(const RowSpan& rows, std::size_t j, std::size_t width) const {
    if (!rows.sees_any(j, width)) return TileKind::hidden;
    return rows.all_see(j, width) && !padded_in(j, width) ? TileKind::visible : TileKind::mixed;
  }
  // Lanes of the W keys from j that row i sees: all bits set, or zero.
  typename flash::Simd<T>::I visible_lanes(std::size_t i, std::size_t j) const {
    const Vec<T> key = flash::iota<T>() + static_cast<T>(j);
    typename flash::Simd<T>::I lanes = (key >= static_cast<T>(shape.first_key(i))) & (key < static_cast<T>(shape.last_key(i)));
    if (padded_in(j, kLanes<T>))
      for (std::size_t l = 0; l < kLanes<T>; ++l)
        if (j + l < shape.tk && x.padding[j + l]) lanes[l] = 0;
    return lanes;
  }
  // Keys [lo, hi) of the chunk [c0, c0 + c) that rows [i, i + rows) see, as offsets in the chunk (lo >= hi: none).
  std::pair<std::size_t, std::size_t> seen_keys(const RowSpan& rows, std::size_t c0, std::size_t c) const {
    const std::size_t lo = std::max(rows.first_lo, c0), hi = std::min(rows.last_hi, c0 + c);
    return {lo - c0, hi > lo ? hi - c0 : lo - c0};
  }
};

// ---------------------------------------------------------------------------------------------------------
// Forward

// One chunk of keys [c0, c0 + c) against one block of query rows from i0.
template <class T>
struct ForwardChunk {
  const T* keys_t;  // the chunk's K^T [D, Bc]
  const T* values;  // its V rows [c, Dvp]
  std::size_t c0, c;
};

// The logits (scale s + bias, -inf where masked) of rows [i, i + MR) against the chunk's vectors
// [v_lo, v_hi) into rows of out [., Bc], tile by tile, and each row's max over them into top. Tiles
// that all rows see whole and no bias touches (all but the edges of a mask) are stored straight from
// the registers; the others take the bias and the mask lane by lane; tiles none of the rows sees get -inf.
template <class T, int MR>
void store_logits(const Head<T>& h, const T* keys_t, std::size_t c0, const RowSpan& rows, std::size_t i, std::size_t v_lo,
                  std::size_t v_hi, T* out, Vec<T>* top) {
  constexpr std::size_t W = kLanes<T>;
  constexpr T neg_inf = -std::numeric_limits<T>::infinity();
  const std::size_t bc = h.t.bc;
  const Bias<T> bias = h.bias;
  const bool alibi = bias.any();
  flash::for_each_col_tile(v_lo, v_hi, [&](auto nv, std::size_t v0) {
    constexpr int NV = decltype(nv)::value;
    const std::size_t j = c0 + v0 * W;
    const TileKind kind = h.kind(rows, j, NV * W);
    if (kind == TileKind::hidden) {
      for (int r = 0; r < MR; ++r)
        for (int v = 0; v < NV; ++v) flash::store(out + r * bc + (v0 + v) * W, flash::splat(neg_inf));
      return;
    }
    const Acc<T, MR, NV> acc = flash::multiply<T, MR, NV>(h.queries + i * h.t.dp, h.t.dp, 1, keys_t + v0 * W, bc, 0, h.shape.d);
    if (kind == TileKind::visible && !alibi) {
#pragma GCC unroll 8
      for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) {
          flash::store(out + r * bc + (v0 + v) * W, acc.v[r][v]);
          top[r] = flash::max(acc.v[r][v], top[r]);
        }
      return;
    }
    for (int r = 0; r < MR; ++r)
      for (int v = 0; v < NV; ++v) {
        Vec<T> x = bias(acc.v[r][v], i + r, j + v * W, alibi);
        if (kind == TileKind::mixed) x = h.visible_lanes(i + r, j + v * W) ? x : flash::splat(neg_inf);
        flash::store(out + r * bc + (v0 + v) * W, x);
        top[r] = flash::max(x, top[r]);
      }
  });
}

// Rows [i, i + MR) of the block (its row r0 on) against the chunk, in three passes while the chunk's
// [MR, C] logits stay in L1: the logits and each row's max over the chunk (register tiles); per row, the
// running max m raised to that max (the row's output and sum l rescaled by exp(m_old - m_new)), the
// weights exp(x - m) in place and their sum added to l (a streaming pass, whose vectors are
// independent so the core overlaps their exps); then out += P V over the keys the rows see.
template <class T, int MR>
__attribute__((noinline)) void forward_row_tile(const Head<T>& h, const ForwardChunk<T>& ch, std::size_t i, T* scores, T* out, T* row_max, T* row_sum) {
  constexpr std::size_t W = kLanes<T>;
  constexpr T neg_inf = -std::numeric_limits<T>::infinity();
  const std::size_t bc = h.t.bc, dvp = h.t.dvp;
  const RowSpan rows(h.shape, i, MR);
  const std::pair<std::size_t, std::size_t> seen = h.seen_keys(rows, ch.c0, ch.c);
  const std::size_t lo = seen.first, hi = seen.second;
  if (lo >= hi) return;
  const std::size_t v_lo = lo / W, v_hi = (hi + W - 1) / W;
  Vec<T> top[MR];
  for (int r = 0; r < MR; ++r) top[r] = flash::splat(neg_inf);
  store_logits<T, MR>(h, ch.keys_t, ch.c0, rows, i, v_lo, v_hi, scores, top);
  for (int r = 0; r < MR; ++r) {
    T* sr = scores + r * bc;
    const T m_chunk = flash::horizontal_max<T>(top[r]);
    if (m_chunk == neg_inf) {  // the row sees none of these keys (or only padded ones): weights 0
      std::fill(sr + v_lo * W, sr + v_hi * W, T(0));
      continue;
    }
    if (m_chunk > row_max[r]) {
      const T alpha = std::exp(row_max[r] - m_chunk);  // 0 when the row saw no key before
      row_sum[r] *= alpha;
      for (std::size_t c = 0; c < dvp; ++c) out[r * dvp + c] *= alpha;
      row_max[r] = m_chunk;
    }
    const Vec<T> m = flash::splat(row_max[r]);
    Vec<T> total{};
    for (std::size_t v = v_lo; v < v_hi; ++v) {
      const Vec<T> p = flash::exp<T>(flash::load(sr + v * W) - m);
      flash::store(sr + v * W, p);
      total += p;
    }
    row_sum[r] += flash::horizontal_sum<T>(total);
  }
  flash::for_each_col_tile(0, dvp / W, [&](auto nv, std::size_t v0) {
    constexpr int NV = decltype(nv)::value;
    const Acc<T, MR, NV> acc = flash::multiply<T, MR, NV>(scores, bc, 1, ch.values + v0 * W, dvp, lo, hi);
    for (int r = 0; r < MR; ++r)
      for (int v = 0; v < NV; ++v) {
        T* o = out + r * dvp + (v0 + v) * W;
        flash::store(o, flash::load(o) + acc.v[r][v]);
      }
  });
}

// A block's output rows: the accumulated sum over l, and L = m + log l (zeros and +inf for l = 0).
template <class T>
void finish_block(const T* out_acc, const T* row_max, const T* row_sum, std::size_t rows, std::size_t dv, std::size_t dvp, T* out,
                  T* lse) {
  for (std::size_t r = 0; r < rows; ++r) {
    if (row_sum[r] > T(0)) {
      const T inv = T(1) / row_sum[r];
      for (std::size_t c = 0; c < dv; ++c) out[r * dv + c] = out_acc[r * dvp + c] * inv;
      lse[r] = row_max[r] + std::log(row_sum[r]);
    } else {
      std::fill(out + r * dv, out + (r + 1) * dv, T(0));
      lse[r] = std::numeric_limits<T>::infinity();
    }
  }
}

template <class T>
void count_padding(const HeadOperands<T>& x, std::size_t tk, std::vector<std::uint32_t>& padded_before) {
  padded_before.clear();
  if (!x.padding) return;
  padded_before.resize(tk + 1);
  padded_before[0] = 0;
  for (std::size_t j = 0; j < tk; ++j) padded_before[j + 1] = padded_before[j] + (x.padding[j] ? 1 : 0);
}

}  // namespace

// float's chunks are never longer than double's (its wider vectors pad D as much or more), so one float
// chunk is one double chunk too.
bool flash_backward_needs_output(const HeadShape& shape) { return shape.tk > tiling<float>(shape).bc; }

template <class T>
void flash_forward(const HeadShape& shape, const HeadOperands<T>& x, T* out, T* lse, FlashScratch<T>& scratch) {
  auto& w = scratch.buffers();
  count_padding(x, shape.tk, w.padded_before);
  const Tiling<T> t = tiling<T>(shape);
  const Head<T> h{shape, x, t, w.padded_before, {x.slope, shape.shift()},
                  scaled_rows(x.q, shape.tq, shape.d, t.dp, static_cast<T>(shape.scale), w.q_rows)};
  T* keys_t = w.keys_t.take(t.chunks * shape.d * t.bc);
  for (std::size_t c = 0; c < t.chunks; ++c)
    pack_transposed(x.k, shape.d, c * t.bc, std::min(t.bc, shape.tk - c * t.bc), t.bc, keys_t + c * shape.d * t.bc);
  const T* values = padded_rows(x.v, shape.tk, shape.dv, t.dvp, w.v_rows);
  T* scores = w.scores.take(6 * t.bc);
  T* out_acc = w.out_acc.take(t.br * t.dvp);
  T* row_max = w.row_max.take(t.br);
  T* row_sum = w.row_sum.take(t.br);
  for (std::size_t i0 = 0; i0 < shape.tq; i0 += t.br) {
    const std::size_t rows = std::min(t.br, shape.tq - i0);
    std::fill(out_acc, out_acc + rows * t.dvp, T(0));
    std::fill(row_max, row_max + rows, -std::numeric_limits<T>::infinity());
    std::fill(row_sum, row_sum + rows, T(0));
    const std::size_t key_lo = shape.first_key(i0), key_hi = shape.last_key(i0 + rows - 1);
    for (std::size_t c = key_lo / t.bc; key_lo < key_hi && c * t.bc < key_hi; ++c) {
      const ForwardChunk<T> ch{keys_t + c * shape.d * t.bc, values + c * t.bc * t.dvp, c * t.bc, std::min(t.bc, shape.tk - c * t.bc)};
      flash::for_each_row_tile(rows, [&](auto mr, std::size_t r0) {
        forward_row_tile<T, decltype(mr)::value>(h, ch, i0 + r0, scores, out_acc + r0 * t.dvp, row_max + r0, row_sum + r0);
      });
    }
    finish_block(out_acc, row_max, row_sum, rows, shape.dv, t.dvp, out + i0 * shape.dv, lse + i0);
  }
}

namespace {

// ---------------------------------------------------------------------------------------------------------
// Backward

// One chunk of keys [c0, c0 + c) with its packed operands and its dK, dV accumulators [c, Dp] / [c, Dvp].
template <class T>
struct BackwardChunk {
  const T* keys_t;    // [D, Bc]
  const T* values_t;  // [Dv, Bc]
  const T* keys;      // the chunk's K rows [c, Dp]
  std::size_t c0, c;
  T* dk;
  T* dv;
};

// Operands of the whole head the backward reads by rows.
template <class T>
struct BackwardRows {
  const T* g;       // dO [Tq, Dv]
  const T* g_rows;  // dO [Tq, Dvp]
  const T* q_rows;  // scale Q [Tq, Dp]
  const T* lse;     // [Tq]
  const T* delta;   // D_i = dO_i . O_i, [Tq]; null when one chunk holds every key (D is then sum_j P_ij dP_ij)
  T* dq;            // [Tq, Dp]
};

// Rows [i, i + MR) against the chunk: P = exp(scale s + bias - L) and dS' = P (dP - D) (dS without its
// scale) into p, ds (rows of [., Bc], zero outside the keys the rows see), then dQ += dS' K for these
// rows. The logits and dP = dO V^T come from register tiles (stored straight from the registers where
// no mask or bias touches the tile); the exp and dS' follow in a streaming pass per row.
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
    const Acc<T, MR, NV> dweights = flash::multiply<T, MR, NV>(a.g + i * s.dv, s.dv, 1, ch.values_t + v0 * W, bc, 0, s.dv);
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) flash::store(ds + r * bc + (v0 + v) * W, dweights.v[r][v]);
  });
  for (int r = 0; r < MR; ++r) {
    T* pr = p + r * bc;
    T* dr = ds + r * bc;
    const Vec<T> lse = flash::splat(a.lse[i + r]);
    for (std::size_t v = v_lo; v < v_hi; ++v) flash::store(pr + v * W, flash::exp<T>(flash::load(pr + v * W) - lse));
    T d_row;
    if (a.delta) {
      d_row = a.delta[i + r];
    } else {  // the chunk holds each row's every key: D = sum_j P_ij dP_ij over it
      Vec<T> total{};
      for (std::size_t v = v_lo; v < v_hi; ++v) total += flash::load(pr + v * W) * flash::load(dr + v * W);
      d_row = flash::horizontal_sum<T>(total);
    }
    const Vec<T> d = flash::splat(d_row);
    for (std::size_t v = v_lo; v < v_hi; ++v) flash::store(dr + v * W, flash::load(pr + v * W) * (flash::load(dr + v * W) - d));
  }
  flash::for_each_col_tile(0, dp / W, [&](auto nv, std::size_t v0) {
    constexpr int NV = decltype(nv)::value;
    const Acc<T, MR, NV> acc = flash::multiply<T, MR, NV>(ds, bc, 1, ch.keys + v0 * W, dp, lo, hi);
    for (int r = 0; r < MR; ++r)
      for (int v = 0; v < NV; ++v) {
        T* o = a.dq + (i + r) * dp + (v0 + v) * W;
        flash::store(o, flash::load(o) + acc.v[r][v]);
      }
  });
}

// dacc [c, cols] += A^T B for the chunk's keys: A = p [rows, Bc] of block rows [i0, i0 + rows), B = b's
// rows [Tq, cols] from i0; each tile of keys sums over the block's rows that see one of its keys.
template <class T>
void add_transposed_product(const Head<T>& h, const BackwardChunk<T>& ch, std::size_t i0, std::size_t rows, const T* p, const T* b,
                            std::size_t cols, T* dacc) {
  constexpr std::size_t W = kLanes<T>;
  const HeadShape& s = h.shape;
  flash::for_each_tile(ch.c, cols / W, [&](auto mr, auto nv, std::size_t k0, std::size_t v0) {
    constexpr int MR = decltype(mr)::value, NV = decltype(nv)::value;
    const std::size_t lo = std::max(s.first_row(ch.c0 + k0), i0), hi = std::min(s.end_row(ch.c0 + k0 + MR - 1), i0 + rows);
    if (lo >= hi) return;
    const Acc<T, MR, NV> acc = flash::multiply<T, MR, NV>(p + k0, 1, h.t.bc, b + i0 * cols + v0 * W, cols, lo - i0, hi - i0);
    for (int r = 0; r < MR; ++r)
      for (int v = 0; v < NV; ++v) {
        T* o = dacc + (k0 + r) * cols + (v0 + v) * W;
        flash::store(o, flash::load(o) + acc.v[r][v]);
      }
  });
}

// rows [n, padded] into [n, cols], dropping the padding columns.
template <class T>
void unpad_rows(const T* rows, std::size_t n, std::size_t padded, std::size_t cols, T* out) {
  for (std::size_t i = 0; i < n; ++i) std::copy(rows + i * padded, rows + i * padded + cols, out + i * cols);
}

}  // namespace

template <class T>
void flash_backward(const HeadShape& shape, const HeadOperands<T>& x, const T* out, const T* lse, const T* g, T* dq, T* dk, T* dv,
                    FlashScratch<T>& scratch) {
  auto& w = scratch.buffers();
  count_padding(x, shape.tk, w.padded_before);
  const Tiling<T> t = tiling<T>(shape);
  const T scale = static_cast<T>(shape.scale);
  const Head<T> h{shape, x, t, w.padded_before, {x.slope, shape.shift()}, scaled_rows(x.q, shape.tq, shape.d, t.dp, scale, w.q_rows)};
  T* delta = nullptr;  // D_i = dO_i . O_i, from the output when it was kept
  if (!out && t.chunks > 1) throw std::logic_error("flash_backward: keys in several chunks need the forward's output");
  if (out) {
    delta = w.delta.take(shape.tq);
    for (std::size_t i = 0; i < shape.tq; ++i) {
      T sum = 0;
      for (std::size_t c = 0; c < shape.dv; ++c) sum += g[i * shape.dv + c] * out[i * shape.dv + c];
      delta[i] = sum;
    }
  }
  const BackwardRows<T> a{g,     padded_rows(g, shape.tq, shape.dv, t.dvp, w.g_rows), h.queries,
                          lse,   delta,
                          t.dp == shape.d ? dq : w.dq_acc.take(shape.tq * t.dp)};
  std::fill(a.dq, a.dq + shape.tq * t.dp, T(0));
  const T* keys = padded_rows(x.k, shape.tk, shape.d, t.dp, w.k_rows);
  T* keys_t = w.keys_t.take(shape.d * t.bc);
  T* values_t = w.values_t.take(shape.dv * t.bc);
  T* p = w.scores.take(t.br * t.bc);
  T* ds = w.dscores.take(t.br * t.bc);
  for (std::size_t c0 = 0; c0 < shape.tk; c0 += t.bc) {
    const std::size_t c = std::min(t.bc, shape.tk - c0);
    pack_transposed(x.k, shape.d, c0, c, t.bc, keys_t);
    pack_transposed(x.v, shape.dv, c0, c, t.bc, values_t);
    // dK, dV accumulate in place when their rows need no padding, else in scratch copied out after.
    T* dk_rows = t.dp == shape.d ? dk + c0 * shape.d : w.dk_acc.take(c * t.dp);
    T* dv_rows = t.dvp == shape.dv ? dv + c0 * shape.dv : w.dv_acc.take(c * t.dvp);
    std::fill(dk_rows, dk_rows + c * t.dp, T(0));
    std::fill(dv_rows, dv_rows + c * t.dvp, T(0));
    const BackwardChunk<T> ch{keys_t, values_t, keys + c0 * t.dp, c0, c, dk_rows, dv_rows};
    const std::size_t row_lo = shape.first_row(c0), row_hi = shape.end_row(c0 + c - 1);
    for (std::size_t i0 = row_lo; i0 < row_hi; i0 += t.br) {
      const std::size_t rows = std::min(t.br, row_hi - i0);
      flash::for_each_row_tile(rows, [&](auto mr, std::size_t r0) {
        backward_row_tile<T, decltype(mr)::value>(h, ch, a, i0 + r0, p + r0 * t.bc, ds + r0 * t.bc);
      });
      add_transposed_product(h, ch, i0, rows, p, a.g_rows, t.dvp, ch.dv);  // dV += P^T dO
      add_transposed_product(h, ch, i0, rows, ds, a.q_rows, t.dp, ch.dk);  // dK += dS^T Q
    }
    if (dk_rows != dk + c0 * shape.d) unpad_rows(dk_rows, c, t.dp, shape.d, dk + c0 * shape.d);
    if (dv_rows != dv + c0 * shape.dv) unpad_rows(dv_rows, c, t.dvp, shape.dv, dv + c0 * shape.dv);
  }
  // dS was left unscaled: dQ = scale dS K.
  if (a.dq != dq) unpad_rows(a.dq, shape.tq, t.dp, shape.d, dq);
  for (std::size_t e = 0; e < shape.tq * shape.d; ++e) dq[e] *= scale;
}

template class FlashScratch<float>;
template class FlashScratch<double>;
template void flash_forward(const HeadShape&, const HeadOperands<float>&, float*, float*, FlashScratch<float>&);
template void flash_forward(const HeadShape&, const HeadOperands<double>&, double*, double*, FlashScratch<double>&);
template void flash_backward(const HeadShape&, const HeadOperands<float>&, const float*, const float*, const float*, float*, float*,
                             float*, FlashScratch<float>&);
template void flash_backward(const HeadShape&, const HeadOperands<double>&, const double*, const double*, const double*, double*,
                             double*, double*, FlashScratch<double>&);

}  // namespace attnlab::detail
