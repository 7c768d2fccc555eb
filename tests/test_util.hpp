// Helpers shared by the test suites: float64 random inputs and a gradcheck assertion that prints the
// worst element of each input when it fails.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "framework/autograd/gradcheck.hpp"
#include "framework/ops/ops.hpp"
#include "framework/tensor/random.hpp"

namespace attnlab::testing {

// A float64 leaf that requires grad, with values from N(0, 1) drawn from `seed`.
inline Tensor param(const Shape& shape, std::uint64_t seed, double scale = 1.0) {
  Generator gen(seed);
  Tensor t = randn(shape, gen, DType::float64, 0.0, scale);
  t.set_requires_grad(true);
  return t;
}

// A float64 leaf that requires grad with values in [low, high).
inline Tensor param_uniform(const Shape& shape, std::uint64_t seed, double low, double high) {
  Generator gen(seed);
  Tensor t = uniform(shape, gen, low, high, DType::float64);
  t.set_requires_grad(true);
  return t;
}

// `inputs` followed by every parameter of `module`, for gradchecks over both.
template <class M>
std::vector<Tensor> with_parameters(std::vector<Tensor> inputs, const M& module) {
  for (const auto& p : module.parameters()) inputs.push_back(p);
  return inputs;
}

inline ::testing::AssertionResult gradcheck_passes(const GradcheckFunction& f, const std::vector<Tensor>& inputs) {
  const GradcheckResult r = gradcheck(f, inputs);
  if (r.ok) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "gradcheck failed:\n" << r.report();
}

inline void expect_values(const Tensor& t, const std::vector<double>& expected, double tol = 1e-6) {
  const std::vector<double> v = t.to_vector();
  ASSERT_EQ(v.size(), expected.size());
  for (std::size_t i = 0; i < v.size(); ++i) EXPECT_NEAR(v[i], expected[i], tol) << "element " << i;
}

}  // namespace attnlab::testing
