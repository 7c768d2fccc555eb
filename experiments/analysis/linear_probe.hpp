// Linear probes of what a layer's residual stream holds (Alain and Bengio 2016; the tutorials' "early
// layers positional, later layers task-specific"): a multinomial logistic regression trained with
// attnlab's own autograd on cached activations, scored on held-out rows it never trained on.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "framework/tensor/tensor.hpp"

namespace attnlab {

struct LinearProbeOptions {
  std::size_t steps = 300;        // full-batch AdamW steps
  double lr = 0.05;
  double weight_decay = 1e-3;
  double held_out_fraction = 0.25;
  std::uint64_t seed = 0;
};

struct LinearProbeResult {
  double train_accuracy = 0, held_out_accuracy = 0;
  double majority_accuracy = 0;   // the held-out share of the training rows' most common label (chance)
  std::size_t classes = 0, train_rows = 0, held_out_rows = 0;
};

// Trains a probe from `features` [N, C] (float32, standardised inside with the training rows' mean and
// spread) to `labels` (N values in [0, classes)). `groups` (N values, e.g. the example each row comes
// from; empty: each row its own) decides the split: rows of one group are all training or all held-out,
// so a probe cannot pass by recognising the example. Throws std::invalid_argument for mismatched sizes
// or fewer than two groups.
LinearProbeResult train_linear_probe(const Tensor& features, const std::vector<std::int64_t>& labels, std::size_t classes,
                                     const std::vector<std::int64_t>& groups, const LinearProbeOptions& options = {});

}  // namespace attnlab
