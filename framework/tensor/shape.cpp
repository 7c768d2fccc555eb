#include "framework/tensor/shape.hpp"

#include <limits>
#include <stdexcept>

namespace attnlab {

std::size_t shape_numel(const Shape& shape) {
  std::size_t n = 1;
  bool empty = false;
  for (std::size_t d : shape) empty |= d == 0;
  if (empty) return 0;
  for (std::size_t d : shape) {
    if (n > std::numeric_limits<std::size_t>::max() / d) {
      throw std::length_error("shape " + shape_str(shape) + " has more elements than fit in memory");
    }
    n *= d;
  }
  return n;
}

std::string shape_str(const Shape& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

std::vector<std::size_t> contiguous_strides(const Shape& shape) {
  std::vector<std::size_t> strides(shape.size());
  std::size_t s = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    s *= shape[i];
  }
  return strides;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  const std::size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (std::size_t i = 0; i < rank; ++i) {
    const std::size_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    const std::size_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1) {
      throw std::invalid_argument(std::string(op) + ": shapes " + shape_str(a) + " and " + shape_str(b) +
                                  " do not broadcast (axis " + std::to_string(i) + ": " +
                                  std::to_string(da) + " vs " + std::to_string(db) + ")");
    }
    out[i] = da == 1 ? db : da;
  }
  return out;
}

std::size_t normalize_axis(std::int64_t axis, std::size_t rank, const char* op) {
  const auto r = static_cast<std::int64_t>(rank);
  if (axis < -r || axis >= r) {
    throw std::out_of_range(std::string(op) + ": axis " + std::to_string(axis) +
                            " is out of range for a tensor of rank " + std::to_string(rank));
  }
  return static_cast<std::size_t>(axis < 0 ? axis + r : axis);
}

}  // namespace attnlab
