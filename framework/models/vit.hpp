// ViT (Dosovitskiy et al. 2020), model kind `vit`: an image split into non-overlapping P x P patches,
// each flattened and linearly projected, learned position embeddings added, a bidirectional encoder, and
// a classification head on the pooled output. model.pooling `cls`: a learned CLS token prepended, the
// head reads its output (the paper's ViT, timm's global_pool='token'); `mean`: no CLS token, the head
// reads the mean over the patches (global average pooling: Beyer et al. 2022's "simple ViT", timm's
// 'avg'). The data's shape gives the image size (channels, height, width) and the classes;
// model.patch_size the patches.
//
// Legend: B batch, Cin image channels, Hi x Wi image size, P patch size, N = (Hi/P)(Wi/P) patches,
// C model width, K classes.
#pragma once

#include <memory>

#include "framework/models/model.hpp"

namespace attnlab {

class ViT : public Model {
 public:
  static constexpr const char* kName = "vit";
  static constexpr const char* kDescription = "vision transformer: patches (and a CLS token) through a bidirectional encoder";
  static constexpr TaskFormat kFormat = TaskFormat::images;
  struct Options {
    std::size_t patch_size = 4;       // square patches
    Pooling pooling = Pooling::mean;  // the head reads the mean of the patches, or a CLS token
  };
  static Schema<Options> options_schema();
  // The stack over N (+ 1 with a CLS token) positions for the images of `shape`; OptionError("patch_size")
  // when P does not divide them.
  static EncoderConfig stack(const Options& options, const EncoderConfig& common, const DataShape& shape);
  static ModelSize size(const Options& options, const EncoderConfig& stack, const DataShape& shape);
  ViT(const ModelConfig& config, const DataShape& shape, Generator& gen);
  // images [B, Cin, Hi, Wi] -> patches [B, N, Cin * P * P], row-major over the patch grid.
  Tensor patchify(const Tensor& images) const;
  std::size_t n_layers() const override { return encoder_config_.n_layers; }
  bool feed_forward() const override { return encoder_config_.feed_forward; }
  std::size_t n_heads() const override { return encoder_config_.n_heads; }
  // The patches (and the CLS token) of each image.
  std::size_t tokens_read(const Batch& batch) const override;
  // "cls" (with a CLS token), then the patches "p0", "p1", ... in row-major order.
  std::string position_label(std::size_t i) const override { return i < leading() ? "cls" : "p" + std::to_string(i - leading()); }
  bool class_token() const { return class_token_; }  // model.pooling cls
  std::optional<Patches> patches() const override { return Patches{patch_size_, class_token_}; }
  const LayerNorm* final_norm() const override { return encoder->final_norm.get(); }

  std::shared_ptr<Linear> patch_embed;  // Cin P P -> C
  Tensor cls;                           // [1, 1, C], with a CLS token only
  Tensor pos;                           // [N (+ 1), C]
  std::shared_ptr<Encoder> encoder;
  std::shared_ptr<Linear> head;

 protected:
  // images [B, Cin, Hi, Wi] -> logits [B, K]. Any size the patch size divides works, as long as it has at
  // most as many patches as the configured size (the leading position embeddings are used).
  Tensor run(const Batch& batch, const HookScope& hooks) override;
  const Linear& output_layer() const override { return *head; }
  Tensor pool(const Tensor& stream, const Batch& batch) const override;  // the CLS output or the patches' mean [B, C]

 private:
  EncoderConfig encoder_config_;
  std::size_t channels_, patch_size_, image_height_, image_width_;
  bool class_token_;
  std::size_t leading() const { return class_token_ ? 1 : 0; }  // positions before the patches
};

}  // namespace attnlab
