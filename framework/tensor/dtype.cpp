#include "framework/tensor/dtype.hpp"

namespace attnlab {

std::size_t element_size(DType dtype) {
  switch (dtype) {
    case DType::float32: return 4;
    case DType::float64: return 8;
    case DType::int64: return 8;
    case DType::boolean: return 1;
  }
  return 0;
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::float32: return "float32";
    case DType::float64: return "float64";
    case DType::int64: return "int64";
    case DType::boolean: return "bool";
  }
  return "?";
}

bool is_floating(DType dtype) { return dtype == DType::float32 || dtype == DType::float64; }

}  // namespace attnlab
