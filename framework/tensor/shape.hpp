// Shapes: row-major, any rank (rank 0 is a scalar); numpy broadcasting rules; axis normalisation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace attnlab {

using Shape = std::vector<std::size_t>;

std::size_t shape_numel(const Shape& shape);
std::string shape_str(const Shape& shape);
// Row-major element strides of a contiguous array with this shape.
std::vector<std::size_t> contiguous_strides(const Shape& shape);
// numpy broadcasting of two shapes; throws naming `op` and both shapes when they do not broadcast.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);
// Maps a possibly negative axis into [0, rank); throws naming `op` when out of range.
std::size_t normalize_axis(std::int64_t axis, std::size_t rank, const char* op);

}  // namespace attnlab
