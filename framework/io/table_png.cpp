// Analysis tables as labelled PNG pictures (image.hpp's TablePicture): where everything goes is worked
// out first (table_layout), then drawn into an RGB buffer, the text rasterised from the quads of Debian's
// stb_easy_font.
#include "framework/io/image.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "framework/io/atomic_file.hpp"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"  // the header's helpers are static, and not all are used
#include <stb/stb_easy_font.h>
#pragma GCC diagnostic pop

namespace attnlab {
namespace {

constexpr int kScale = 2;                   // font units to pixels: capitals 14 px high
constexpr int kTextHeight = 9 * kScale;     // a line's ink, descenders included
constexpr int kLinePitch = 11 * kScale;     // from one title line to the next
constexpr int kMargin = 12, kGap = 6, kBarWidth = 14;
constexpr int kTitleWidth = 480;            // titles wrap at this width, or at the picture's when wider
constexpr unsigned char kInk[3] = {40, 40, 40}, kFrame[3] = {150, 150, 150};

// The text as stb_easy_font can draw it: printable ASCII kept, any other character made '?' (a UTF-8
// sequence counts as one character).
std::string printable(const std::string& text) {
  std::string out;
  for (unsigned char c : text) {
    if (c >= 32 && c < 127) out += static_cast<char>(c);
    else if ((c & 0xC0) != 0x80) out += '?';  // a continuation byte belongs to the '?' of its sequence
  }
  return out;
}

// stb_easy_font with its letters half a unit closer than its default, as its author suggests for a font
// drawn larger; set once, before the first use.
void use_font() {
  static const bool tightened = (stb_easy_font_spacing(-0.5f), true);
  (void)tightened;
}

int text_width(const std::string& text) {
  use_font();
  std::string t = printable(text);
  return stb_easy_font_width(t.data()) * kScale;
}

// The words of `text` in lines no wider than `width` pixels; a longer word has a line of its own.
std::vector<std::string> wrap(const std::string& text, int width) {
  std::vector<std::string> lines;
  std::string word, line;
  auto add_word = [&] {
    if (word.empty()) return;
    if (!line.empty() && text_width(line + " " + word) > width) lines.push_back(line), line.clear();
    line += (line.empty() ? "" : " ") + word;
    word.clear();
  };
  for (char c : text) {
    if (c == ' ') add_word();
    else word += c;
  }
  add_word();
  if (!line.empty()) lines.push_back(line);
  return lines;
}

// Every how many cells a label `extent` pixels long (along the axis) has room.
std::size_t label_step(int extent, int cell) { return static_cast<std::size_t>(std::max(1, (extent + cell - 1) / cell)); }

// The row labels right-aligned left of the grid, each centred on its row; and the row axis's name above them.
void lay_out_rows(const TablePicture& p, TableLayout& l) {
  l.row_label_step = label_step(kTextHeight + 2, l.cell);
  for (std::size_t r = 0; r < p.rows.size(); r += l.row_label_step) {
    const int w = text_width(p.rows[r]);
    l.row_labels.push_back({-kGap - w, static_cast<int>(r) * l.cell + l.cell / 2 - kTextHeight / 2, w, kTextHeight});
  }
  const int w = text_width(p.row_axis);
  l.row_axis = {-kGap - w, -kGap - kTextHeight, w, p.row_axis.empty() ? 0 : kTextHeight};
}

// The column labels above the grid, across when each fits its own cell, else reading upwards (and every
// k-th when the cells are smaller than a line); the column axis's name centred above them.
void lay_out_cols(const TablePicture& p, TableLayout& l) {
  int widest = 0;
  for (const std::string& c : p.cols) widest = std::max(widest, text_width(c));
  l.col_labels_upwards = widest + 4 > l.cell;
  l.col_label_step = label_step(l.col_labels_upwards ? kTextHeight + 2 : widest + 4, l.cell);
  for (std::size_t c = 0; c < p.cols.size(); c += l.col_label_step) {
    const int w = text_width(p.cols[c]), centre = static_cast<int>(c) * l.cell + l.cell / 2;
    l.col_labels.push_back(l.col_labels_upwards ? PixelBox{centre - kTextHeight / 2, -kGap - w, kTextHeight, w}
                                                : PixelBox{centre - w / 2, -kGap - kTextHeight, w, kTextHeight});
  }
  const int band = l.col_labels_upwards ? widest : kTextHeight, w = text_width(p.col_axis);
  l.col_axis = {l.grid.width / 2 - w / 2, -2 * kGap - band - kTextHeight, w, p.col_axis.empty() ? 0 : kTextHeight};
}

// The colour bar right of the grid (at least four lines high), its values beside its ends and middle; an
// odd number of pixels high, so that its middle row is exactly 0 on a signed scale.
void lay_out_colour_bar(const TablePicture& p, TableLayout& l) {
  const int height = std::max(l.grid.height, 4 * kTextHeight);
  l.colour_bar = {l.grid.width + 3 * kGap, 0, kBarWidth, height % 2 ? height : height - 1};
  const double m = table_scale(p.values);
  l.scale_texts = {short_number(m), "0"};
  if (p.signed_values) l.scale_texts.push_back(short_number(-m));
  for (std::size_t i = 0; i < l.scale_texts.size(); ++i) {
    const int at = static_cast<int>(i) * (l.colour_bar.height - 1) / static_cast<int>(l.scale_texts.size() - 1);
    const int w = text_width(l.scale_texts[i]);
    l.scale_labels.push_back({l.colour_bar.x + kBarWidth + kGap, at - kTextHeight / 2, w, kTextHeight});
  }
}

std::vector<PixelBox*> every_box(TableLayout& l) {
  std::vector<PixelBox*> boxes{&l.grid, &l.colour_bar, &l.row_axis, &l.col_axis};
  for (auto* list : {&l.title, &l.row_labels, &l.col_labels, &l.scale_labels})
    for (PixelBox& b : *list) boxes.push_back(&b);
  return boxes;
}

// The title's lines above everything else, wrapped to the width of the rest (kTitleWidth at least); then
// everything moved so that the picture starts at (0, 0) with a margin all round.
void lay_out_title_and_frame(const TablePicture& p, TableLayout& l) {
  int left = 0, top = 0, right = 0, bottom = 0;
  for (const PixelBox* b : every_box(l)) {
    if (b->width == 0 || b->height == 0) continue;
    left = std::min(left, b->x), top = std::min(top, b->y);
    right = std::max(right, b->x + b->width), bottom = std::max(bottom, b->y + b->height);
  }
  l.title_lines = wrap(printable(p.title), std::max(kTitleWidth, right - left));
  for (std::size_t i = 0; i < l.title_lines.size(); ++i) {
    const int w = text_width(l.title_lines[i]);
    l.title.push_back({left, top - 2 * kGap - static_cast<int>(l.title_lines.size() - i) * kLinePitch, w, kTextHeight});
    right = std::max(right, left + w);
  }
  if (!l.title.empty()) top = l.title.front().y;
  for (PixelBox* b : every_box(l)) b->x += kMargin - left, b->y += kMargin - top;
  l.width = right - left + 2 * kMargin;
  l.height = bottom - top + 2 * kMargin;
}

// An RGB picture on a white background; fills are clipped to it.
struct Canvas {
  int width, height;
  std::vector<unsigned char> rgb;
  Canvas(int w, int h) : width(w), height(h), rgb(static_cast<std::size_t>(w) * h * 3, 255) {}
  void fill(int x, int y, int w, int h, const unsigned char* colour) {
    for (int yy = std::max(0, y); yy < std::min(height, y + h); ++yy)
      for (int xx = std::max(0, x); xx < std::min(width, x + w); ++xx) std::memcpy(&rgb[(static_cast<std::size_t>(yy) * width + xx) * 3], colour, 3);
  }
};

// `text` in `box` (as text_width and kTextHeight measure it), across or reading upwards: each of
// stb_easy_font's quads is a rectangle of font units (halves across, whole units down), filled kScale
// times larger.
void draw_text(Canvas& canvas, const std::string& text, const PixelBox& box, bool upwards = false) {
  use_font();
  std::string t = printable(text);
  std::vector<char> quads(64 * 16 * (t.size() + 1));  // at most 11 quads of 4 vertices (x, y, z, colour) per character
  const int n = stb_easy_font_print(0, 0, t.data(), nullptr, quads.data(), static_cast<int>(quads.size()));
  for (int q = 0; q < n; ++q) {
    float corner[10];  // vertex 0 at floats 0..1, the opposite vertex 2 at floats 8..9
    std::memcpy(corner, quads.data() + 64 * q, sizeof corner);
    const int u0 = static_cast<int>(std::lround(corner[0] * kScale)), v0 = static_cast<int>(std::lround(corner[1] * kScale));
    const int u1 = static_cast<int>(std::lround(corner[8] * kScale)), v1 = static_cast<int>(std::lround(corner[9] * kScale));
    if (upwards) canvas.fill(box.x + v0, box.y + box.height - u1, v1 - v0, u1 - u0, kInk);
    else canvas.fill(box.x + u0, box.y + v0, u1 - u0, v1 - v0, kInk);
  }
}

void draw_frame(Canvas& canvas, const PixelBox& b) { canvas.fill(b.x - 1, b.y - 1, b.width + 2, b.height + 2, kFrame); }

// The cells, then the colour bar from m at the top to -m (or 0) at the bottom.
void draw_colours(Canvas& canvas, const TablePicture& p, const TableLayout& l) {
  const double m = table_scale(p.values), top = m, bottom = p.signed_values ? -m : 0.0;
  unsigned char rgb[3];
  draw_frame(canvas, l.grid);
  for (std::size_t r = 0; r < p.rows.size(); ++r)
    for (std::size_t c = 0; c < p.cols.size(); ++c) {
      table_colour(p.values[r * p.cols.size() + c], m, p.signed_values, rgb);
      canvas.fill(l.grid.x + static_cast<int>(c) * l.cell, l.grid.y + static_cast<int>(r) * l.cell, l.cell, l.cell, rgb);
    }
  const PixelBox& bar = l.colour_bar;
  draw_frame(canvas, bar);
  for (int y = 0; y < bar.height; ++y) {
    table_colour(top - (top - bottom) * y / std::max(1, bar.height - 1), m, p.signed_values, rgb);
    canvas.fill(bar.x, bar.y + y, bar.width, 1, rgb);
  }
}

}  // namespace

std::string short_number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (v == 0) return "0";
  char text[32];
  const double magnitude = std::fabs(v);
  if (magnitude < 1e-3 || magnitude >= 1e6) {
    std::snprintf(text, sizeof text, "%.2g", v);
    return text;
  }
  const int decimals = std::max(0, 2 - static_cast<int>(std::floor(std::log10(magnitude))));
  std::snprintf(text, sizeof text, "%.*f", decimals, v);
  std::string s = text;
  if (s.find('.') != std::string::npos) {
    s.erase(s.find_last_not_of('0') + 1);
    if (s.back() == '.') s.pop_back();
  }
  return s;
}

