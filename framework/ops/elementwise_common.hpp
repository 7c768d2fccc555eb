// Internal to ops: what the elementwise ops of elementwise.cpp and gelu.cpp share, the size of their
// parallel chunks and the check that two operands share a dtype.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>

#include "framework/tensor/tensor.hpp"

namespace attnlab::detail {

// Elements per parallel chunk of an elementwise loop.
inline constexpr std::size_t kGrain = std::size_t{1} << 15;

inline void check_same_dtype(const Tensor& a, const Tensor& b, const char* op) {
  if (a.dtype() != b.dtype()) {
    throw std::invalid_argument(std::string(op) + ": operands have different dtypes (" + dtype_name(a.dtype()) +
                                " and " + dtype_name(b.dtype()) + "); convert one with .to()");
  }
}

}  // namespace attnlab::detail
