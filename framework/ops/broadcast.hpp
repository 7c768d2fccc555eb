// Internal to ops: raw-pointer layouts. AxisSplit views a shape as [outer, n, inner] around one axis;
// BroadcastLoop iterates over broadcast operands. The shapes are aligned on the
// right, broadcast axes get stride 0, axes of size 1 are dropped and neighbouring axes that stay contiguous
// for every operand are merged, so the innermost loop is as long as possible and has stride 0 or 1 for
// each operand (the case compilers vectorise).
#pragma once

#include <array>
#include <cstddef>
#include <vector>

#include "framework/tensor/shape.hpp"

namespace attnlab::detail {

// A shape seen as [outer, n, inner] around `axis`: n is that axis, inner is contiguous.
struct AxisSplit {
  std::size_t outer = 1, n = 1, inner = 1;
};

inline AxisSplit split_at(const Shape& shape, std::size_t axis) {
  AxisSplit s;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i < axis) s.outer *= shape[i];
    if (i > axis) s.inner *= shape[i];
  }
  s.n = shape[axis];
  return s;
}

template <std::size_t N>
class BroadcastLoop {
 public:
  using Offsets = std::array<std::size_t, N>;
  using Strides = std::array<std::size_t, N>;

  // shapes[k] must broadcast to `shape` (operand 0 is usually the output, with `shape` itself).
  BroadcastLoop(const Shape& shape, const std::array<const Shape*, N>& shapes) {
    const std::size_t rank = shape.size();
    std::vector<Strides> strides(rank);
    for (std::size_t k = 0; k < N; ++k) {
      const Shape& s = *shapes[k];
      std::size_t stride = 1;
      for (std::size_t i = rank; i-- > 0;) {
        const std::size_t j = i + s.size();  // index into s, offset by rank (negative when missing)
        const std::size_t dim = j >= rank ? s[j - rank] : 1;
        strides[i][k] = (dim == 1) ? 0 : stride;
        stride *= dim;
      }
    }
    for (std::size_t i = 0; i < rank; ++i) {
      if (shape[i] == 0) empty_ = true;
      if (shape[i] == 1) continue;
      if (!dims_.empty()) {
        bool mergeable = true;
        for (std::size_t k = 0; k < N; ++k) mergeable &= strides_.back()[k] == strides[i][k] * shape[i];
        if (mergeable) {
          dims_.back() *= shape[i];
          strides_.back() = strides[i];
          continue;
        }
      }
      dims_.push_back(shape[i]);
      strides_.push_back(strides[i]);
    }
    if (dims_.empty()) {
      dims_.push_back(1);
      strides_.push_back(Strides{});
    }
  }

  // Calls row(offsets, n, inner_strides) for every innermost run; offsets are element offsets of each
  // operand, inner_strides are 0 or 1.
  template <class F>
  void run(F&& row) const {
    if (empty_) return;
    const std::size_t outer_rank = dims_.size() - 1;
    const std::size_t inner = dims_.back();
    std::vector<std::size_t> counter(outer_rank, 0);
    Offsets offsets{};
    while (true) {
      row(offsets, inner, strides_.back());
      // Advance the multi-index over the outer axes, last axis fastest.
      std::size_t axis = outer_rank;
      while (axis > 0) {
        --axis;
        for (std::size_t k = 0; k < N; ++k) offsets[k] += strides_[axis][k];
        if (++counter[axis] < dims_[axis]) break;
        for (std::size_t k = 0; k < N; ++k) offsets[k] -= strides_[axis][k] * dims_[axis];
        counter[axis] = 0;
        if (axis == 0) return;
      }
      if (outer_rank == 0) return;
    }
  }

 private:
  std::vector<std::size_t> dims_;
  std::vector<Strides> strides_;
  bool empty_ = false;
};

}  // namespace attnlab::detail
