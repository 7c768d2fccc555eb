// PNG heatmaps of attention patterns, written with stb_image_write (Debian's libstb-dev).
#pragma once

#include <string>

#include "framework/tensor/tensor.hpp"

namespace attnlab {

// patterns [layers, heads, queries, keys] (values in [0, 1]) as one PNG: a row of heads per layer, each
// pattern drawn with square cells (queries down, keys across) on the viridis colour scale of sqrt(value),
// so that small weights stay visible. Throws on a write failure.
void write_pattern_png(const std::string& path, const Tensor& patterns);

}  // namespace attnlab
