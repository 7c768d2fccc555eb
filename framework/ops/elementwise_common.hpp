// Internal to ops: what the elementwise ops of elementwise.cpp and gelu.cpp share, the size of their
// parallel chunks, the check that two operands share a dtype, an in-place update, and the column sums of
// a bias gradient.
#pragma once

#include <algorithm>
#include <cstddef>
#include <stdexcept>
#include <string>

#include "framework/ops/parallel.hpp"
#include "framework/tensor/tensor.hpp"

namespace attnlab::detail {

// Elements per parallel chunk of an elementwise loop.
inline constexpr std::size_t kGrain = kElementsPerChunk;

inline void check_same_dtype(const Tensor& a, const Tensor& b, const char* op) {
  if (a.dtype() != b.dtype()) {
    throw std::invalid_argument(std::string(op) + ": operands have different dtypes (" + dtype_name(a.dtype()) +
                                " and " + dtype_name(b.dtype()) + "); convert one with .to()");
  }
}

// x = op(x, y) element by element, in place (floating tensors of one shape and dtype), split across threads
// in ranges of kGrain: each element is one op, so the bits do not depend on the thread count.
template <class Op>
void update_in_place(Tensor& x, const Tensor& y, const char* who, Op op) {
  dispatch_floating(x.dtype(), who, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* px = x.data<T>();
    const T* py = y.data<T>();
    parallel_for(x.numel(), kGrain, [&](std::size_t i0, std::size_t i1) {
#pragma omp simd
      for (std::size_t i = i0; i < i1; ++i) px[i] = op(px[i], py[i]);
    });
  });
}

// Columns that sum_rows sums together in registers.
inline constexpr std::size_t kSumRowsBlock = 64;
// From this many columns on, sum_rows takes its range a few rows at a time instead (sum_rows_grouped).
inline constexpr std::size_t kSumRowsGroupedFrom = 256;

// o[c] += g[r][c] for rows r in order, columns [c0, c1): kRows rows at a time, each 64-byte run of columns
// summed over those rows in registers and stored. Every column is added to in the same order as by rows,
// so the bits are the same; what changes is the memory's order. sum_rows's blocks go down 64 columns of
// each row, one 256-byte piece a row apart, which the prefetchers follow poorly; here each row is read in
// long runs, kRows rows side by side. A GELU's bias gradient in the GPT ([768, 512], scaled: dx is
// written too) took 97 us against 205, [2048, 256] 139 against 242 (plain 61 against 83); narrower
// ranges are slower this way ([2048, 64] 6.2 against 4.0, [512, 192] 5.3 against 4.6) (Intel Xeon,
// 2026-12-06, a stand-alone copy of both, best of 30 with g just written).
template <class T>
void sum_rows_grouped(T* __restrict g, const T* __restrict scale, std::size_t rows, std::size_t cols, std::size_t c0, std::size_t c1,
                      T* __restrict o) {
  constexpr std::size_t kRows = 4, kRun = 64 / sizeof(T);
  const std::size_t runs_end = c0 + (c1 - c0) / kRun * kRun;
  const auto one = [&](std::size_t r, std::size_t c) {
    if (scale) g[r * cols + c] *= scale[r * cols + c];
    o[c] += g[r * cols + c];
  };
  std::size_t r = 0;
  for (; r + kRows <= rows; r += kRows) {
    for (std::size_t c = c0; c < runs_end; c += kRun) {
      T acc[kRun];
      for (std::size_t j = 0; j < kRun; ++j) acc[j] = o[c + j];
#pragma GCC unroll 4
      for (std::size_t q = 0; q < kRows; ++q) {
        T* __restrict row = g + (r + q) * cols + c;
        if (scale) {
          const T* __restrict s = scale + (r + q) * cols + c;
#pragma GCC unroll 16
          for (std::size_t j = 0; j < kRun; ++j) row[j] *= s[j];
        }
#pragma GCC unroll 16
        for (std::size_t j = 0; j < kRun; ++j) acc[j] += row[j];
      }
      for (std::size_t j = 0; j < kRun; ++j) o[c + j] = acc[j];
    }
    for (std::size_t c = runs_end; c < c1; ++c)
      for (std::size_t q = 0; q < kRows; ++q) one(r + q, c);
  }
  for (; r < rows; ++r)
    for (std::size_t c = c0; c < c1; ++c) one(r, c);
}

// o[c] += the sum of column c of g [rows, cols] over its rows in order, for columns [c0, c1). Blocks of
// kBlock columns are summed in registers and stored once: accumulated in o itself, every row's vector
// add waited on the store of the row before (the bias gradients were 1% of a toy step). Same additions
// in the same order as o[c] += g[r][c] row by row. With `scale` ([rows, cols]), each element of g is
// first multiplied by scale's, in place, and the products are summed: gelu_linear's backward makes dx =
// (g W) * gelu'(x) and the bias gradient of the Linear before the GELU in one pass, the same bits as
// scaling and then summing with sum_to. g is written only then. Ranges of kSumRowsGroupedFrom columns
// or more go to sum_rows_grouped.
template <class T>
void sum_rows(T* __restrict g, const T* __restrict scale, std::size_t rows, std::size_t cols, std::size_t c0, std::size_t c1,
              T* __restrict o) {
  if (c1 - c0 >= kSumRowsGroupedFrom) return sum_rows_grouped(g, scale, rows, cols, c0, c1, o);
  constexpr std::size_t kBlock = kSumRowsBlock;
  std::size_t c = c0;
  for (; c + kBlock <= c1; c += kBlock) {
    T acc[kBlock];
    for (std::size_t j = 0; j < kBlock; ++j) acc[j] = o[c + j];
    for (std::size_t r = 0; r < rows; ++r) {
      T* __restrict row = g + r * cols + c;
      if (scale) {
        const T* __restrict s = scale + r * cols + c;
#pragma GCC unroll 64
        for (std::size_t j = 0; j < kBlock; ++j) row[j] *= s[j];
      }
#pragma GCC unroll 64
      for (std::size_t j = 0; j < kBlock; ++j) acc[j] += row[j];
    }
    for (std::size_t j = 0; j < kBlock; ++j) o[c + j] = acc[j];
  }
  for (std::size_t r = 0; r < rows && c < c1; ++r) {
    for (std::size_t i = c; i < c1; ++i) {
      if (scale) g[r * cols + i] *= scale[r * cols + i];
      o[i] += g[r * cols + i];
    }
  }
}

// sum_rows over all of g's columns, split across threads in ranges of whole 64-column blocks of at least
// kGrain elements: threads split the columns, never the rows, so each column is summed in row order and
// the sums do not depend on the thread count. (Chunks of 256 columns left the bias gradients of a model
// 256 wide or narrower, the toy's and the default experiment's, to one thread.)
template <class T>
void sum_rows_parallel(T* g, const T* scale, std::size_t rows, std::size_t cols, T* o) {
  const std::size_t blocks = (cols + kSumRowsBlock - 1) / kSumRowsBlock;
  const std::size_t block_size = std::max<std::size_t>(rows * kSumRowsBlock, 1);
  const std::size_t grain = (kGrain + block_size - 1) / block_size;
  parallel_for(blocks, grain, [&](std::size_t b0, std::size_t b1) {
    sum_rows(g, scale, rows, cols, b0 * kSumRowsBlock, std::min(cols, b1 * kSumRowsBlock), o);
  });
}

}  // namespace attnlab::detail