TableLayout table_layout(const TablePicture& p) {
  const std::size_t rows = p.rows.size(), cols = p.cols.size();
  if (p.values.size() != rows * cols || rows == 0 || cols == 0) {
    throw std::invalid_argument("write_table_png: " + std::to_string(p.values.size()) + " values for a " + std::to_string(rows) + "x" +
                                std::to_string(cols) + " table");
  }
  TableLayout l;
  l.cell = std::clamp(640 / static_cast<int>(std::max(rows, cols)), 8, 32);  // 32 px for a few layers and heads, 10 px for 64 positions
  l.grid = {0, 0, static_cast<int>(cols) * l.cell, static_cast<int>(rows) * l.cell};
  lay_out_rows(p, l);
  lay_out_cols(p, l);
  lay_out_colour_bar(p, l);
  lay_out_title_and_frame(p, l);
  return l;
}

void write_table_png(const std::string& path, const TablePicture& picture) {
  const TableLayout l = table_layout(picture);
  Canvas canvas(l.width, l.height);
  draw_colours(canvas, picture, l);
  for (std::size_t i = 0; i < l.title.size(); ++i) draw_text(canvas, l.title_lines[i], l.title[i]);
  draw_text(canvas, picture.row_axis, l.row_axis);
  draw_text(canvas, picture.col_axis, l.col_axis);
  for (std::size_t k = 0; k < l.row_labels.size(); ++k) draw_text(canvas, picture.rows[k * l.row_label_step], l.row_labels[k]);
  for (std::size_t k = 0; k < l.col_labels.size(); ++k)
    draw_text(canvas, picture.cols[k * l.col_label_step], l.col_labels[k], l.col_labels_upwards);
  for (std::size_t k = 0; k < l.scale_labels.size(); ++k) draw_text(canvas, l.scale_texts[k], l.scale_labels[k]);
  write_file_atomically(path, encode_rgb_png(canvas.rgb, static_cast<std::size_t>(l.width), static_cast<std::size_t>(l.height)));
}

}  // namespace attnlab
