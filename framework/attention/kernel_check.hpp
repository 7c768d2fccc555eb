// The float64 gradient check of a registered attention kernel, in every mode it supports (causal or
// not, with and without a key padding mask, with and without ALiBi's bias, and cross-attention: fewer
// queries than keys, not causal), over q, k, v, the layer input (kernels that read it) and the kernel's
// own parameters. Used by the registry-driven test suite and by `attnlab gradcheck`, for people adding
// kernels.
#pragma once

#include <string>
#include <vector>

#include "framework/autograd/gradcheck.hpp"

namespace attnlab {

struct KernelCheck {
  std::string kernel;
  bool causal = false;
  bool padded = false;
  bool cross = false;  // queries and keys of different lengths (not causal)
  bool alibi = false;  // with ALiBi's score bias (kernels that declare it)
  GradcheckResult result;
  std::string describe() const;  // "softmax causal padded: ok", "softmax cross: ok", plus the per-input report when it fails
};

// One check per supported mode, on q, k, v of shape [2, 2, 6, 4] drawn from `seed`; in cross mode q is
// [2, 2, 4, 4] and k, v are [2, 2, 6, 4].
std::vector<KernelCheck> check_kernel_gradients(const std::string& name, std::uint64_t seed = 1);

}  // namespace attnlab
