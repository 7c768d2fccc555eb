// Per-head pattern metrics on patterns whose answers are known.
#include <gtest/gtest.h>

#include <cmath>

#include "experiments/runner/patterns.hpp"

namespace attnlab {
namespace {

std::vector<double> one_hot_rows(std::size_t n, std::size_t (*column)(std::size_t, std::size_t)) {
  std::vector<double> p(n * n, 0.0);
  for (std::size_t i = 0; i < n; ++i) p[i * n + column(i, n)] = 1.0;
  return p;
}

TEST(PatternMetrics, DiagonalAntiDiagonalAndPreviousToken) {
  const auto diagonal = one_hot_rows(4, [](std::size_t i, std::size_t) { return i; });
  HeadMetrics m = head_metrics(diagonal.data(), 4, 4, {});
  EXPECT_DOUBLE_EQ(m.diagonal, 1.0);
  EXPECT_DOUBLE_EQ(m.entropy, 0.0);
  EXPECT_DOUBLE_EQ(m.mean_distance, 0.0);
  const auto reverse = one_hot_rows(4, [](std::size_t i, std::size_t n) { return n - 1 - i; });
  m = head_metrics(reverse.data(), 4, 4, {});
  EXPECT_DOUBLE_EQ(m.anti_diagonal, 1.0);
  EXPECT_DOUBLE_EQ(m.mean_distance, (3 + 1 + 1 + 3) / 4.0);
  const auto previous = one_hot_rows(4, [](std::size_t i, std::size_t) { return i ? i - 1 : 0; });
  m = head_metrics(previous.data(), 4, 4, {});
  EXPECT_DOUBLE_EQ(m.previous_token, 1.0);  // rows 1..3
}

TEST(PatternMetrics, UniformRowsHaveLogKEntropyAndMaskedRowsDoNotCount) {
  std::vector<double> p(3 * 4, 0.25);
  for (std::size_t j = 0; j < 4; ++j) p[2 * 4 + j] = 0.0;  // a fully masked query
  const HeadMetrics m = head_metrics(p.data(), 3, 4, {});
  EXPECT_NEAR(m.entropy, std::log(4.0), 1e-12);
}

TEST(PatternMetrics, InductionScoreFindsTheTokenAfterTheEarlierOccurrence) {
  // tokens: a b c SEP a b c; from position 5 (b) the induction target is position 2 (c, after the
  // earlier b), from 6 (c) it is 3; from 4 (a) it is 1.
  const std::vector<std::int64_t> tokens{10, 11, 12, 1, 10, 11, 12};
  std::vector<double> p(7 * 7, 0.0);
  for (std::size_t i = 0; i < 7; ++i) p[i * 7 + i] = 1.0;  // self by default
  p[4 * 7 + 4] = 0, p[4 * 7 + 1] = 1.0;
  p[5 * 7 + 5] = 0, p[5 * 7 + 2] = 1.0;
  p[6 * 7 + 6] = 0.5, p[6 * 7 + 3] = 0.5;
  const HeadMetrics m = head_metrics(p.data(), 7, 7, tokens);
  EXPECT_NEAR(m.induction, (1.0 + 1.0 + 0.5) / 3.0, 1e-12);
}

TEST(PatternMetrics, PaddingIsNeverAnEarlierOccurrence) {
  // tokens: pad pad pad a b SEP a b (padding as -1). The third pad repeats the first, but padding is
  // not content: a head that attends from it to the first pad's successor must gain nothing. Only the
  // repeat's a (position 6, target 4) and b (position 7, target 5) count.
  const std::vector<std::int64_t> tokens{-1, -1, -1, 10, 11, 1, 10, 11};
  std::vector<double> p(8 * 8, 0.0);
  for (std::size_t i = 0; i < 8; ++i) p[i * 8 + i] = 1.0;
  p[2 * 8 + 2] = 0, p[2 * 8 + 1] = 1.0;  // pad -> the successor of the earlier pad
  p[6 * 8 + 6] = 0, p[6 * 8 + 4] = 1.0;  // a -> the b after the earlier a
  p[7 * 8 + 7] = 0, p[7 * 8 + 5] = 0.25, p[7 * 8 + 0] = 0.75;
  const HeadMetrics m = head_metrics(p.data(), 8, 8, tokens);
  EXPECT_NEAR(m.induction, (1.0 + 0.25) / 2.0, 1e-12);
}

TEST(PatternMetrics, PaddedQueriesDoNotCountAndTheRealLengthPlacesTheAntiDiagonal) {
  // 3 real tokens and 2 of padding; the real rows reverse the real keys, the padded rows look anywhere.
  std::vector<double> p(5 * 5, 0.0);
  for (std::size_t i = 0; i < 3; ++i) p[i * 5 + (2 - i)] = 1.0;
  p[3 * 5 + 0] = p[4 * 5 + 4] = 1.0;
  const HeadMetrics m = head_metrics(p.data(), 5, 5, {}, 3);
  EXPECT_DOUBLE_EQ(m.anti_diagonal, 1.0);
  EXPECT_DOUBLE_EQ(m.monotonicity, -1.0);
}

TEST(PatternMetrics, MonotonicityFollowsTheCentroids) {
  const auto diagonal = one_hot_rows(5, [](std::size_t i, std::size_t) { return i; });
  EXPECT_DOUBLE_EQ(head_metrics(diagonal.data(), 5, 5, {}).monotonicity, 1.0);
  const auto reverse = one_hot_rows(5, [](std::size_t i, std::size_t n) { return n - 1 - i; });
  EXPECT_DOUBLE_EQ(head_metrics(reverse.data(), 5, 5, {}).monotonicity, -1.0);
  std::vector<double> uniform(4 * 4, 0.25);  // every centroid 1.5: no pair ordered
  EXPECT_DOUBLE_EQ(head_metrics(uniform.data(), 4, 4, {}).monotonicity, 0.0);
  // Centroids 0, 2, 1, 3: pairs (0,2) (0,1) (0,3) (2,3) (1,3) concordant, (2,1) discordant: (5 - 1) / 6.
  const std::size_t order[] = {0, 2, 1, 3};
  std::vector<double> p(4 * 4, 0.0);
  for (std::size_t i = 0; i < 4; ++i) p[i * 4 + order[i]] = 1.0;
  EXPECT_NEAR(head_metrics(p.data(), 4, 4, {}).monotonicity, 4.0 / 6.0, 1e-12);
}

TEST(PatternMetrics, CrossAttentionAlignments) {
  // Targets (BOS, 3 answer tokens: 4 rows, then 1 row of padding) over sources of 3 real keys and 1 pad.
  // Copying: target position i reads source i; the EOS-predicting row 3 has no source position.
  std::vector<double> copy(5 * 4, 0.0);
  for (std::size_t i = 0; i < 3; ++i) copy[i * 4 + i] = 1.0;
  copy[3 * 4 + 2] = 1.0;
  copy[4 * 4 + 0] = 1.0;  // a padded target row: not counted
  HeadMetrics m = cross_metrics(copy.data(), 5, 4, 4, 3);
  EXPECT_DOUBLE_EQ(m.diagonal, 1.0);
  EXPECT_DOUBLE_EQ(m.entropy, 0.0);
  EXPECT_DOUBLE_EQ(m.monotonicity, 1.0);  // centroids 0, 1, 2, 2: the tie is not counted
  EXPECT_TRUE(std::isnan(m.induction));
  EXPECT_TRUE(std::isnan(m.previous_token));
  // Reversing: target i reads source 2 - i.
  std::vector<double> reverse(5 * 4, 0.0);
  for (std::size_t i = 0; i < 3; ++i) reverse[i * 4 + (2 - i)] = 1.0;
  reverse[3 * 4 + 0] = 1.0;
  m = cross_metrics(reverse.data(), 5, 4, 4, 3);
  EXPECT_DOUBLE_EQ(m.anti_diagonal, 1.0);
  EXPECT_DOUBLE_EQ(m.diagonal, 1.0 / 3.0);  // the middle token is on both
  EXPECT_DOUBLE_EQ(m.monotonicity, -1.0);
}

// Signed, unnormalised mixing (recurrent kernels, Linformer) is read through its magnitude: a row scaled
// or with its signs flipped says the same about where the head looks.
TEST(PatternMetrics, SignedRowsAreReadThroughTheirMagnitude) {
  std::vector<double> soft(3 * 3, 0.0), mixed(3 * 3, 0.0);
  const double rows[3][3] = {{1, 0, 0}, {0.25, 0.75, 0}, {0.5, 0.25, 0.25}};
  for (std::size_t i = 0; i < 3; ++i)
    for (std::size_t j = 0; j < 3; ++j) {
      soft[i * 3 + j] = rows[i][j];
      mixed[i * 3 + j] = (j % 2 ? -3.0 : 3.0) * rows[i][j];  // scaled by 3, every other key negative
    }
  const HeadMetrics a = head_metrics(soft.data(), 3, 3, {}), b = head_metrics(mixed.data(), 3, 3, {});
  for (const auto& [name, member] : head_metric_fields()) EXPECT_NEAR(a.*member, b.*member, 1e-12) << name;
}

}  // namespace
}  // namespace attnlab
