// Element types a Tensor can hold, and a dispatcher from the runtime tag to a C++ type.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace attnlab {

enum class DType : std::uint8_t {
  float32,  // the default: training and benchmarks
  float64,  // gradient checks
  int64,    // token ids, class targets, indices
  boolean,  // masks (stored as one byte per element)
};

std::size_t element_size(DType dtype);
const char* dtype_name(DType dtype);
bool is_floating(DType dtype);

template <class T>
struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::float32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::float64; };
template <> struct dtype_of<std::int64_t> { static constexpr DType value = DType::int64; };
template <> struct dtype_of<bool> { static constexpr DType value = DType::boolean; };

template <class T>
struct type_tag {
  using type = T;
};

// Calls f(type_tag<T>{}) for the floating type matching `dtype`; throws for other dtypes, naming `op`.
template <class F>
decltype(auto) dispatch_floating(DType dtype, const char* op, F&& f) {
  switch (dtype) {
    case DType::float32: return f(type_tag<float>{});
    case DType::float64: return f(type_tag<double>{});
    default:
      throw std::invalid_argument(std::string(op) + ": expected a float32 or float64 tensor, got " +
                                  dtype_name(dtype));
  }
}

}  // namespace attnlab
