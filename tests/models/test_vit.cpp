// ViT: patch extraction by hand, size errors, shapes, gradcheck over images and parameters.
#include <gtest/gtest.h>

#include "framework/models/vit.hpp"
#include "tests/test_util.hpp"

namespace attnlab {
namespace {

ViTConfig tiny_vit() {
  ViTConfig c;
  c.image_height = 4;
  c.image_width = 6;
  c.channels = 2;
  c.patch_size = 2;
  c.num_classes = 3;
  c.encoder.d_model = 4;
  c.encoder.n_heads = 2;
  c.encoder.n_layers = 1;
  c.encoder.ff_hidden = 8;
  return c;
}

TEST(ViT, PatchesAreNonOverlappingBlocksInRowMajorOrder) {
  Generator gen(0);
  ViT vit(tiny_vit(), gen);
  const Tensor images = reshape(arange(2 * 2 * 4 * 6), {2, 2, 4, 6});
  const Tensor patches = vit.patchify(images);
  EXPECT_EQ(patches.shape(), (Shape{2, 6, 8}));
  // Patch 4 of image 1 is grid row 1, column 1: pixels (2..3, 2..3) of each channel.
  std::vector<double> expected;
  for (std::size_t c = 0; c < 2; ++c)
    for (std::size_t y = 2; y < 4; ++y)
      for (std::size_t x = 2; x < 4; ++x) expected.push_back(images.at({1, c, y, x}));
  for (std::size_t i = 0; i < 8; ++i) EXPECT_EQ(patches.at({1, 4, i}), expected[i]);
}

TEST(ViT, SizesThePatchDoesNotDivideAreAnError) {
  ViTConfig c = tiny_vit();
  c.image_width = 5;
  try {
    c.validate();
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "patch_size (2) must divide the image size (4x5)");
  }
  Generator gen(0);
  ViT vit(tiny_vit(), gen);
  EXPECT_THROW(vit.forward(zeros({1, 2, 4, 5})), std::invalid_argument);
  EXPECT_THROW(vit.forward(zeros({1, 2, 8, 8})), std::invalid_argument);  // more patches than built for
  EXPECT_EQ(vit.forward(zeros({3, 2, 4, 4})).shape(), (Shape{3, 3}));     // fewer patches: fine
}

TEST(ViT, ParameterCount) {
  Generator gen(0);
  ViT vit(tiny_vit(), gen);
  const std::size_t c = 4, patch_dim = 8, n = 6, k = 3;
  const std::size_t encoder = vit.encoder->parameter_count();
  EXPECT_EQ(vit.parameter_count(), patch_dim * c + c + c + (n + 1) * c + encoder + c * k + k);
}

TEST(ViTGradcheck, ImagesAndParameters) {
  Generator gen(1);
  ViT vit(tiny_vit(), gen);
  vit.to(DType::float64);
  std::vector<Tensor> inputs{testing::param({2, 2, 4, 6}, 2)};
  for (const auto& p : vit.parameters()) inputs.push_back(p);
  EXPECT_TRUE(testing::gradcheck_passes([&](const auto& in) { return vit.forward(in[0]); }, inputs));
}

}  // namespace
}  // namespace attnlab
