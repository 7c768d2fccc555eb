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
#include <cstring>

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

// dst [cols, rows] (leading dimension ld) = src [rows, cols]^T.
template <class T>
void transpose(const T* src, std::size_t rows, std::size_t cols, T* dst, std::size_t ld) {
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t j = 0; j < cols; ++j) dst[j * ld + i] = src[i * cols + j];
}

namespace detail {
using Float8 = float __attribute__((vector_size(32)));
using Index8 = int __attribute__((vector_size(32)));
inline Float8 load8(const float* p) {
  Float8 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store8(float* p, Float8 v) { std::memcpy(p, &v, sizeof v); }

// An 8 x 8 block transposed in registers: pairs of rows interleaved, then pairs of pairs, then halves
// (the unpack / shuffle / permute sequence of AVX, written with GCC's generic vector shuffles).
inline void transpose_8x8(const float* src, std::size_t lds, float* dst, std::size_t ldd) {
  const Index8 lo = {0, 8, 1, 9, 4, 12, 5, 13}, hi = {2, 10, 3, 11, 6, 14, 7, 15};
  const Index8 even = {0, 1, 8, 9, 4, 5, 12, 13}, odd = {2, 3, 10, 11, 6, 7, 14, 15};
  const Index8 low = {0, 1, 2, 3, 8, 9, 10, 11}, high = {4, 5, 6, 7, 12, 13, 14, 15};
  Float8 r[8], t[8], s[8];
  for (int i = 0; i < 8; ++i) r[i] = load8(src + i * lds);
  for (int p = 0; p < 4; ++p) {
    t[2 * p] = __builtin_shuffle(r[2 * p], r[2 * p + 1], lo);
    t[2 * p + 1] = __builtin_shuffle(r[2 * p], r[2 * p + 1], hi);
  }
  for (int p = 0; p < 2; ++p) {
    s[4 * p] = __builtin_shuffle(t[4 * p], t[4 * p + 2], even);
    s[4 * p + 1] = __builtin_shuffle(t[4 * p], t[4 * p + 2], odd);
    s[4 * p + 2] = __builtin_shuffle(t[4 * p + 1], t[4 * p + 3], even);
    s[4 * p + 3] = __builtin_shuffle(t[4 * p + 1], t[4 * p + 3], odd);
  }
  for (int c = 0; c < 4; ++c) {
    store8(dst + c * ldd, __builtin_shuffle(s[c], s[c + 4], low));
    store8(dst + (c + 4) * ldd, __builtin_shuffle(s[c], s[c + 4], high));
  }
}
}  // namespace detail

// Eight lanes of T (GCC's vector extensions): a float block converts lane for lane to a double one.
template <class T>
struct Eight {
  typedef T V __attribute__((vector_size(8 * sizeof(T))));
};
template <class T>
using Lanes = typename Eight<T>::V;

template <class T>
inline Lanes<T> load_lanes(const T* p) {
  Lanes<T> v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <class T>
inline void store_lanes(T* p, Lanes<T> v) {
  std::memcpy(p, &v, sizeof v);
}

// The lanes' sum in a fixed tree: halves, quarters, pairs. (`#pragma omp simd reduction` leaves GCC 12
// adding the lanes one after another through the stack: 16 dependent adds a row, where these rows are
// 16 to 64 long.)
template <class V>
inline auto lane_sum(V v) {
  const auto a = (v[0] + v[4]) + (v[2] + v[6]), b = (v[1] + v[5]) + (v[3] + v[7]);
  return a + b;
}

// x . y over n elements: eight lanes over the whole blocks, then the tail in order.
template <class T>
inline T dot(const T* x, const T* y, std::size_t n) {
  Lanes<T> acc{};
  std::size_t j = 0;
  for (; j + 8 <= n; j += 8) acc += load_lanes(x + j) * load_lanes(y + j);
  T sum = lane_sum(acc);
  for (; j < n; ++j) sum += x[j] * y[j];
  return sum;
}

// The shares a_j b_j for j < end, in double: each added to column[j], their sum returned (the decays'
// gradient shares of the chunked delta rule, see delta_rule.cpp).
template <class T>
inline double shares(const T* a, const T* b, std::size_t end, double* column) {
  Lanes<double> acc{};
  std::size_t j = 0;
  for (; j + 8 <= end; j += 8) {
    const Lanes<double> share = __builtin_convertvector(load_lanes(a + j), Lanes<double>) * __builtin_convertvector(load_lanes(b + j), Lanes<double>);
    acc += share;
    store_lanes(column + j, load_lanes(column + j) + share);
  }
  double sum = lane_sum(acc);
  for (; j < end; ++j) {
    const double share = static_cast<double>(a[j]) * static_cast<double>(b[j]);
    sum += share;
    column[j] += share;
  }
  return sum;
}

// float, the training type: 8 x 8 blocks in registers (4.5x faster than element by element on a
// [64, 32] block), the edges element by element. Same values, only moved.
inline void transpose(const float* src, std::size_t rows, std::size_t cols, float* dst, std::size_t ld) {
  std::size_t i0 = 0;
  for (; i0 + 8 <= rows; i0 += 8) {
    std::size_t j0 = 0;
    for (; j0 + 8 <= cols; j0 += 8) detail::transpose_8x8(src + i0 * cols + j0, cols, dst + j0 * ld + i0, ld);
    for (; j0 < cols; ++j0)
      for (std::size_t i = i0; i < i0 + 8; ++i) dst[j0 * ld + i] = src[i * cols + j0];
  }
  for (; i0 < rows; ++i0)
    for (std::size_t j = 0; j < cols; ++j) dst[j * ld + i0] = src[i0 * cols + j];
}

}  // namespace attnlab::chunk_blocks
