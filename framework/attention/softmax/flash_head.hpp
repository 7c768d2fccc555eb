// Internal to the fused softmax attention kernel, what its forward (flash_forward.cpp) and its backward
// (flash_backward.cpp) share: one head's tiling and scratch, the packing of its operands, which keys a
// tile of rows sees, and the logits of a tile of rows, which both directions compute. Tiles that no row
// of them may see are skipped (causal: about half of them; a window: all but its band), and each
// product's inner range is cut to the keys (or rows) the tile's rows (or keys) see.
//
// Legend: Tq/Tk tokens, D head dim, Dv value dim, Dp/Dvp the dims rounded up to whole vectors, W lanes,
// Br query rows per block, Bc keys per chunk, R rows of this block, C keys of this chunk.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <new>
#include <utility>
#include <vector>

#include "framework/attention/softmax/flash_attention.hpp"
#include "framework/attention/softmax/flash_tiles.hpp"

namespace attnlab::detail {

using flash::Acc;
using flash::kLanes;
using flash::Vec;

inline std::size_t round_up(std::size_t x, std::size_t m) { return (x + m - 1) / m * m; }

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

// cols values from src to dst: whole vectors, then the rest one by one (a head's rows are short; a call
// to memmove per row cost more than its copy).
template <class T>
inline void copy_row(const T* src, std::size_t cols, T* dst) {
  constexpr std::size_t W = kLanes<T>;
  std::size_t c = 0;
  for (; c + W <= cols; c += W) flash::store(dst + c, flash::load(src + c));
  for (; c < cols; ++c) dst[c] = src[c];
}

// rows [T, cols] (lds apart) as dense [T, padded] with zero columns after cols (rows that need no padding
// are read in place instead).
template <class T>
const T* padded_rows(const T* rows, std::size_t n, std::size_t cols, std::size_t lds, std::size_t padded, Buffer<T>& buffer) {
  T* out = buffer.take(n * padded);
  for (std::size_t i = 0; i < n; ++i) {
    copy_row(rows + i * lds, cols, out + i * padded);
    std::fill(out + i * padded + cols, out + (i + 1) * padded, T(0));
  }
  return out;
}

// factor * rows [T, cols] (lds apart) as [T, padded], zero columns after cols.
template <class T>
const T* scaled_rows(const T* rows, std::size_t n, std::size_t cols, std::size_t lds, std::size_t padded, T factor, Buffer<T>& buffer) {
  T* out = buffer.take(n * padded);
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t c = 0; c < cols; ++c) out[i * padded + c] = factor * rows[i * lds + c];
    std::fill(out + i * padded + cols, out + (i + 1) * padded, T(0));
  }
  return out;
}

// Keys [c0, c0 + C) of rows [Tk, D] (lds apart) transposed into out [D, ld]; the columns from C to
// the next whole vector are zero (tiles read whole vectors).
template <class T>
void pack_transposed(const T* rows, std::size_t d, std::size_t lds, std::size_t c0, std::size_t c, std::size_t ld, T* out) {
  // float in 8 x 8 blocks through registers (a toy model's 16 keys by 16 dims were scattered element by
  // element: 12% of its attention op's time).
  constexpr std::size_t W = kLanes<T>;
  const std::size_t padded = (c + W - 1) / W * W;
  simd::transpose(rows + c0 * lds, c, d, lds, out, ld);
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
  // Lanes of the W keys from j that a row seeing keys [first, last) (its first_key and last_key) sees:
  // all bits set, or zero. The bounds come from the caller, once per row rather than once per vector.
  typename flash::Simd<T>::I visible_lanes(T first, T last, std::size_t j) const {
    const Vec<T> key = flash::iota<T>() + static_cast<T>(j);
    typename flash::Simd<T>::I lanes = (key >= first) & (key < last);
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
  T first[MR], last[MR];  // the keys each row sees, [first, last), for the masks of mixed tiles
  for (int r = 0; r < MR; ++r) first[r] = static_cast<T>(h.shape.first_key(i + r)), last[r] = static_cast<T>(h.shape.last_key(i + r));
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
        if (kind == TileKind::mixed) x = h.visible_lanes(first[r], last[r], j + v * W) ? x : flash::splat(neg_inf);
        flash::store(out + r * bc + (v0 + v) * W, x);
        top[r] = flash::max(x, top[r]);
      }
  });
}

// padded_before[j]: the padded keys among the first j (empty without padding).
template <class T>
void count_padding(const HeadOperands<T>& x, std::size_t tk, std::vector<std::uint32_t>& padded_before) {
  padded_before.clear();
  if (!x.padding) return;
  padded_before.resize(tk + 1);
  padded_before[0] = 0;
  for (std::size_t j = 0; j < tk; ++j) padded_before[j + 1] = padded_before[j] + (x.padding[j] ? 1 : 0);
}

}  // namespace attnlab::detail
