// gradcheck: compares reverse-mode gradients with central finite differences, in float64, the way
// torch.autograd.gradcheck does. For users extending attnlab with their own ops, modules and kernels.
//
// The function's output y is reduced to the scalar L = sum(y * u) with a random, non-uniform u drawn from
// the seed, so a backward that mixes up elements cannot pass by symmetry. Every input that requires grad
// is checked element by element: analytic dL/dx against (L(x + eps) - L(x - eps)) / (2 eps), passing when
// |analytic - numeric| <= atol + rtol * |numeric|.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "framework/tensor/tensor.hpp"

namespace attnlab {

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-5;
  double rtol = 1e-3;
  std::uint64_t seed = 0;  // for the upstream gradient u
};

// The worst element of one checked input.
struct GradcheckInputReport {
  std::size_t input = 0;            // position in the inputs vector
  std::vector<std::size_t> index;   // multi-index of the worst element
  double analytic = 0.0;
  double numeric = 0.0;
  double excess = 0.0;              // |analytic - numeric| - (atol + rtol |numeric|); > 0 fails
  bool ok = true;
};

struct GradcheckResult {
  bool ok = true;
  std::vector<GradcheckInputReport> inputs;  // one per input that requires grad
  std::string report() const;                // one line per checked input
};

using GradcheckFunction = std::function<Tensor(const std::vector<Tensor>&)>;

// Throws std::invalid_argument for a float32 input that requires grad (finite differences in float32 are
// too coarse for these tolerances: the classic false failure), or when no input requires grad.
// The inputs' data is perturbed in place and restored; their .grad is left as it was.
GradcheckResult gradcheck(const GradcheckFunction& f, const std::vector<Tensor>& inputs,
                          const GradcheckOptions& options = {});

}  // namespace attnlab
