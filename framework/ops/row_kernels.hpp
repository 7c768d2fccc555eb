// Row kernels shared by the fused ops that work row by row over contiguous raw pointers (softmax, layer
// norm, cross-entropy, and the attention kernels' own fused ops): reductions in vector lanes folded in a
// fixed tree (framework/ops/simd.hpp: without -ffast-math the compiler may not reorder a floating-point
// reduction by itself, and a serial chain of adds is bound by their latency) and exp and other maps
// through xsimd batches, because a scalar std::exp loop does not vectorise without -ffast-math.
#pragma once

#include <algorithm>
#include <cstddef>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include <xsimd/xsimd.hpp>

#include "framework/ops/parallel.hpp"
#include "framework/ops/simd.hpp"
#include "framework/tensor/tensor.hpp"

namespace attnlab::rowops {

// Scratch rows for the kernels below: simd::AlignedVector (64-byte aligned, like tensors). xsimd takes a
// scalar path for the elements before the first aligned one, and its exp and std::exp may differ in the
// last bit: scratch aligned by the heap's state would make results depend on what was allocated before
// (a run would not repeat bit for bit across builds that allocate differently).
using simd::AlignedVector;

template <class T>
T max(const T* x, std::size_t n) {
  constexpr std::size_t W = simd::kLanes<T>;
  simd::Vec<T> acc = simd::splat(-std::numeric_limits<T>::infinity());
  std::size_t i = 0;
  for (; i + W <= n; i += W) {
    const simd::Vec<T> v = simd::load(x + i);
    acc = v > acc ? v : acc;  // NaN never wins, as in x[i] > m ? x[i] : m
  }
  T m = simd::horizontal_max<T>(acc);
  for (; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

template <class T>
T sum(const T* x, std::size_t n) {
  return simd::sum(x, n);
}

template <class T>
T dot(const T* x, const T* y, std::size_t n) {
  return simd::dot(x, y, n);
}

// y = f(x) over one row in xsimd batches (x and y may be the same row), the tail too (through a padded
// batch): an element's value depends on nothing but its input, not on the row's alignment or its place
// in the row, so results cannot move with what the heap held before.
template <class T, class F>
void map_row(const T* x, T* y, std::size_t n, F f) {
  using Batch = xsimd::batch<T>;
  constexpr std::size_t lanes = Batch::size;
  std::size_t i = 0;
  for (; i + lanes <= n; i += lanes) f(Batch::load_unaligned(x + i)).store_unaligned(y + i);
  if (i == n) return;
  alignas(64) T tail[lanes] = {};
  std::copy(x + i, x + n, tail);
  f(Batch::load_aligned(tail)).store_aligned(tail);
  std::copy(tail, tail + (n - i), y + i);
}

// y = exp(x - shift) over one row, every element through xsimd's exp.
template <class T>
void exp_shifted(const T* x, T* y, std::size_t n, T shift) {
  const xsimd::batch<T> s(shift);
  map_row(x, y, n, [&s](xsimd::batch<T> v) { return xsimd::exp(v - s); });
}

// y = exp(x - m) over one row; returns the sum of y.
template <class T>
T exp_sum(const T* x, T* y, std::size_t n, T m) {
  rowops::exp_shifted(x, y, n, m);
  return rowops::sum(y, n);
}

// The ops that work over the last axis need one.
inline void check_last_axis(const Tensor& x, const char* op) {
  if (x.dim() == 0) throw std::invalid_argument(std::string(op) + ": needs a tensor of rank >= 1");
}

// Rows per parallel chunk: kElementsPerChunk elements' worth (parallel.hpp).
inline std::size_t grain(std::size_t cols) {
  return std::max<std::size_t>(1, kElementsPerChunk / std::max<std::size_t>(cols, 1));
}

}  // namespace attnlab::rowops
