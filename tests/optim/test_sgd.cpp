// SGD against torch.optim.SGD's formulas: by hand for momentum and Nesterov, then longhand (SgdReference)
// across momentum, dampening, Nesterov and weight decay, in float64 and float32.
#include <gtest/gtest.h>

#include "tests/optim/optim_testing.hpp"

namespace attnlab::optim_testing {
namespace {

TEST(SGD, HandComputedMomentumAndNesterov) {
  // p = 1, g = 1, lr 0.1, momentum 0.9. Heavy ball: buf 1 -> 1.9; p 0.9 -> 0.71.
  // Nesterov: g + 0.9 buf = 1.9 then 2.71; p 0.81 -> 0.539.
  for (bool nesterov : {false, true}) {
    Tensor w = leaf({1.0});
    SGDOptions o;
    o.lr = 0.1;
    o.momentum = 0.9;
    o.nesterov = nesterov;
    SGD sgd({{"w", w, ParamKind::weight}}, o);
    set_grad(w, {1.0});
    sgd.step();
    EXPECT_NEAR(w.item(), nesterov ? 0.81 : 0.9, 1e-12);
    sgd.step();  // the gradient is still 1
    EXPECT_NEAR(w.item(), nesterov ? 0.539 : 0.71, 1e-12);
  }
}

TEST(SGD, MatchesTorchFormulas) {
  struct Case { double momentum, dampening; bool nesterov; double weight_decay; };
  for (const Case& c : {Case{0.0, 0.0, false, 0.1}, Case{0.9, 0.1, false, 0.01}, Case{0.9, 0.0, true, 0.01},
                        Case{0.5, 0.5, false, 0.0}}) {
    for (DType dtype : {DType::float64, DType::float32}) {
      SCOPED_TRACE("momentum " + std::to_string(c.momentum) + " dampening " + std::to_string(c.dampening) +
                   (c.nesterov ? " nesterov " : " ") + dtype_name(dtype));
      SGDOptions o;
      o.lr = 0.1;
      o.momentum = c.momentum;
      o.dampening = c.dampening;
      o.nesterov = c.nesterov;
      o.weight_decay = c.weight_decay;
      Tensor w = leaf(kStart, dtype);
      SGD sgd({{"w", w, ParamKind::weight}}, o);
      SgdReference reference{o, kStart};
      expect_matches(sgd, w, reference, dtype == DType::float64 ? 1e-12 : 1e-6);
    }
  }
}

}  // namespace
}  // namespace attnlab::optim_testing
