// PNG heatmaps of attention patterns, written with stb_image_write (Debian's libstb-dev).
#pragma once

#include <string>
#include <vector>

#include "framework/tensor/tensor.hpp"

namespace attnlab {

// How a pattern's cells are coloured: a pattern of weights in [0, 1] (softmax-family kernels) on viridis
// of sqrt(value), so that small weights stay visible; a signed one (the mixing of recurrent kernels,
// Linformer) on the diverging scale of sign x sqrt(|value| / m), blue negative, red positive, m its
// largest magnitude; an unsigned one beyond 1 on viridis of sqrt(value / m).
struct PatternScale {
  bool signed_values = false;
  double magnitude = 1;
};
PatternScale pattern_scale(const double* pattern, std::size_t n);
void pattern_colour(double v, const PatternScale& scale, unsigned char* rgb);

// patterns [layers, heads, queries, keys] as one PNG: a row of heads per layer, each pattern drawn with
// square cells (queries down, keys across), coloured as above per pattern. Throws on a write failure.
void write_pattern_png(const std::string& path, const Tensor& patterns);

// One pattern (rows x cols, row-major) as PNG bytes, a pixel per cell, coloured as above; for reports
// that embed it and draw their own axes.
std::string encode_pattern_png(const double* pattern, std::size_t rows, std::size_t cols);

// The viridis colour of t in [0, 1] (clamped) as rgb[0..2].
void viridis(double t, unsigned char* rgb);
// A diverging colour for t in [-1, 1] (clamped): blue below 0, white at 0, red above (ColorBrewer's RdBu).
void diverging(double t, unsigned char* rgb);

// RGB rows of `width` pixels (3 bytes each) as PNG bytes.
std::string encode_rgb_png(const std::vector<unsigned char>& rgb, std::size_t width, std::size_t height);

// The colours of a table of values (the PNG below and the reports' SVG tables alike): signed values on
// the diverging scale over [-m, m], others on viridis over [0, m], m = table_scale(values), the largest
// finite magnitude (1 when there is none); non-finite cells grey.
double table_scale(const std::vector<double>& values);
void table_colour(double v, double scale, bool signed_values, unsigned char* rgb);

// A table (rows x cols, row-major) as a PNG heatmap with `cell`-pixel square cells, coloured as above.
void write_table_png(const std::string& path, const std::vector<double>& values, std::size_t rows, std::size_t cols, bool signed_values,
                     std::size_t cell = 16);

}  // namespace attnlab
