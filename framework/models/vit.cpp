#include "framework/models/vit.hpp"

#include <stdexcept>

namespace attnlab {
namespace {
using I = std::int64_t;
}

void ViTConfig::validate() const {
  if (patch_size == 0) throw std::invalid_argument("patch_size must be positive");
  if (image_height % patch_size != 0 || image_width % patch_size != 0) {
    throw std::invalid_argument("patch_size (" + std::to_string(patch_size) + ") must divide the image size (" +
                                std::to_string(image_height) + "x" + std::to_string(image_width) + ")");
  }
  if (channels == 0 || num_classes < 2) throw std::invalid_argument("ViT needs channels >= 1 and num_classes >= 2");
}

ViT::ViT(const ViTConfig& config, Generator& gen) : config_(config) {
  config.validate();
  config_.encoder.causal = false;
  config_.encoder.max_len = config.num_patches() + 1;
  const std::size_t c = config_.encoder.d_model, patch_dim = config.channels * config.patch_size * config.patch_size;
  patch_embed = register_module("patch_embed", std::make_shared<Linear>(patch_dim, c, true, gen));
  {
    NoGradGuard no_grad;
    cls = register_parameter("cls", randn({1, 1, c}, gen, {}, 0.0, 0.02), ParamKind::embedding);
    pos = register_parameter("pos", randn({config_.encoder.max_len, c}, gen, {}, 0.0, 0.02), ParamKind::embedding);
  }
  encoder = register_module("encoder", std::make_shared<Encoder>(config_.encoder, gen));
  head = register_module("head", std::make_shared<Linear>(c, config.num_classes, true, gen));
}

Tensor ViT::patchify(const Tensor& images) const {
  const std::size_t p = config_.patch_size;
  if (images.dim() != 4 || images.size(1) != config_.channels) {
    throw std::invalid_argument("ViT: expected images [B, " + std::to_string(config_.channels) + ", H, W], got " +
                                shape_str(images.shape()));
  }
  const std::size_t h = images.size(2), w = images.size(3);
  if (h % p != 0 || w % p != 0) {
    throw std::invalid_argument("ViT: patch size " + std::to_string(p) + " does not divide the image size " +
                                std::to_string(h) + "x" + std::to_string(w) + "; crop or pad the images to a multiple of it");
  }
  const I b = static_cast<I>(images.size(0)), cin = static_cast<I>(config_.channels), gh = static_cast<I>(h / p),
          gw = static_cast<I>(w / p), pp = static_cast<I>(p);
  // [B, Cin, gh, P, gw, P] -> [B, gh, gw, Cin, P, P] -> [B, N, Cin P P]
  const Tensor grid = permute(reshape(images, {b, cin, gh, pp, gw, pp}), {0, 2, 4, 1, 3, 5});
  return reshape(grid, {b, gh * gw, cin * pp * pp});
}

Tensor ViT::forward(const Tensor& images, EncoderOutput* encoded, bool need_patterns) {
  const Tensor patches = patchify(images);  // [B, N, Cin P P]
  const std::size_t n = patches.size(1);
  if (n + 1 > config_.encoder.max_len) {
    throw std::invalid_argument("ViT: " + std::to_string(n) + " patches exceed the " + std::to_string(config_.encoder.max_len - 1) +
                                " the model was built for (" + std::to_string(config_.image_height) + "x" +
                                std::to_string(config_.image_width) + " images)");
  }
  const I b = static_cast<I>(images.size(0)), c = static_cast<I>(config_.encoder.d_model);
  Tensor x = concat({broadcast_to(cls, {images.size(0), 1, cls.size(2)}), patch_embed->forward(patches)}, 1);  // [B, N+1, C]
  x = x + slice(pos, 0, 0, static_cast<I>(n) + 1);
  EncoderOutput out = encoder->forward(x, Tensor(), need_patterns);
  const Tensor cls_out = reshape(slice(out.hidden, 1, 0, 1), {b, c});  // [B, C]
  if (encoded) *encoded = std::move(out);
  return head->forward(cls_out);  // [B, K]
}

}  // namespace attnlab
