// Small block helpers of the chunked delta rule (delta_rule.cpp): the two unit lower triangular solves of
// a chunk, written out rather than called through cblas_?trsm, and the stacking and transposing copies
// that let its products run as a few larger BLAS calls without a transposed right operand.
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

namespace attnlab::chunk_blocks {

constexpr std::size_t kBlockRows = 8;  // rows of the solution kept in registers at once

// Columns [e0, e0 + width) of the solution of (I + diag(scale) M) X = B, in place in x [n, w]; M [n, n]
// strictly lower (only j < i is read). Row by row in blocks of kBlockRows: first what the rows above the
// block contribute, then the block's own triangle.
template <class T, bool Full>
void forward_columns(const T* m, const T* scale, std::size_t n, T* x, std::size_t w, std::size_t e0, std::size_t width) {
  constexpr std::size_t kWidth = 64 / sizeof(T);
  const std::size_t cols = Full ? kWidth : width;  // a constant trip count on full tiles, so acc stays in registers
  for (std::size_t i0 = 0; i0 < n; i0 += kBlockRows) {
    const std::size_t rows = std::min(kBlockRows, n - i0);
    T acc[kBlockRows][kWidth] = {};
    for (std::size_t j = 0; j < i0; ++j) {
      const T* xj = x + j * w + e0;
      for (std::size_t r = 0; r < kBlockRows; ++r) {
        const T a = r < rows ? m[(i0 + r) * n + j] : T(0);
#pragma omp simd
        for (std::size_t e = 0; e < cols; ++e) acc[r][e] += a * xj[e];
      }
    }
    for (std::size_t r = 0; r < rows; ++r) {
      const std::size_t i = i0 + r;
      for (std::size_t j = i0; j < i; ++j) {
        const T a = m[i * n + j];
        for (std::size_t e = 0; e < cols; ++e) acc[r][e] += a * x[j * w + e0 + e];
      }
      for (std::size_t e = 0; e < cols; ++e) x[i * w + e0 + e] -= scale[i] * acc[r][e];
    }
  }
}

// Columns [e0, e0 + width) of the solution of (I + diag(scale) M)^T X = B, in place: from the last row
// up, X_j = B_j - sum_{i > j} scale_i M_ij X_i.
template <class T, bool Full>
void backward_columns(const T* m, const T* scale, std::size_t n, T* x, std::size_t w, std::size_t e0, std::size_t width) {
  constexpr std::size_t kWidth = 64 / sizeof(T);
  const std::size_t cols = Full ? kWidth : width;
  for (std::size_t end = n; end > 0;) {
    const std::size_t rows = std::min(kBlockRows, end), j0 = end - rows;
    T acc[kBlockRows][kWidth] = {};
    for (std::size_t i = end; i < n; ++i) {
      const T* xi = x + i * w + e0;
      for (std::size_t r = 0; r < kBlockRows; ++r) {
        const T a = r < rows ? scale[i] * m[i * n + j0 + r] : T(0);
#pragma omp simd
        for (std::size_t e = 0; e < cols; ++e) acc[r][e] += a * xi[e];
      }
    }
    for (std::size_t r = rows; r-- > 0;) {
      const std::size_t j = j0 + r;
      for (std::size_t i = j + 1; i < end; ++i) {
        const T a = scale[i] * m[i * n + j];
        for (std::size_t e = 0; e < cols; ++e) acc[r][e] += a * x[i * w + e0 + e];
      }
      for (std::size_t e = 0; e < cols; ++e) x[j * w + e0 + e] -= acc[r][e];
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

// dst [cols, rows] (leading dimension ld) = src [rows, cols]^T.
template <class T>
void transpose(const T* src, std::size_t rows, std::size_t cols, T* dst, std::size_t ld) {
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t j = 0; j < cols; ++j) dst[j * ld + i] = src[i * cols + j];
}

}  // namespace attnlab::chunk_blocks
