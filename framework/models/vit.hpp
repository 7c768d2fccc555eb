// ViT (Dosovitskiy et al. 2020): an image split into non-overlapping P x P patches, each flattened and
// linearly projected, a learned CLS token prepended, learned position embeddings added, a bidirectional
// encoder, and a classification head on the CLS output.
//
// Legend: B batch, Cin image channels, Hi x Wi image size, P patch size, N = (Hi/P)(Wi/P) patches,
// C model width, K classes.
#pragma once

#include <memory>

#include "framework/models/encoder.hpp"

namespace attnlab {

struct ViTConfig {
  std::size_t image_height = 28, image_width = 28;  // the size the position table is built for
  std::size_t channels = 1;
  std::size_t patch_size = 7;
  std::size_t num_classes = 10;
  EncoderConfig encoder;  // causal forced off; max_len is set to N + 1
  // Throws naming the fix when the patch size does not divide the image size.
  void validate() const;
  std::size_t num_patches() const { return (image_height / patch_size) * (image_width / patch_size); }
};

class ViT : public Module {
 public:
  ViT(const ViTConfig& config, Generator& gen);
  // images [B, Cin, Hi, Wi] -> logits [B, K]. Any size the patch size divides works, as long as it has
  // at most as many patches as the configured size (the leading position embeddings are used).
  Tensor forward(const Tensor& images, EncoderOutput* encoded = nullptr, bool need_patterns = false);
  // images [B, Cin, Hi, Wi] -> patches [B, N, Cin * P * P], row-major over the patch grid.
  Tensor patchify(const Tensor& images) const;

  std::shared_ptr<Linear> patch_embed;  // Cin P P -> C
  Tensor cls;                           // [1, 1, C]
  Tensor pos;                           // [N + 1, C]
  std::shared_ptr<Encoder> encoder;
  std::shared_ptr<Linear> head;

 private:
  ViTConfig config_;
};

}  // namespace attnlab
