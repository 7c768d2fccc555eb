// framework/ops/simd.hpp and the row kernels on it: sums and dots against a double loop, their bits the
// same wherever the row lies in memory and equal to the documented fold (lanes, then halves), maxima that
// never pick NaN, transposes of every shape up to two blocks, and the delta rule's double shares.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "framework/attention/recurrent/chunk_blocks.hpp"
#include "framework/ops/row_kernels.hpp"
#include "framework/ops/simd.hpp"

namespace attnlab {
namespace {

template <class T>
std::vector<T> normals(std::size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> normal;
  std::vector<T> x(n);
  for (T& v : x) v = static_cast<T>(normal(gen));
  return x;
}

// The sum as simd.hpp says it is taken: lane l adds elements l, l + W, ... of the whole vectors, the lanes
// fold in halves (lane l with l + W/2, then l + W/4, ...), then the tail is added in order.
template <class T>
T documented_sum(const std::vector<T>& x) {
  constexpr std::size_t W = simd::kLanes<T>;
  std::vector<T> lanes(W, T(0));
  std::size_t i = 0;
  for (; i + W <= x.size(); i += W)
    for (std::size_t l = 0; l < W; ++l) lanes[l] += x[i + l];
  for (std::size_t half = W / 2; half >= 1; half /= 2) {
    std::vector<T> folded(W);
    for (std::size_t l = 0; l < W; ++l) folded[l] = lanes[l] + lanes[(l + half) % W];
    lanes = folded;
  }
  T s = lanes[0];
  for (; i < x.size(); ++i) s += x[i];
  return s;
}

template <class T>
void expect_sums_are_the_fold() {
  for (const std::size_t n : {0, 1, 3, 15, 16, 17, 31, 64, 100, 1000}) {
    const std::vector<T> x = normals<T>(n, 7 + static_cast<unsigned>(n));
    const T got = simd::sum(x.data(), n);
    EXPECT_EQ(got, documented_sum(x)) << "n " << n;
    double exact = 0;
    for (const T v : x) exact += static_cast<double>(v);
    EXPECT_NEAR(static_cast<double>(got), exact, 1e-5 * (1.0 + static_cast<double>(n))) << "n " << n;
    // The same row at every offset of a buffer (so at every alignment): the same bits.
    std::vector<T> buffer(n + 32);
    for (std::size_t offset = 0; offset < 16; ++offset) {
      std::copy(x.begin(), x.end(), buffer.begin() + static_cast<std::ptrdiff_t>(offset));
      EXPECT_EQ(simd::sum(buffer.data() + offset, n), got) << "n " << n << ", offset " << offset;
    }
  }
}

TEST(Simd, SumsAreTheDocumentedFoldWhereverTheRowLies) {
  expect_sums_are_the_fold<float>();
  expect_sums_are_the_fold<double>();
}

TEST(Simd, DotsAndRowKernelsAgreeWithADoubleLoop) {
  for (const std::size_t n : {1, 5, 16, 33, 64, 257}) {
    const std::vector<float> x = normals<float>(n, 1), y = normals<float>(n, 2);
    double dot = 0, sum = 0, max = -std::numeric_limits<double>::infinity();
    for (std::size_t i = 0; i < n; ++i) dot += double(x[i]) * double(y[i]), sum += x[i], max = std::max(max, double(x[i]));
    EXPECT_NEAR(simd::dot(x.data(), y.data(), n), dot, 1e-5 * static_cast<double>(n)) << "n " << n;
    EXPECT_NEAR(rowops::dot(x.data(), y.data(), n), dot, 1e-5 * static_cast<double>(n)) << "n " << n;
    EXPECT_NEAR(rowops::sum(x.data(), n), sum, 1e-5 * static_cast<double>(n)) << "n " << n;
    EXPECT_EQ(rowops::max(x.data(), n), static_cast<float>(max)) << "n " << n;
  }
}

// As `x[i] > m ? x[i] : m` in order did: a NaN never becomes the maximum, wherever it lies (in a whole
// vector or in the tail); a row of NaN alone gives -inf.
TEST(Simd, RowMaximaNeverPickNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const std::size_t n : {3, 16, 40}) {
    std::vector<float> x = normals<float>(n, 3);
    float want = -std::numeric_limits<float>::infinity();
    for (std::size_t i = 0; i < n; ++i) {
      if (i % 3 == 1) x[i] = nan;
      else want = std::max(want, x[i]);
    }
    EXPECT_EQ(rowops::max(x.data(), n), want) << "n " << n;
  }
  const std::vector<float> all(20, nan);
  EXPECT_EQ(rowops::max(all.data(), all.size()), -std::numeric_limits<float>::infinity());
}

template <class T>
void expect_transposes() {
  for (std::size_t rows = 1; rows <= 19; ++rows)
    for (std::size_t cols = 1; cols <= 19; ++cols) {
      const std::vector<T> src = normals<T>(rows * cols, static_cast<unsigned>(rows * 31 + cols));
      const std::size_t ld = rows + 3;
      std::vector<T> dst(cols * ld, T(-7));
      simd::transpose(src.data(), rows, cols, dst.data(), ld);
      for (std::size_t j = 0; j < cols; ++j) {
        for (std::size_t i = 0; i < rows; ++i) ASSERT_EQ(dst[j * ld + i], src[i * cols + j]) << rows << " x " << cols << " at " << i << ", " << j;
        for (std::size_t i = rows; i < ld; ++i) ASSERT_EQ(dst[j * ld + i], T(-7)) << "wrote past the block: " << rows << " x " << cols;
      }
    }
}

TEST(Simd, TransposesEveryShapeAndWritesNothingElse) {
  expect_transposes<float>();  // 8 x 8 register blocks and their edges
  expect_transposes<double>();
}

// chunk_blocks::shares: the products a_j b_j for j < end in double, each added to its column, their sum
// returned; nothing at or past `end` is touched.
TEST(Simd, DecayGradientSharesAreDoubleProducts) {
  for (const std::size_t end : {0, 1, 7, 8, 9, 31, 32}) {
    const std::vector<float> a = normals<float>(32, 4), b = normals<float>(32, 5);
    std::vector<double> column(32, 0.5), want(32, 0.5);
    double sum = 0;
    for (std::size_t j = 0; j < end; ++j) {
      const double share = double(a[j]) * double(b[j]);
      sum += share;
      want[j] += share;
    }
    EXPECT_NEAR(chunk_blocks::shares(a.data(), b.data(), end, column.data()), sum, 1e-14 * (1.0 + std::abs(sum))) << "end " << end;
    for (std::size_t j = 0; j < 32; ++j) EXPECT_EQ(column[j], want[j]) << "end " << end << ", column " << j;
  }
}

}  // namespace
}  // namespace attnlab
