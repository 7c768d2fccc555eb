// Register tiles for the fused attention kernel (flash_forward.cpp, flash_backward.cpp): the one
// micro-kernel every product of the kernel runs on, on the vectors (and with the exp) of
// framework/ops/simd.hpp, written once for float and double so that the float64 tests run the code the
// float32 path runs.
//
// Why not OpenBLAS for these products: their inner or outer dimension is the head dim (16-128), so each
// call is thin; OpenBLAS zeroed C for beta = 0 (sgemm_beta) and repacked both operands on every call,
// about a quarter of the op's time at n = 4096 (perf), and its products could not apply the scale, the
// masks and the exp while a tile was in registers.
//
// Legend: MR rows of a tile, NV vectors across it, W lanes per vector.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "framework/ops/simd.hpp"

namespace attnlab::flash {

using simd::exp;
using simd::horizontal_max;
using simd::horizontal_sum;
using simd::iota;
using simd::kLanes;
using simd::load;
using simd::max;
using simd::min;
using simd::Simd;
using simd::splat;
using simd::store;
using simd::Vec;

// The accumulators of one MR x (NV W) tile.
template <class T, int MR, int NV>
struct Acc {
  Vec<T> v[MR][NV];
};

// acc = sum over k in [k0, k1) of A(r, k) B(k, :): A(r, k) = a[r a_row + k a_inner] (broadcast, so A may
// be read along rows or columns, e.g. P for P V and P^T dO), B's row k the NV vectors at b + k ldb.
// MR = 6, NV = 2 holds 12 accumulators, 2 B vectors and a broadcast in AVX2's 16 registers; MR = 8
// holds 16 of AVX-512's 32 (kTileRows).
template <class T, int MR, int NV>
inline Acc<T, MR, NV> multiply(const T* a, std::ptrdiff_t a_row, std::ptrdiff_t a_inner, const T* b, std::ptrdiff_t ldb,
                               std::ptrdiff_t k0, std::ptrdiff_t k1) {
  constexpr std::ptrdiff_t W = kLanes<T>;
  Vec<T> acc[MR][NV];  // zeroed vector by vector: GCC 12 turns `= {}` into a rep stos of the array on the stack
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = Vec<T>{};
  const T* ak = a + k0 * a_inner;
  const T* bk = b + k0 * ldb;
  // Four steps of k a loop iteration: 2.4-2.8% off the GPT's attention (T = 64, D = 32, forward +
  // backward, alternated in one process), 0.4% off the toy's; each accumulator adds in the same order.
#pragma GCC unroll 4
  for (std::ptrdiff_t k = k0; k < k1; ++k, ak += a_inner, bk += ldb) {
    Vec<T> bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bv[v] = load(bk + v * W);
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const T x = ak[r * a_row];
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] += x * bv[v];
    }
  }
  Acc<T, MR, NV> out;
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) out.v[r][v] = acc[r][v];
  return out;
}

template <int N>
using Int = std::integral_constant<int, N>;

// Rows of a full tile: 8 with AVX-512's 32 vector registers, 6 with AVX2's 16. Eight rather than six
// took 3.2-3.3% off the GPT's attention (T = 64, D = 32, batch 12 x 4 heads, forward + backward), 5.8%
// off the toy's (T = 16, D = 16; two tiles a head instead of three) and 2.5-4.2% at 256 to 4096 tokens
// (Intel Xeon, 2026-12-07, alternated in one process); ten or twelve ran out of registers (1.1-1.9x
// slower). Every accumulator adds the same terms in the same order whatever the tile, so the results
// are the same bits; a bigger tile only adds exact zeros (masked weights) to some sums.
constexpr int kTileRows = simd::kVectorBytes == 64 ? 8 : 6;

// Row tiles over [0, rows): f(Int<MR>, r0) for tiles of kTileRows rows, the last rows in tiles of 4, 2
// and 1.
template <class F>
inline void for_each_row_tile(std::size_t rows, F&& f) {
  std::size_t r0 = 0;
  for (; r0 + kTileRows <= rows; r0 += kTileRows) f(Int<kTileRows>{}, r0);
  if (rows - r0 >= 4) f(Int<4>{}, r0), r0 += 4;
  if (rows - r0 >= 2) f(Int<2>{}, r0), r0 += 2;
  if (rows - r0 >= 1) f(Int<1>{}, r0);
}

// Column tiles over vectors [v_begin, v_end): f(Int<NV>, v0) for tiles of 2 vectors, an odd last one alone.
template <class F>
inline void for_each_col_tile(std::size_t v_begin, std::size_t v_end, F&& f) {
  std::size_t v0 = v_begin;
  for (; v0 + 2 <= v_end; v0 += 2) f(Int<2>{}, v0);
  if (v0 < v_end) f(Int<1>{}, v0);
}

// f(Int<MR>, Int<NV>, r0, v0) over rows [0, rows) x vectors [0, vectors), column tiles outermost so that
// a tile's B panel stays in L1 while the rows pass over it.
template <class F>
inline void for_each_tile(std::size_t rows, std::size_t vectors, F&& f) {
  for_each_col_tile(0, vectors, [&](auto nv, std::size_t v0) {
    for_each_row_tile(rows, [&](auto mr, std::size_t r0) { f(mr, nv, r0, v0); });
  });
}

}  // namespace attnlab::flash
