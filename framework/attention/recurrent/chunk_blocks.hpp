// Small block helpers of the chunked delta rule (delta_rule.cpp): the two unit lower triangular solves of
// a chunk, written out rather than called through cblas_?trsm, and the decays' gradient shares. Its
// products run as a few larger BLAS calls on stacked blocks, with transposed copies (simd::transpose)
// where one would have needed a transposed right operand.
//
// Why not trsm: on [64, 64] systems with 32 right-hand sides OpenBLAS's trsm spent about 3 us per call
// (12% of the delta rule's forward + backward at 4096 tokens), mostly copying its blocks; the loops
// below keep 8 rows of the solution in registers and read each solved row once per block.
// Why no transposed right operand: OpenBLAS 0.3.21 sends row-major A B^T products of these sizes through
// its general path, which packs both operands (a quarter of the delta rule's time), while A B and A^T B
// take its small-matrix kernels; a transposed copy of a [64, 32] block costs far less than the packing.
//
// Legend: n rows of the chunk, w columns of the right-hand side (and of the solution), ld leading dims.
#pragma once

#include <algorithm>
#include <cstddef>

#include "framework/ops/simd.hpp"

namespace attnlab::chunk_blocks {

constexpr std::size_t kBlockRows = 8;  // rows of the solution kept in registers at once

// Columns [e0, e0 + width) of the solution of (I + diag(scale) M) X = B, in place in x [n, w]; M [n, n]
// strictly lower (only j < i is read). In blocks of kBlockRows rows: first what the solved rows above
// contribute, summed in registers (every row of the block at once, the loops over the block unrolled so
// that the sums stay in registers), then the block's own small triangle, row by row.
template <class T, bool Full>
void forward_columns(const T* m, const T* scale, std::size_t n, T* x, std::size_t w, std::size_t e0, std::size_t width) {
  constexpr std::size_t kWidth = 64 / sizeof(T);
  const std::size_t cols = Full ? kWidth : width;
  for (std::size_t i0 = 0; i0 < n; i0 += kBlockRows) {
    const std::size_t rows = std::min(kBlockRows, n - i0);
    if (i0 > 0) {
      T acc[kBlockRows][kWidth] = {};
      const T* mrow[kBlockRows];
#pragma GCC unroll 8
      for (std::size_t r = 0; r < kBlockRows; ++r) mrow[r] = m + std::min(i0 + r, n - 1) * n;  // rows past n: computed, not kept
      for (std::size_t j = 0; j < i0; ++j) {
        const T* xj = x + j * w + e0;
#pragma GCC unroll 8
        for (std::size_t r = 0; r < kBlockRows; ++r) {
          const T a = mrow[r][j];
#pragma omp simd
          for (std::size_t e = 0; e < cols; ++e) acc[r][e] += a * xj[e];
        }
      }
      for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t e = 0; e < cols; ++e) x[(i0 + r) * w + e0 + e] -= scale[i0 + r] * acc[r][e];
    }
    for (std::size_t i = i0 + 1; i < i0 + rows; ++i) {
      T* xi = x + i * w + e0;
      for (std::size_t j = i0; j < i; ++j) {
        const T a = scale[i] * m[i * n + j];
        const T* xj = x + j * w + e0;
#pragma omp simd
        for (std::size_t e = 0; e < cols; ++e) xi[e] -= a * xj[e];
      }
    }
  }
}

// Columns [e0, e0 + width) of the solution of (I + diag(scale) M)^T X = B, in place: from the last row
// up, X_j = B_j - sum_{i > j} scale_i M_ij X_i, in the same blocks.
template <class T, bool Full>
void backward_columns(const T* m, const T* scale, std::size_t n, T* x, std::size_t w, std::size_t e0, std::size_t width) {
  constexpr std::size_t kWidth = 64 / sizeof(T);
  const std::size_t cols = Full ? kWidth : width;
  for (std::size_t end = n; end > 0;) {
    const std::size_t rows = std::min(kBlockRows, end), j0 = end - rows;
    if (end < n) {
      T acc[kBlockRows][kWidth] = {};
      for (std::size_t i = end; i < n; ++i) {
        const T* xi = x + i * w + e0;
        const T* mi = m + i * n + j0;  // the block's columns of row i; past `rows`, computed, not kept
        const T si = scale[i];
#pragma GCC unroll 8
        for (std::size_t r = 0; r < kBlockRows; ++r) {
          const T a = si * mi[std::min(r, rows - 1)];
#pragma omp simd
          for (std::size_t e = 0; e < cols; ++e) acc[r][e] += a * xi[e];
        }
      }
      for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t e = 0; e < cols; ++e) x[(j0 + r) * w + e0 + e] -= acc[r][e];
    }
    for (std::size_t j = end - 1; j-- > j0;) {  // the block's triangle, from its last row up
      T* xj = x + j * w + e0;
      for (std::size_t i = j + 1; i < end; ++i) {
        const T a = scale[i] * m[i * n + j];
        const T* xi = x + i * w + e0;
#pragma omp simd
        for (std::size_t e = 0; e < cols; ++e) xj[e] -= a * xi[e];
      }
    }
    end = j0;
  }
}

// (I + diag(scale) M) X = B in place (transpose: (I + diag(scale) M)^T X = B), M [n, n] strictly lower,
// x [n, w]: in tiles of one 64-byte vector of columns.
template <class T>
void unit_lower_solve(bool transpose, const T* m, const T* scale, std::size_t n, T* x, std::size_t w) {
  constexpr std::size_t kWidth = 64 / sizeof(T);
  for (std::size_t e0 = 0; e0 < w; e0 += kWidth) {
    const std::size_t width = std::min(kWidth, w - e0);
    if (transpose) {
      width == kWidth ? backward_columns<T, true>(m, scale, n, x, w, e0, width) : backward_columns<T, false>(m, scale, n, x, w, e0, width);
    } else {
      width == kWidth ? forward_columns<T, true>(m, scale, n, x, w, e0, width) : forward_columns<T, false>(m, scale, n, x, w, e0, width);
    }
  }
}

// The shares a_j b_j for j < end, in double: each added to column[j], their sum returned (the decays'
// gradient shares of the chunked delta rule, see delta_rule.cpp).
template <class T>
inline double shares(const T* a, const T* b, std::size_t end, double* column) {
  simd::Lanes<double> acc{};
  std::size_t j = 0;
  for (; j + 8 <= end; j += 8) {
    using Doubles = simd::Lanes<double>;
    const Doubles share = __builtin_convertvector(simd::load_lanes(a + j), Doubles) * __builtin_convertvector(simd::load_lanes(b + j), Doubles);
    acc += share;
    simd::store_lanes(column + j, simd::load_lanes(column + j) + share);
  }
  double sum = simd::lane_sum<double>(acc);
  for (; j < end; ++j) {
    const double share = static_cast<double>(a[j]) * static_cast<double>(b[j]);
    sum += share;
    column[j] += share;
  }
  return sum;
}

}  // namespace attnlab::chunk_blocks
