// Attention rollout against small examples worked by hand.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "experiments/analysis/rollout.hpp"
#include "framework/ops/ops.hpp"

namespace attnlab {
namespace {

Tensor heads(const std::vector<double>& values) { return from_vector(values, {values.size() / 4, 2, 2}, DType::float64); }

void expect_matrix(const Tensor& t, const std::vector<double>& want) {
  const std::vector<double> v = t.to_vector();
  ASSERT_EQ(v.size(), want.size());
  for (std::size_t i = 0; i < v.size(); ++i) EXPECT_NEAR(v[i], want[i], 1e-12) << "entry " << i;
}

const Tensor kLayerA = heads({1, 0, 0.5, 0.5, /* head 1 */ 0, 1, 0.5, 0.5});
const Tensor kLayerB = heads({0.2, 0.8, 0.6, 0.4, 0.2, 0.8, 0.6, 0.4});

TEST(Rollout, MeanFusionMultipliesTheLayersFromTheFirst) {
  // A: mean [[.5, .5], [.5, .5]] -> (A + I) / 2 = [[.75, .25], [.25, .75]]; B -> [[.6, .4], [.3, .7]];
  // B' A' = [[.55, .45], [.4, .6]].
  expect_matrix(attention_rollout({kLayerA, kLayerB}, {}), {0.55, 0.45, 0.4, 0.6});
}

TEST(Rollout, RowsAreRenormalisedNotColumns) {
  // max fusion of A: [[1, 1], [.5, .5]] -> (+ I) / 2 = [[1, .5], [.25, .75]]: row sums 1.5 and 1. Rows
  // divided: [[2/3, 1/3], [.25, .75]]; dividing columns by those sums (vit-explain's broadcast) would give
  // [[2/3, .5], [1/6, .75]].
  const Tensor r = attention_rollout({kLayerA}, {HeadFusion::max, 0.0});
  expect_matrix(r, {2.0 / 3, 1.0 / 3, 0.25, 0.75});
  expect_matrix(attention_rollout({kLayerA}, {HeadFusion::min, 0.0}), {1.0, 0.0, 0.25, 0.75});
}

TEST(Rollout, DiscardDropsTheWeakestButNeverTheClassTokensOwn) {
  // B mean [[.2, .8], [.6, .4]]: the two smallest are .2 (entry 0, kept) and .4 (dropped) ->
  // [[.2, .8], [.6, 0]] -> (+ I) / 2 = [[.6, .4], [.3, .5]] -> rows [[.6, .4], [.375, .625]].
  expect_matrix(attention_rollout({kLayerB}, {HeadFusion::mean, 0.5}), {0.6, 0.4, 0.375, 0.625});
  EXPECT_THROW(attention_rollout({kLayerB}, {HeadFusion::mean, 1.0}), std::invalid_argument);
  EXPECT_THROW(parse_head_fusion("median"), std::invalid_argument);
}

TEST(Rollout, TheClassTokenMapIsItsRowOverThePatchesScaledToOne) {
  std::vector<double> r(25, 0.0);
  const double row[5] = {0.0, 0.1, 0.2, 0.4, 0.3};
  for (std::size_t j = 0; j < 5; ++j) r[j] = row[j];
  const Tensor map = rollout_map(from_vector(r, {5, 5}, DType::float64));
  ASSERT_EQ(map.shape(), (Shape{2, 2}));
  expect_matrix(map, {0.25, 0.5, 1.0, 0.75});
  EXPECT_THROW(rollout_map(zeros({4, 4}, DType::float64)), std::invalid_argument);  // 3 patches: no square
}

TEST(Rollout, WithoutAClassTokenTheMapIsTheMeanOfTheRows) {
  // Four patches: column means of the rows [[.4, .2, .2, .2], [0, 1, 0, 0], [0, 0, .5, .5], [0, .2, .2, .6]]
  // are [.1, .35, .225, .325] -> scaled by .35.
  const Tensor r = from_vector({0.4, 0.2, 0.2, 0.2, 0, 1, 0, 0, 0, 0, 0.5, 0.5, 0, 0.2, 0.2, 0.6}, {4, 4}, DType::float64);
  expect_matrix(rollout_map(r, false), {0.1 / 0.35, 1.0, 0.225 / 0.35, 0.325 / 0.35});
  EXPECT_THROW(rollout_map(zeros({5, 5}, DType::float64), false), std::invalid_argument);  // 5 patches: no square
  // Without a class token the discard spares no entry: B's two smallest, .2 (entry 0) and .4, are dropped
  // -> [[0, .8], [.6, 0]] -> (+ I) / 2 = [[.5, .4], [.3, .5]] -> rows [[5/9, 4/9], [.375, .625]].
  expect_matrix(attention_rollout({kLayerB}, {HeadFusion::mean, 0.5}, false), {5.0 / 9, 4.0 / 9, 0.375, 0.625});
}

TEST(Rollout, ThePngHoldsTheImageAndItsOverlay) {
  const std::string path = testing::TempDir() + "/rollout.png";
  write_rollout_png(path, full({1, 4, 4}, 0.5), from_vector({0, 1, 0.5, 0.25}, {2, 2}, DType::float64), 2);
  std::ifstream in(path, std::ios::binary);
  unsigned char header[24] = {};
  in.read(reinterpret_cast<char*>(header), 24);
  EXPECT_EQ(header[1], 'P');
  EXPECT_EQ(header[2], 'N');
  const std::size_t width = (header[16] << 24) | (header[17] << 16) | (header[18] << 8) | header[19];
  const std::size_t height = (header[20] << 24) | (header[21] << 16) | (header[22] << 8) | header[23];
  EXPECT_EQ(width, 2 * 4 * 2 + 2u);  // image, a gap, the overlay
  EXPECT_EQ(height, 4 * 2u);
}

}  // namespace
}  // namespace attnlab
