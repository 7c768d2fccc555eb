#include "framework/io/image.hpp"

#include <stb/stb_image_write.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "framework/io/atomic_file.hpp"

namespace attnlab {
std::string encode_rgb_png(const std::vector<unsigned char>& rgb, std::size_t width, std::size_t height) {
  std::string png;
  auto append = [](void* context, void* data, int size) {
    static_cast<std::string*>(context)->append(static_cast<const char*>(data), static_cast<std::size_t>(size));
  };
  if (!stbi_write_png_to_func(append, &png, static_cast<int>(width), static_cast<int>(height), 3, rgb.data(),
                              static_cast<int>(width * 3))) {
    throw std::runtime_error("cannot encode a " + std::to_string(height) + "x" + std::to_string(width) + " image as PNG");
  }
  return png;
}

// Viridis at five stops, interpolated linearly.
void viridis(double t, unsigned char* rgb) {
  static const double stops[5][3] = {{68, 1, 84}, {59, 82, 139}, {33, 145, 140}, {94, 201, 98}, {253, 231, 37}};
  t = std::clamp(t, 0.0, 1.0) * 4.0;
  const int i = std::min(3, static_cast<int>(t));
  const double f = t - i;
  for (int c = 0; c < 3; ++c) rgb[c] = static_cast<unsigned char>(stops[i][c] + f * (stops[i + 1][c] - stops[i][c]));
}

PatternScale pattern_scale(const double* pattern, std::size_t n) {
  PatternScale scale;
  double largest = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (!std::isfinite(pattern[i])) continue;
    largest = std::max(largest, std::fabs(pattern[i]));
    if (pattern[i] < 0) scale.signed_values = true;
  }
  // Weights of a distribution keep the absolute scale [0, 1]; other mixing is scaled by its largest magnitude.
  scale.magnitude = scale.signed_values || largest > 1 ? largest : 1.0;
  if (scale.magnitude == 0) scale.magnitude = 1;
  return scale;
}

void pattern_colour(double v, const PatternScale& scale, unsigned char* rgb) {
  if (!std::isfinite(v)) {
    rgb[0] = rgb[1] = rgb[2] = 190;
    return;
  }
  const double t = std::sqrt(std::fabs(v) / scale.magnitude);
  if (scale.signed_values) {
    diverging(v < 0 ? -t : t, rgb);
  } else {
    viridis(t, rgb);
  }
}

void write_pattern_png(const std::string& path, const Tensor& patterns) {
  if (patterns.dim() != 4) throw std::invalid_argument("write_pattern_png: expected [layers, heads, queries, keys], got " + shape_str(patterns.shape()));
  const std::size_t layers = patterns.size(0), heads = patterns.size(1), tq = patterns.size(2), tk = patterns.size(3);
  const std::size_t scale = std::max<std::size_t>(1, 96 / std::max<std::size_t>(1, std::max(tq, tk)));  // cells of at least 1 px
  const std::size_t gap = 4, cell_w = tk * scale, cell_h = tq * scale;
  const std::size_t width = heads * cell_w + (heads + 1) * gap, height = layers * cell_h + (layers + 1) * gap;
  std::vector<unsigned char> image(width * height * 3, 255);  // white background between panels
  const std::vector<double> v = patterns.to_vector();
  for (std::size_t l = 0; l < layers; ++l)
    for (std::size_t h = 0; h < heads; ++h) {
      const std::size_t x0 = gap + h * (cell_w + gap), y0 = gap + l * (cell_h + gap);
      const double* panel = v.data() + (l * heads + h) * tq * tk;
      const PatternScale colours = pattern_scale(panel, tq * tk);
      for (std::size_t i = 0; i < tq; ++i)
        for (std::size_t j = 0; j < tk; ++j) {
          unsigned char rgb[3];
          pattern_colour(panel[i * tk + j], colours, rgb);
          for (std::size_t dy = 0; dy < scale; ++dy)
            for (std::size_t dx = 0; dx < scale; ++dx) {
              unsigned char* px = image.data() + ((y0 + i * scale + dy) * width + x0 + j * scale + dx) * 3;
              px[0] = rgb[0], px[1] = rgb[1], px[2] = rgb[2];
            }
        }
    }
  write_file_atomically(path, encode_rgb_png(image, width, height));
}

std::string encode_pattern_png(const double* pattern, std::size_t rows, std::size_t cols) {
  std::vector<unsigned char> image(rows * cols * 3);
  const PatternScale colours = pattern_scale(pattern, rows * cols);
  for (std::size_t i = 0; i < rows * cols; ++i) pattern_colour(pattern[i], colours, image.data() + 3 * i);
  return encode_rgb_png(image, cols, rows);
}

void diverging(double t, unsigned char* rgb) {
  static const double stops[5][3] = {{33, 102, 172}, {146, 197, 222}, {247, 247, 247}, {244, 165, 130}, {178, 24, 43}};
  t = (std::clamp(t, -1.0, 1.0) + 1.0) * 2.0;
  const int i = std::min(3, static_cast<int>(t));
  const double f = t - i;
  for (int c = 0; c < 3; ++c) rgb[c] = static_cast<unsigned char>(stops[i][c] + f * (stops[i + 1][c] - stops[i][c]));
}

double table_scale(const std::vector<double>& values) {
  double m = 0;
  for (double v : values)
    if (std::isfinite(v)) m = std::max(m, std::fabs(v));
  return m == 0 ? 1 : m;
}

void table_colour(double v, double scale, bool signed_values, unsigned char* rgb) {
  if (!std::isfinite(v)) rgb[0] = rgb[1] = rgb[2] = 190;
  else if (signed_values) diverging(v / scale, rgb);
  else viridis(v / scale, rgb);
}

}  // namespace attnlab
