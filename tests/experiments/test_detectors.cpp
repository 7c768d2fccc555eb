// TransformerLens's head detectors and the repeated-tokens induction score against patterns computed
// by hand.
#include <gtest/gtest.h>

#include <cmath>

#include "experiments/analysis/detectors.hpp"

namespace attnlab {
namespace {

// A causal pattern with every row uniform over the keys so far.
std::vector<double> uniform_causal(std::size_t t) {
  std::vector<double> p(t * t, 0.0);
  for (std::size_t i = 0; i < t; ++i)
    for (std::size_t j = 0; j <= i; ++j) p[i * t + j] = 1.0 / static_cast<double>(i + 1);
  return p;
}

TEST(Detectors, DetectionPatternsMarkTheCellsTransformerLensMarks) {
  const std::vector<std::int64_t> tokens = {5, 6, 5, 6};  // positions 2 and 3 repeat 0 and 1
  const auto prev = detection_pattern(DetectorKind::previous_token, tokens);
  const auto dup = detection_pattern(DetectorKind::duplicate_token, tokens);
  const auto ind = detection_pattern(DetectorKind::induction, tokens);
  for (std::size_t i = 0; i < 4; ++i)
    for (std::size_t j = 0; j < 4; ++j) {
      EXPECT_EQ(prev[i * 4 + j], i >= 1 && j == i - 1 ? 1.0 : 0.0) << i << "," << j;
      EXPECT_EQ(dup[i * 4 + j], (i == 2 && j == 0) || (i == 3 && j == 1) ? 1.0 : 0.0) << i << "," << j;
      EXPECT_EQ(ind[i * 4 + j], (i == 2 && j == 1) || (i == 3 && j == 2) ? 1.0 : 0.0) << i << "," << j;  // the token after the earlier copy
    }
}

TEST(Detectors, APerfectPreviousTokenHeadScoresOneAndAUniformHeadWhatTheHandSays) {
  const std::size_t t = 4;
  const std::vector<std::int64_t> tokens = {2, 3, 4, 5};
  std::vector<double> perfect(t * t, 0.0);
  perfect[0] = 1.0;  // row 0 can only see itself
  for (std::size_t i = 1; i < t; ++i) perfect[i * t + i - 1] = 1.0;
  // Mass 4 in all, 3 on the previous-token cells.
  EXPECT_NEAR(detector_score(DetectorKind::previous_token, perfect.data(), t, t, tokens, t, {}), 0.75, 1e-12);
  EXPECT_NEAR(detector_score(DetectorKind::previous_token, perfect.data(), t, t, tokens, t, {true, false}), 1.0, 1e-12);  // BOS column dropped
  const auto u = uniform_causal(t);
  // Previous-token cells hold 1/2 + 1/3 + 1/4 of a total mass of 4 rows.
  EXPECT_NEAR(detector_score(DetectorKind::previous_token, u.data(), t, t, tokens, t, {}), (0.5 + 1.0 / 3 + 0.25) / 4, 1e-12);
  // Without the current token: the mass left is 4 - (1 + 1/2 + 1/3 + 1/4).
  EXPECT_NEAR(detector_score(DetectorKind::previous_token, u.data(), t, t, tokens, t, {false, true}),
              (0.5 + 1.0 / 3 + 0.25) / (4 - (1 + 0.5 + 1.0 / 3 + 0.25)), 1e-12);
  EXPECT_TRUE(std::isnan(detector_score(DetectorKind::previous_token, std::vector<double>(t * t, 0.0).data(), t, t, tokens, t, {})));
}

TEST(Detectors, OnlyTheRealLengthCounts) {
  const std::size_t t = 4;
  const std::vector<std::int64_t> tokens = {2, 2, -1, -1};
  std::vector<double> p(t * t, 0.0);
  p[0] = 1, p[1 * t + 0] = 1, p[2 * t + 2] = 1, p[3 * t + 3] = 1;  // rows 2 and 3 are padding
  EXPECT_NEAR(detector_score(DetectorKind::duplicate_token, p.data(), t, t, tokens, 2, {}), 0.5, 1e-12);
  EXPECT_THROW(detector_score(DetectorKind::duplicate_token, p.data(), t, t, tokens, 5, {}), std::invalid_argument);
}

// TransformerLens's "abs" measure: 1 - sum|A - D| / rows, after the same exclusions.
TEST(Detectors, TheAbsMeasureIsOneMinusTheMeanRowDistance) {
  const std::size_t t = 4;
  const std::vector<std::int64_t> tokens = {2, 3, 4, 5};
  std::vector<double> perfect(t * t, 0.0);
  perfect[0] = 1.0;
  for (std::size_t i = 1; i < t; ++i) perfect[i * t + i - 1] = 1.0;
  DetectorOptions abs;
  abs.error_measure = ErrorMeasure::abs;
  EXPECT_NEAR(detector_score(DetectorKind::previous_token, perfect.data(), t, t, tokens, t, abs), 0.75, 1e-12);  // row 0 is 1 away
  abs.exclude_bos = true;
  EXPECT_NEAR(detector_score(DetectorKind::previous_token, perfect.data(), t, t, tokens, t, abs), 1.0, 1e-12);
  const auto u = uniform_causal(t);
  abs.exclude_bos = false;
  // Row i spreads 1/(i+1) over i+1 keys; D has one 1 in rows 1..3.
  const double distance = 1.0 + (0.5 + 0.5) + (1.0 / 3 + 2.0 / 3 + 1.0 / 3) + (0.25 + 0.75 + 0.25 + 0.25);
  EXPECT_NEAR(detector_score(DetectorKind::previous_token, u.data(), t, t, tokens, t, abs), 1.0 - distance / 4, 1e-12);
}

// Padding queries (token -1, as row_tokens gives them) count for TransformerLens (an earlier PAD is a
// duplicate of a PAD); the scored-rows restriction leaves them out.
TEST(Detectors, ScoredRowsLeaveThePaddingQueriesOut) {
  const std::size_t t = 4;
  const std::vector<std::int64_t> tokens = {-1, -1, 5, 5};
  std::vector<double> p(t * t, 0.0);
  p[0] = 1, p[1 * t + 0] = 1, p[2 * t + 2] = 1, p[3 * t + 0] = 1;  // row 1: the earlier PAD; row 3: a PAD, not its duplicate
  EXPECT_NEAR(detector_score(DetectorKind::duplicate_token, p.data(), t, t, tokens, t, {}), 0.25, 1e-12);
  DetectorOptions scored;
  scored.scored_rows = true;
  EXPECT_NEAR(detector_score(DetectorKind::duplicate_token, p.data(), t, t, tokens, t, scored), 0.0, 1e-12);
  p[3 * t + 0] = 0, p[3 * t + 2] = 1;  // row 3 on the earlier 5
  EXPECT_NEAR(detector_score(DetectorKind::duplicate_token, p.data(), t, t, tokens, t, scored), 0.5, 1e-12);
}

// A detection pattern of one's own (TransformerLens's custom detection_pattern), checked for its size.
TEST(Detectors, ACustomDetectionPatternScoresAsTheNamedOnes) {
  const std::size_t t = 3;
  const std::vector<std::int64_t> tokens = {2, 3, 4};
  const auto u = uniform_causal(t);
  std::vector<double> first_key(t * t, 0.0);
  for (std::size_t i = 0; i < t; ++i) first_key[i * t] = 1.0;  // "attends to the first token"
  EXPECT_NEAR(similarity_score(u.data(), t, t, first_key, tokens, t, {}), (1.0 + 0.5 + 1.0 / 3) / 3, 1e-12);
  EXPECT_THROW(similarity_score(u.data(), t, t, std::vector<double>(4, 0.0), tokens, t, {}), std::invalid_argument);
}

TEST(Detectors, RepeatedTokensInductionScoreReadsTheStripe) {
  const std::size_t half = 3, t = 2 * half + 1;  // a BOS, then x y z x y z
  std::vector<double> p(t * t, 0.0);
  for (std::size_t i = 0; i < t; ++i) p[i * t + i] = 1.0;
  p[(1 + half + 0) * t + (1 + 0)] = 0, p[(1 + half + 0) * t + (1 + 1)] = 1.0;  // x (second) -> y (first)
  p[(1 + half + 1) * t + (1 + 1)] = 0, p[(1 + half + 1) * t + (1 + 2)] = 0.5;  // y (second) -> z (first), half the mass
  EXPECT_NEAR(repeated_tokens_induction_score(p.data(), t, t, half, 1), (1.0 + 0.5) / 2, 1e-12);
  EXPECT_THROW(repeated_tokens_induction_score(p.data(), t, t, 4, 0), std::invalid_argument);
}

}  // namespace
}  // namespace attnlab
