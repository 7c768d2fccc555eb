// ViT: patch extraction by hand, size errors, shapes, both poolings, gradcheck over images and parameters.
#include <gtest/gtest.h>

#include "framework/models/vit.hpp"
#include "tests/test_util.hpp"

namespace attnlab {
namespace {

ModelConfig tiny_vit(Pooling pooling = Pooling::cls) {
  ModelConfig c;
  c.kind.name = "vit";
  c.kind.options.set("pooling", pooling_name(pooling));
  c.kind.options.set("patch_size", "2");
  c.encoder.d_model = 4;
  c.encoder.n_heads = 2;
  c.encoder.n_layers = 1;
  c.encoder.ff_hidden = 8;
  return c;
}

// Images of 2 channels, 4 x `width`, in 3 classes.
DataShape images(std::size_t width = 6) {
  DataShape s;
  s.channels = 2;
  s.height = 4;
  s.width = width;
  s.num_classes = 3;
  return s;
}

Batch image_batch(const Tensor& images) {
  Batch b;
  b.input = images;
  return b;
}

Tensor logits(ViT& vit, const Tensor& x) { return vit.forward(image_batch(x)).logits; }

TEST(ViT, PatchesAreNonOverlappingBlocksInRowMajorOrder) {
  Generator gen(0);
  ViT vit(tiny_vit(), images(), gen);
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
  try {
    ModelRegistry::instance().find("vit").stack(tiny_vit(), images(5));
    FAIL();
  } catch (const OptionError& e) {
    EXPECT_EQ(e.key(), "patch_size");
    EXPECT_STREQ(e.what(), "model.patch_size (2) must divide the image size (4x5)");
  }
  Generator gen(0);
  ViT vit(tiny_vit(), images(), gen);
  EXPECT_THROW(logits(vit, zeros({1, 2, 4, 5})), std::invalid_argument);
  EXPECT_THROW(logits(vit, zeros({1, 2, 8, 8})), std::invalid_argument);  // more patches than built for
  EXPECT_EQ(logits(vit, zeros({3, 2, 4, 4})).shape(), (Shape{3, 3}));     // fewer patches: fine
}

TEST(ViT, ParameterCount) {
  Generator gen(0);
  ViT vit(tiny_vit(), images(), gen);
  const std::size_t c = 4, patch_dim = 8, n = 6, k = 3;
  const std::size_t encoder = vit.encoder->parameter_count();
  EXPECT_EQ(vit.parameter_count(), patch_dim * c + c + c + (n + 1) * c + encoder + c * k + k);
}

TEST(ViT, MeanPoolingHasNoClassTokenAndReadsThePatchesMean) {
  Generator gen(0);
  ViT vit(tiny_vit(Pooling::mean), images(), gen);
  const std::size_t c = 4, patch_dim = 8, n = 6, k = 3;
  EXPECT_FALSE(vit.class_token());
  EXPECT_FALSE(vit.cls.defined());
  EXPECT_EQ(ModelRegistry::instance().find("vit").stack(tiny_vit(Pooling::mean), images()).max_len, n);
  EXPECT_EQ(ModelRegistry::instance().find("vit").stack(tiny_vit(Pooling::cls), images()).max_len, n + 1);
  EXPECT_EQ(vit.parameter_count(), patch_dim * c + c + n * c + vit.encoder->parameter_count() + c * k + k);
  EXPECT_EQ(vit.position_label(0), "p0");
  EXPECT_EQ(vit.tokens_read(image_batch(zeros({3, 2, 4, 6}))), 3 * n);
  EXPECT_EQ(logits(vit, zeros({3, 2, 4, 6})).shape(), (Shape{3, 3}));
  EXPECT_EQ(logits(vit, zeros({1, 2, 4, 4})).shape(), (Shape{1, 3}));  // fewer patches: fine
  EXPECT_THROW(logits(vit, zeros({1, 2, 8, 8})), std::invalid_argument);
  // The readout without norm and bias is the head's weight applied to the mean over all positions; with
  // a class token, to position 0 alone.
  vit.to(DType::float64);
  const Tensor stream = testing::param({2, n, c}, 3);
  const Batch batch = image_batch(zeros({2, 2, 4, 6}, DType::float64));
  const Tensor w = vit.head->weight;  // [K, C]
  testing::expect_values(vit.readout(stream, batch, false, false), matmul(mean(stream, 1), w, false, true).to_vector(), 1e-14);
  Generator gen2(0);
  ViT with_cls(tiny_vit(Pooling::cls), images(), gen2);
  EXPECT_EQ(with_cls.position_label(0), "cls");
  EXPECT_EQ(with_cls.position_label(1), "p0");
  EXPECT_EQ(with_cls.tokens_read(image_batch(zeros({3, 2, 4, 6}))), 3 * (n + 1));
  with_cls.to(DType::float64);
  testing::expect_values(with_cls.readout(stream, batch, false, false),
                         matmul(reshape(slice(stream, 1, 0, 1), {2, static_cast<std::int64_t>(c)}), with_cls.head->weight, false, true).to_vector(),
                         1e-14);
}

class ViTGradcheck : public ::testing::TestWithParam<Pooling> {};

TEST_P(ViTGradcheck, ImagesAndParameters) {
  Generator gen(1);
  ViT vit(tiny_vit(GetParam()), images(), gen);
  vit.to(DType::float64);
  std::vector<Tensor> inputs{testing::param({2, 2, 4, 6}, 2)};
  for (const auto& p : vit.parameters()) inputs.push_back(p);
  EXPECT_TRUE(testing::gradcheck_passes([&](const auto& in) { return logits(vit, in[0]); }, inputs));
}

INSTANTIATE_TEST_SUITE_P(Poolings, ViTGradcheck, ::testing::Values(Pooling::cls, Pooling::mean),
                         [](const auto& info) { return std::string(pooling_name(info.param)); });

}  // namespace
}  // namespace attnlab
