// What the optimizer tests share: parameters from values, gradients set by hand, the error check, four
// steps of gradients, torch.optim's SGD and Adam written out longhand in double (the references the
// optimizers are held to), and a small module with every parameter kind.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "framework/nn/module.hpp"
#include "framework/ops/ops.hpp"
#include "framework/optim/optimizer.hpp"
#include "tests/test_util.hpp"

namespace attnlab::optim_testing {

using Values = std::vector<double>;

inline Tensor leaf(const Values& values, DType dtype = DType::float64) {
  return from_vector(values, {values.size()}, dtype).set_requires_grad(true);
}

inline void set_grad(Tensor& t, const Values& grad) { t.set_grad(from_vector(grad, t.shape(), t.dtype())); }

template <class F>
void expect_error(F&& f, const std::string& expected) {
  try {
    f();
    ADD_FAILURE() << "expected an error containing '" << expected << "'";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
  }
}

// Four steps' worth of gradients for a 3-element parameter, small enough that eps matters when it is 1e-3.
inline const std::vector<Values> kGrads = {
    {0.5, -1.0, 2.0e-3}, {0.25, 0.75, -1.5e-3}, {-0.3, 0.1, 0.9e-3}, {1.0, -2.0, 0.0}};
inline const Values kStart = {1.0, -2.0, 0.5};

// torch.optim.SGD, longhand.
struct SgdReference {
  SGDOptions o;
  Values p;
  Values buffer = Values(p.size(), 0.0);
  bool first = true;

  void step(const Values& grad, double lr) {
    for (std::size_t i = 0; i < p.size(); ++i) {
      double g = grad[i] + o.weight_decay * p[i];
      if (o.momentum != 0.0) {
        buffer[i] = first ? g : o.momentum * buffer[i] + (1.0 - o.dampening) * g;
        g = o.nesterov ? g + o.momentum * buffer[i] : buffer[i];
      }
      p[i] -= lr * g;
    }
    first = false;
  }
};

// Adam as in the paper, with torch's L2 (added to the gradient) or AdamW's decoupled decay.
struct AdamReference {
  double beta1, beta2, eps, l2, decoupled;
  Values p;
  Values m = Values(p.size(), 0.0), v = Values(p.size(), 0.0);
  int t = 0;

  void step(const Values& grad, double lr) {
    ++t;
    for (std::size_t i = 0; i < p.size(); ++i) {
      p[i] = p[i] - lr * decoupled * p[i];
      const double g = grad[i] + l2 * p[i];
      m[i] = beta1 * m[i] + (1.0 - beta1) * g;
      v[i] = beta2 * v[i] + (1.0 - beta2) * g * g;
      const double m_hat = m[i] / (1.0 - std::pow(beta1, t));
      const double v_hat = v[i] / (1.0 - std::pow(beta2, t));
      p[i] -= lr * m_hat / (std::sqrt(v_hat) + eps);
    }
  }
};

// Runs `optimizer` and `reference` side by side over kGrads (lr halved before the third step).
template <class Reference>
void expect_matches(Optimizer& optimizer, Tensor& param, Reference& reference, double tol) {
  for (std::size_t k = 0; k < kGrads.size(); ++k) {
    if (k == 2) optimizer.set_lr(optimizer.lr() / 2);
    set_grad(param, kGrads[k]);
    optimizer.step();
    reference.step(kGrads[k], optimizer.lr());
    testing::expect_values(param, reference.p, tol);
  }
  EXPECT_EQ(optimizer.step_count(), kGrads.size());
}

// A module with every parameter kind and a dotted name.
class TinyBlock : public Module {
 public:
  explicit TinyBlock(Generator& gen) {
    weight = register_parameter("weight", randn({3, 2}, gen), ParamKind::weight);
    bias = register_parameter("bias", randn({2}, gen), ParamKind::bias);
  }
  Tensor weight, bias;
};

class TinyModel : public Module {
 public:
  explicit TinyModel(Generator& gen) {
    tok_emb = register_parameter("tok_emb", randn({5, 3}, gen), ParamKind::embedding);
    norm_gain = register_parameter("norm_gain", randn({2}, gen), ParamKind::norm);
    block = register_module("block", std::make_shared<TinyBlock>(gen));
  }
  Tensor tok_emb, norm_gain;
  std::shared_ptr<TinyBlock> block;
};

}  // namespace attnlab::optim_testing
