#include "experiments/analysis/rollout.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

#include "framework/io/atomic_file.hpp"
#include "framework/io/image.hpp"

namespace attnlab {

const EnumNames<HeadFusion>& head_fusion_names() {
  static const EnumNames<HeadFusion> names{{"mean", HeadFusion::mean}, {"max", HeadFusion::max}, {"min", HeadFusion::min}};
  return names;
}

HeadFusion parse_head_fusion(const std::string& name) { return parse_enum(head_fusion_names(), name, "head fusion"); }

const char* head_fusion_name(HeadFusion fusion) { return enum_name(head_fusion_names(), fusion); }

namespace {

// One layer's heads [H, T, T] fused into [T, T]. Signed mixing (Linformer's) enters through its
// magnitude, as the pattern metrics read it: rollout composes how much each token draws on each other.
std::vector<double> fuse(const Tensor& layer, HeadFusion fusion) {
  const std::size_t heads = layer.size(0), cells = layer.size(1) * layer.size(2);
  std::vector<double> v = layer.to_vector();
  for (double& x : v) x = std::fabs(x);
  std::vector<double> fused(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(cells));
  for (std::size_t h = 1; h < heads; ++h)
    for (std::size_t i = 0; i < cells; ++i) {
      const double x = v[h * cells + i];
      fused[i] = fusion == HeadFusion::mean ? fused[i] + x : fusion == HeadFusion::max ? std::max(fused[i], x) : std::min(fused[i], x);
    }
  if (fusion == HeadFusion::mean)
    for (double& x : fused) x /= static_cast<double>(heads);
  return fused;
}

// vit-explain's discard: the floor(ratio * T^2) smallest entries set to 0, except entry 0 when it is
// the class token's attention to itself.
void discard_lowest(std::vector<double>& a, double ratio, bool class_token) {
  const std::size_t n = static_cast<std::size_t>(static_cast<double>(a.size()) * ratio);
  if (n == 0) return;
  std::vector<std::size_t> order(a.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) { return a[x] < a[y]; });
  for (std::size_t k = 0; k < n; ++k)
    if (order[k] != 0 || !class_token) a[order[k]] = 0.0;
}

}  // namespace

Tensor attention_rollout(const std::vector<Tensor>& layers, const RolloutOptions& options, bool class_token) {
  if (layers.empty()) throw std::invalid_argument("attention_rollout: no layers");
  if (!(options.discard_ratio >= 0 && options.discard_ratio < 1)) throw std::invalid_argument("attention_rollout: discard_ratio must be in [0, 1)");
  const std::size_t t = layers[0].size(1);
  std::vector<double> result(t * t, 0.0);
  for (std::size_t i = 0; i < t; ++i) result[i * t + i] = 1.0;
  for (const Tensor& layer : layers) {
    if (layer.dim() != 3 || layer.size(1) != t || layer.size(2) != t) throw std::invalid_argument("attention_rollout: layers must be [H, T, T] alike");
    std::vector<double> a = fuse(layer, options.head_fusion);
    discard_lowest(a, options.discard_ratio, class_token);
    for (std::size_t i = 0; i < t; ++i) {  // (A + I) / 2, each row renormalised to sum to one
      double row = 0;
      for (std::size_t j = 0; j < t; ++j) row += a[i * t + j] = (a[i * t + j] + (i == j ? 1.0 : 0.0)) / 2;
      for (std::size_t j = 0; j < t; ++j) a[i * t + j] /= row;
    }
    std::vector<double> next(t * t, 0.0);  // a x result: this layer mixes what the layers below mixed
    for (std::size_t i = 0; i < t; ++i)
      for (std::size_t k = 0; k < t; ++k)
        for (std::size_t j = 0; j < t; ++j) next[i * t + j] += a[i * t + k] * result[k * t + j];
    result.swap(next);
  }
  return from_vector(result, {t, t}, DType::float64);
}

Tensor rollout_map(const Tensor& rollout, bool class_token) {
  const std::size_t t = rollout.size(0), first = class_token ? 1 : 0, patches = t - first,
                    side = static_cast<std::size_t>(std::lround(std::sqrt(static_cast<double>(patches))));
  if (side * side != patches) throw std::invalid_argument("rollout_map: " + std::to_string(patches) + " patches are not a square grid");
  const std::vector<double> v = rollout.to_vector();
  std::vector<double> map(patches, 0.0);
  if (class_token) {
    std::copy(v.begin() + 1, v.begin() + static_cast<std::ptrdiff_t>(t), map.begin());
  } else {
    for (std::size_t i = 0; i < t; ++i)
      for (std::size_t j = 0; j < t; ++j) map[j] += v[i * t + j] / static_cast<double>(t);
  }
  const double top = *std::max_element(map.begin(), map.end());
  if (top > 0)
    for (double& x : map) x /= top;
  return from_vector(map, {side, side}, DType::float64);
}

void write_rollout_png(const std::string& path, const Tensor& image, const Tensor& map, std::size_t scale) {
  const std::size_t channels = image.size(0), h = image.size(1), w = image.size(2), g = map.size(0);
  if ((channels != 1 && channels != 3) || g == 0 || map.size(1) != g || scale == 0) {
    throw std::invalid_argument("write_rollout_png: an image [1 or 3, H, W] and a square map are needed");
  }
  // The image on the left, the map over it on the right (viridis blended half and half with the image).
  const std::vector<double> px = image.to_vector(), m = map.to_vector();
  const std::size_t width = 2 * w * scale + scale, height = h * scale;
  std::vector<unsigned char> rgb(width * height * 3, 255);
  for (std::size_t y = 0; y < height; ++y)
    for (std::size_t x = 0; x < w * scale; ++x) {
      const std::size_t iy = y / scale, ix = x / scale;
      unsigned char grey[3], heat[3];
      for (std::size_t c = 0; c < 3; ++c) {
        const double v = px[((channels == 3 ? c : 0) * h + iy) * w + ix];
        grey[c] = static_cast<unsigned char>(std::clamp(v, 0.0, 1.0) * 255.0);
      }
      viridis(m[(iy * g / h) * g + ix * g / w], heat);
      for (std::size_t c = 0; c < 3; ++c) {
        rgb[(y * width + x) * 3 + c] = grey[c];
        rgb[(y * width + w * scale + scale + x) * 3 + c] = static_cast<unsigned char>((grey[c] + heat[c]) / 2);
      }
    }
  write_file_atomically(path, encode_rgb_png(rgb, width, height));
}

}  // namespace attnlab
