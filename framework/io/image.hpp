// PNG heatmaps of attention patterns, written with stb_image_write (Debian's libstb-dev).
#pragma once

#include <string>

#include "framework/tensor/tensor.hpp"

namespace attnlab {

// patterns [layers, heads, queries, keys] (values in [0, 1]) as one PNG: a row of heads per layer, each
// pattern drawn with square cells (queries down, keys across) on the viridis colour scale of sqrt(value),
// so that small weights stay visible. Throws on a write failure.
void write_pattern_png(const std::string& path, const Tensor& patterns);

// One pattern (rows x cols, row-major) as PNG bytes, a pixel per cell, same colour scale; for reports
// that embed it and draw their own axes.
std::string encode_pattern_png(const double* pattern, std::size_t rows, std::size_t cols);

// The viridis colour of t in [0, 1] (clamped) as rgb[0..2].
void viridis(double t, unsigned char* rgb);

}  // namespace attnlab
