// How much memory an experiment will need, estimated from its config before anything is allocated, so
// that a size no machine can hold (batch_size: 1e11, d_model: 1e8, a .npy header's shape) is a config
// error naming the key instead of std::bad_alloc (or the kernel's OOM killer) after the run folder exists.
// The estimate is deliberately rough (a factor of two either way): it only has to tell 30 MB from 3 TB.
#pragma once

#include <string>
#include <utility>

#include "experiments/runner/config.hpp"

namespace attnlab {

struct MemoryEstimate {
  double parameters = 0;   // weights, gradients and two optimizer moments
  double activations = 0;  // what one training step keeps for its backward, and the logits
  double kernel = 0;       // the attention kernel's own parameters and working memory (its working_bytes)
  double patterns = 0;     // pattern capture: every layer's [heads, T, T] patterns of the probes
  double data = 0;         // a batch of inputs and targets
  double total() const { return parameters + activations + kernel + patterns + data; }
};

MemoryEstimate estimate_memory(const ExperimentConfig& config);

// The recurrent state of the model (Zoology's "state size"): the numbers its attention layers keep per
// sequence to continue it token by token, summed over layers at the model's sequence length: each kernel's
// StateSize, plus the short convolution's last K - 1 inputs of q, k, v.
double state_size(const ExperimentConfig& config);

// The physical memory of this machine, in bytes.
double physical_memory_bytes();

// When the estimate exceeds `limit` bytes: the dotted key most responsible (the one whose default would
// shrink the estimate most) and a message that names it and the sizes; {"", ""} when it fits.
std::pair<std::string, std::string> memory_problem(const ExperimentConfig& config, double limit);

}  // namespace attnlab
