// PNG heatmaps of attention patterns and of analysis tables (table_png.cpp draws those with their axes),
// written with stb_image_write (Debian's libstb-dev).
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

// A table of values as a picture that reads on its own, as the report's tables do: the title on top, the
// column axis's name and the column labels above the grid, the row axis's name and the row labels on its
// left, square cells coloured by table_colour, and a colour bar on the right labelled at its ends (and at 0
// for signed values). Text is Debian's stb_easy_font; characters beyond printable ASCII are drawn as '?'.
struct TablePicture {
  std::string title;
  std::string row_axis, col_axis;        // "layer", "head"; an empty name is not drawn
  std::vector<std::string> rows, cols;   // the labels
  std::vector<double> values;            // rows x cols, row-major; NaN where undefined
  bool signed_values = false;
};

// A rectangle of the picture in pixels, x to the right and y down from the top-left corner.
struct PixelBox {
  int x = 0, y = 0, width = 0, height = 0;
};

// Where write_table_png puts everything, worked out before anything is drawn. When the cells are smaller
// than the labels, only every row_label_step-th row and col_label_step-th column is labelled, so that no
// two labels overlap; column labels are turned to read upwards unless each fits across its own cell.
struct TableLayout {
  int width = 0, height = 0;  // the whole picture
  int cell = 0;               // the side of a square cell
  std::vector<std::string> title_lines;
  std::vector<PixelBox> title;            // one box per line
  PixelBox grid, colour_bar, row_axis, col_axis;
  std::size_t row_label_step = 1, col_label_step = 1;
  bool col_labels_upwards = false;
  std::vector<PixelBox> row_labels, col_labels;  // of rows (columns) 0, step, 2 step, ...
  std::vector<std::string> scale_texts;          // the colour bar's values, top to bottom
  std::vector<PixelBox> scale_labels;
};
TableLayout table_layout(const TablePicture& picture);

// The picture above as a PNG file. Throws std::invalid_argument when the values do not fill rows x cols.
void write_table_png(const std::string& path, const TablePicture& picture);

// A number as people write it, with three significant digits and no exponent between 0.001 and 1e6
// ("0.996", "12.8", "1000", "-0.5"), otherwise in two ("1.2e-05").
std::string short_number(double v);

}  // namespace attnlab
