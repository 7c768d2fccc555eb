// Attention rollout (Abnar and Zuidema 2020) for a ViT: per layer the heads' patterns fused into one
// (mean, max or min over heads), optionally the weakest share of its entries dropped (vit-explain's
// discard_ratio, never the class token's attention to itself), plus the identity for the residual connection, the
// rows renormalised to sum to one (rows: a popular implementation divides the columns by mistake), and
// the layers multiplied from the first to the last. What the classifier reads is the map of where the
// model looked: the class token's row over the patches, or, for a ViT that pools the mean of its patches
// (model.pooling mean), the mean of the rows.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "framework/tensor/enum_names.hpp"
#include "framework/tensor/tensor.hpp"

namespace attnlab {

enum class HeadFusion { mean, max, min };
const EnumNames<HeadFusion>& head_fusion_names();
HeadFusion parse_head_fusion(const std::string& name);  // "mean" | "max" | "min"; std::invalid_argument otherwise
const char* head_fusion_name(HeadFusion fusion);

struct RolloutOptions {
  HeadFusion head_fusion = HeadFusion::mean;
  double discard_ratio = 0.0;  // [0, 1): the share of each layer's fused entries set to zero (the lowest)
};

// `layers`: one pattern per layer for one image, [H, T, T] (T = 1 + patches with the class token first,
// else T = patches). Returns the rollout [T, T] (float64), rows summing to one. The discard spares the
// class token's attention to itself.
Tensor attention_rollout(const std::vector<Tensor>& layers, const RolloutOptions& options, bool class_token = true);

// What the classifier reads of a rollout, over the patches, as a grid [side, side] scaled so its maximum
// is 1: the class token's row, or without one the mean of all rows (the pooled output's mix).
Tensor rollout_map(const Tensor& rollout, bool class_token = true);

// A PNG of `image` ([C, H, W] in [0, 1], C = 1 or 3) on the left and, on the right, the same image
// with `map` ([g, g], in [0, 1], each cell covering its patch) blended half and half over it on the
// viridis scale; each image pixel `scale` pixels wide. Throws on a write failure.
void write_rollout_png(const std::string& path, const Tensor& image, const Tensor& map, std::size_t scale = 8);

}  // namespace attnlab
