// The labelled table pictures of framework/io/image.hpp (table_layout, write_table_png, short_number):
// the PNG decoded again with stb_image and its pixels compared with the layout and the table colours.
#include <gtest/gtest.h>
#include <stb/stb_image.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "framework/io/image.hpp"

namespace attnlab {
namespace {

struct Decoded {
  int width = 0, height = 0;
  std::vector<unsigned char> rgb;
  const unsigned char* at(int x, int y) const { return &rgb[(static_cast<std::size_t>(y) * width + x) * 3]; }
};

Decoded written(const TablePicture& picture) {
  const std::string path = ::testing::TempDir() + "attnlab_table.png";
  write_table_png(path, picture);
  Decoded d;
  int channels = 0;
  unsigned char* pixels = stbi_load(path.c_str(), &d.width, &d.height, &channels, 3);
  EXPECT_NE(pixels, nullptr) << stbi_failure_reason();
  if (pixels) d.rgb.assign(pixels, pixels + static_cast<std::size_t>(d.width) * d.height * 3);
  stbi_image_free(pixels);
  std::remove(path.c_str());
  return d;
}

// An ablation table as the analysis writes it: two layers by four heads, signed, one cell undefined.
TablePicture ablation() {
  return {"Loss change when the head is zeroed", "layer", "head", {"0", "1"}, {"0", "1", "2", "3"},
          {0.5, -0.8, 0.0, 0.25, NAN, 0.1, -0.2, 0.8}, true};
}

void expect_colour(const Decoded& d, int x, int y, double v, double m, bool signed_values) {
  unsigned char want[3];
  table_colour(v, m, signed_values, want);
  const unsigned char* got = d.at(x, y);
  EXPECT_TRUE(got[0] == want[0] && got[1] == want[1] && got[2] == want[2])
      << "at (" << x << ", " << y << ") for " << v << ": " << int(got[0]) << "," << int(got[1]) << "," << int(got[2]) << " instead of "
      << int(want[0]) << "," << int(want[1]) << "," << int(want[2]);
}

bool dark(const unsigned char* p) { return p[0] < 100 && p[1] < 100 && p[2] < 100; }
bool white(const unsigned char* p) { return p[0] == 255 && p[1] == 255 && p[2] == 255; }
bool inside(const PixelBox& b, int x, int y) { return x >= b.x && x < b.x + b.width && y >= b.y && y < b.y + b.height; }
int ink(const Decoded& d, const PixelBox& b) {
  int n = 0;
  for (int y = b.y; y < b.y + b.height; ++y)
    for (int x = b.x; x < b.x + b.width; ++x) n += dark(d.at(x, y));
  return n;
}

// Every labelled box of the layout, the grid and the colour bar among them.
std::vector<PixelBox> text_boxes(const TableLayout& l) {
  std::vector<PixelBox> boxes{l.row_axis, l.col_axis};
  for (const auto* list : {&l.title, &l.row_labels, &l.col_labels, &l.scale_labels}) boxes.insert(boxes.end(), list->begin(), list->end());
  return boxes;
}

// No two non-empty boxes share a pixel, and every box lies inside the picture.
void expect_apart_and_inside(const TableLayout& l) {
  std::vector<PixelBox> boxes = text_boxes(l);
  boxes.push_back(l.grid);
  boxes.push_back(l.colour_bar);
  for (std::size_t i = 0; i < boxes.size(); ++i) {
    const PixelBox& a = boxes[i];
    if (a.width == 0 || a.height == 0) continue;
    EXPECT_TRUE(a.x >= 0 && a.y >= 0 && a.x + a.width <= l.width && a.y + a.height <= l.height) << "box " << i << " leaves the picture";
    for (std::size_t j = i + 1; j < boxes.size(); ++j) {
      const PixelBox& b = boxes[j];
      const bool overlap = b.width > 0 && b.height > 0 && a.x < b.x + b.width && b.x < a.x + a.width && a.y < b.y + b.height && b.y < a.y + a.height;
      EXPECT_FALSE(overlap) << "boxes " << i << " (" << a.x << "," << a.y << " " << a.width << "x" << a.height << ") and " << j << " ("
                            << b.x << "," << b.y << " " << b.width << "x" << b.height << ") overlap";
    }
  }
}

TEST(TablePng, CellsAndColourBarAreTheTableColours) {
  const TablePicture p = ablation();
  const TableLayout l = table_layout(p);
  const Decoded d = written(p);
  ASSERT_EQ(d.width, l.width);
  ASSERT_EQ(d.height, l.height);
  EXPECT_GE(l.cell, 16);
  const double m = table_scale(p.values);
  for (std::size_t r = 0; r < 2; ++r)
    for (std::size_t c = 0; c < 4; ++c)
      expect_colour(d, l.grid.x + static_cast<int>(c) * l.cell + l.cell / 2, l.grid.y + static_cast<int>(r) * l.cell + l.cell / 2,
                    p.values[r * 4 + c], m, true);
  const unsigned char* undefined = d.at(l.grid.x + l.cell / 2, l.grid.y + l.cell + l.cell / 2);
  EXPECT_TRUE(undefined[0] == 190 && undefined[1] == 190 && undefined[2] == 190) << "a NaN cell is grey";
  const PixelBox& bar = l.colour_bar;
  expect_colour(d, bar.x + bar.width / 2, bar.y, m, m, true);
  expect_colour(d, bar.x + bar.width / 2, bar.y + (bar.height - 1) / 2, 0.0, m, true);
  expect_colour(d, bar.x + bar.width / 2, bar.y + bar.height - 1, -m, m, true);
  EXPECT_EQ(l.scale_texts, (std::vector<std::string>{"0.8", "0", "-0.8"}));
}

TEST(TablePng, UnsignedColourBarRunsFromTheLargestValueDownToZero) {
  TablePicture p = ablation();
  p.signed_values = false;
  p.values = {0.5, 12.8, 0.0, 3.0, 1.0, 2.0, 4.0, 5.0};
  const TableLayout l = table_layout(p);
  const Decoded d = written(p);
  expect_colour(d, l.colour_bar.x + 1, l.colour_bar.y, 12.8, 12.8, false);
  expect_colour(d, l.colour_bar.x + 1, l.colour_bar.y + l.colour_bar.height - 1, 0.0, 12.8, false);
  EXPECT_EQ(l.scale_texts, (std::vector<std::string>{"12.8", "0"}));
}

// The title, axis names and labels put ink in their boxes; nothing is drawn outside the boxes of the
// layout (a pixel of frame round the grid and the bar allowed), and the picture's
// margin stays white.
TEST(TablePng, TextIsDrawnInItsBoxesAndNowhereElse) {
  const TablePicture p = ablation();
  const TableLayout l = table_layout(p);
  const Decoded d = written(p);
  ASSERT_EQ(l.title.size(), 1u);
  EXPECT_GT(ink(d, l.title[0]), 100);
  EXPECT_GT(ink(d, l.row_axis), 20);
  EXPECT_GT(ink(d, l.col_axis), 20);
  for (const PixelBox& b : l.row_labels) EXPECT_GT(ink(d, b), 10);
  for (const PixelBox& b : l.col_labels) EXPECT_GT(ink(d, b), 10);
  for (const PixelBox& b : l.scale_labels) EXPECT_GT(ink(d, b), 10);
  std::vector<PixelBox> allowed = text_boxes(l);
  for (PixelBox b : {l.grid, l.colour_bar}) allowed.push_back({b.x - 1, b.y - 1, b.width + 2, b.height + 2});
  int stray = 0;
  for (int y = 0; y < d.height; ++y)
    for (int x = 0; x < d.width; ++x) {
      bool known = false;
      for (const PixelBox& b : allowed) known = known || inside(b, x, y);
      stray += !known && !white(d.at(x, y));
    }
  EXPECT_EQ(stray, 0);
  for (int x = 0; x < d.width; ++x) EXPECT_TRUE(white(d.at(x, 0)) && white(d.at(x, d.height - 1)));
  for (int y = 0; y < d.height; ++y) EXPECT_TRUE(white(d.at(0, y)) && white(d.at(d.width - 1, y)));
  expect_apart_and_inside(l);
}

TEST(TablePng, TheSmallTableLabelsEveryRowAndColumnAcross) {
  const TableLayout l = table_layout(ablation());
  EXPECT_EQ(l.row_labels.size(), 2u);
  EXPECT_EQ(l.col_labels.size(), 4u);
  EXPECT_FALSE(l.col_labels_upwards);
}

// A long label and a long title make the picture wider, never clipped: the title wraps, a label does not.
TEST(TablePng, LongLabelsAndTitlesGrowThePicture) {
  TablePicture p = ablation();
  const int width = table_layout(p).width;
  p.rows[1] = "after block 0 and a long row label of sixty characters or so";
  p.title = std::string(300, 'x') + " " + std::string(200, 'y') + " and more words";
  const TableLayout l = table_layout(p);
  EXPECT_GT(l.width, width);
  EXPECT_EQ(l.title_lines.size(), 3u);
  expect_apart_and_inside(l);
  const Decoded d = written(p);
  for (int y = 0; y < d.height; ++y) EXPECT_TRUE(white(d.at(0, y)) && white(d.at(d.width - 1, y)));
}

// 64 positions as columns (and as rows): cells of at least 8 px, every k-th label, none overlapping.
TEST(TablePng, ManyColumnsAndRowsThinTheirLabels) {
  TablePicture p;
  p.title = "Restored share of the logit difference, patching the residual stream at one position";
  p.row_axis = "layer", p.col_axis = "position";
  p.rows = {"0", "1", "2"};
  for (int i = 0; i < 64; ++i) p.cols.push_back(std::to_string(i) + " " + std::string(1, static_cast<char>('a' + i % 26)));
  p.values.assign(3 * 64, 0.5);
  p.signed_values = true;
  TableLayout l = table_layout(p);
  EXPECT_GE(l.cell, 8);
  EXPECT_GT(l.col_label_step, 1u);
  EXPECT_EQ(l.col_labels.size(), (64 + l.col_label_step - 1) / l.col_label_step);
  expect_apart_and_inside(l);
  std::swap(p.rows, p.cols);
  std::swap(p.row_axis, p.col_axis);
  l = table_layout(p);
  EXPECT_GE(l.cell, 8);
  EXPECT_GT(l.row_label_step, 1u);
  EXPECT_EQ(l.row_labels.size(), (64 + l.row_label_step - 1) / l.row_label_step);
  expect_apart_and_inside(l);
}

// A label's non-ASCII character ("␣", three bytes of UTF-8) is drawn as one '?'.
TEST(TablePng, CharactersBeyondAsciiAreDrawnAsQuestionMarks) {
  TablePicture spaced = ablation(), asked = ablation();
  spaced.cols[2] = "\xE2\x90\xA3";
  asked.cols[2] = "?";
  EXPECT_EQ(written(spaced).rgb, written(asked).rgb);
}

TEST(TablePng, ValuesThatDoNotFillTheTableAreAnError) {
  TablePicture p = ablation();
  p.values.pop_back();
  EXPECT_THROW(table_layout(p), std::invalid_argument);
  EXPECT_THROW(write_table_png(::testing::TempDir() + "attnlab_never.png", p), std::invalid_argument);
}

TEST(ShortNumber, WritesNumbersAsPeopleDo) {
  EXPECT_EQ(short_number(0.996), "0.996");
  EXPECT_EQ(short_number(12.8), "12.8");
  EXPECT_EQ(short_number(1000), "1000");
  EXPECT_EQ(short_number(-0.5), "-0.5");
  EXPECT_EQ(short_number(0.99999), "1");
  EXPECT_EQ(short_number(0.00123456), "0.00123");
  EXPECT_EQ(short_number(1.2e-05), "1.2e-05");
  EXPECT_EQ(short_number(0), "0");
  EXPECT_EQ(short_number(2.5e7), "2.5e+07");
}

}  // namespace
}  // namespace attnlab
