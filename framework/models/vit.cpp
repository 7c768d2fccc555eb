#include "framework/models/vit.hpp"

#include <stdexcept>

namespace attnlab {
namespace {
using I = std::int64_t;
}

Schema<ViT::Options> ViT::options_schema() {
  Schema<Options> s;
  s.field("patch_size", &Options::patch_size, "square patches; must divide the image size", Range::at_least(1));
  s.choice("pooling", &Options::pooling, pooling_names(),
           "the head reads the `mean` over the patches (global average pooling, no CLS token) or a learned `cls` token prepended "
           "to them");
  return s;
}

EncoderConfig ViT::stack(const Options& o, const EncoderConfig& common, const DataShape& shape) {
  if (!shape.images()) throw OptionError("kind", "model.kind vit reads images; this task's data are token sequences");
  const std::size_t p = o.patch_size;
  if (p == 0 || shape.height % p != 0 || shape.width % p != 0) {
    throw OptionError("patch_size", "model.patch_size (" + std::to_string(p) + ") must divide the image size (" +
                                        std::to_string(shape.height) + "x" + std::to_string(shape.width) + ")");
  }
  if (shape.num_classes < 2) throw std::invalid_argument("ViT needs at least 2 classes");
  EncoderConfig e = common;
  e.causal = false;
  e.max_len = (shape.height / p) * (shape.width / p) + (o.pooling == Pooling::cls ? 1 : 0);
  return e;
}

ModelSize ViT::size(const Options& o, const EncoderConfig& stack, const DataShape& shape) {
  ModelSize s = blocks_size(stack, stack.n_layers, static_cast<double>(stack.max_len));
  const double width = static_cast<double>(stack.d_model), patch = static_cast<double>(shape.channels * o.patch_size * o.patch_size);
  s.parameters += patch * width + static_cast<double>(stack.max_len) * width + width * static_cast<double>(shape.num_classes);
  s.activations += 2.0 * static_cast<double>(stack.max_len);
  return s;
}

ViT::ViT(const ModelConfig& config, const DataShape& shape, Generator& gen) {
  const Options o = read_options<ViT>(config.kind.options);
  encoder_config_ = stack(o, config.encoder, shape);
  channels_ = shape.channels, patch_size_ = o.patch_size, image_height_ = shape.height, image_width_ = shape.width;
  class_token_ = o.pooling == Pooling::cls;
  const std::size_t c = encoder_config_.d_model, patch_dim = channels_ * patch_size_ * patch_size_;
  patch_embed = register_module("patch_embed", std::make_shared<Linear>(patch_dim, c, true, gen));
  {
    NoGradGuard no_grad;
    if (class_token_) cls = register_parameter("cls", randn({1, 1, c}, gen, {}, 0.0, 0.02), ParamKind::embedding);
    pos = register_parameter("pos", randn({encoder_config_.max_len, c}, gen, {}, 0.0, 0.02), ParamKind::embedding);
  }
  encoder = register_module("encoder", std::make_shared<Encoder>(encoder_config_, gen));
  head = register_module("head", std::make_shared<Linear>(c, shape.num_classes, true, gen));
  if (encoder_config_.init == InitScheme::fan_in) gpt_init(*this, encoder_config_.n_layers, gen, InitScheme::fan_in);  // gpt2: the modules' own
}

Tensor ViT::patchify(const Tensor& images) const {
  const std::size_t p = patch_size_;
  if (images.dim() != 4 || images.size(1) != channels_) {
    throw std::invalid_argument("ViT: expected images [B, " + std::to_string(channels_) + ", H, W], got " + shape_str(images.shape()));
  }
  const std::size_t h = images.size(2), w = images.size(3);
  if (h % p != 0 || w % p != 0) {
    throw std::invalid_argument("ViT: patch size " + std::to_string(p) + " does not divide the image size " + std::to_string(h) +
                                "x" + std::to_string(w) + "; crop or pad the images to a multiple of it");
  }
  const I b = static_cast<I>(images.size(0)), cin = static_cast<I>(channels_), gh = static_cast<I>(h / p),
          gw = static_cast<I>(w / p), pp = static_cast<I>(p);
  // [B, Cin, gh, P, gw, P] -> [B, gh, gw, Cin, P, P] -> [B, N, Cin P P]
  const Tensor grid = permute(reshape(images, {b, cin, gh, pp, gw, pp}), {0, 2, 4, 1, 3, 5});
  return reshape(grid, {b, gh * gw, cin * pp * pp});
}

std::size_t ViT::tokens_read(const Batch& batch) const {
  const std::size_t patches = (batch.input.size(2) / patch_size_) * (batch.input.size(3) / patch_size_);
  return batch.input.size(0) * (patches + leading());
}

Tensor ViT::run(const Batch& batch, const HookScope& hooks) {
  const Tensor patches = patchify(batch.input);  // [B, N, Cin P P]
  const std::size_t n = patches.size(1), t = n + leading();
  if (t > encoder_config_.max_len) {
    throw std::invalid_argument("ViT: " + std::to_string(n) + " patches exceed the " + std::to_string(encoder_config_.max_len - leading()) +
                                " the model was built for (" + std::to_string(image_height_) + "x" + std::to_string(image_width_) +
                                " images)");
  }
  Tensor x = patch_embed->forward(patches);  // [B, N, C]
  if (class_token_) x = concat({broadcast_to(cls, {batch.input.size(0), 1, cls.size(2)}), x}, 1);  // [B, N+1, C]
  x = hooks("hook_embed", x) + slice(pos, 0, 0, static_cast<I>(t));
  return head->forward(pool(encoder->forward(x, Tensor(), hooks), batch));  // [B, K]
}

Tensor ViT::pool(const Tensor& hidden, const Batch&) const {
  if (!class_token_) return mean(hidden, 1);  // [B, C]
  return reshape(slice(hidden, 1, 0, 1), {static_cast<I>(hidden.size(0)), static_cast<I>(hidden.size(2))});
}

ATTNLAB_REGISTER_MODEL(ViT);

}  // namespace attnlab
