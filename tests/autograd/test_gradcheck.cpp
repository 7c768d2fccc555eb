// gradcheck itself: it passes correct backwards, catches wrong ones with a useful report, and refuses
// float32.
#include <gtest/gtest.h>

#include "framework/autograd/node.hpp"
#include "tests/test_util.hpp"

namespace attnlab {
namespace {

// x * x with a backward that is wrong in one element: the checker must find exactly that element.
Tensor square_with_bug(const Tensor& x) {
  Tensor out = x.detach().clone();
  {
    NoGradGuard no_grad;
    out = mul(x, x);
  }
  record(out, "square_with_bug", {x}, [x = x.detach()](const Tensor& g) {
    Tensor grad = mul(mul(g, x), 2.0);
    grad.data<double>()[4] += 0.01;
    return std::vector<Tensor>{grad};
  });
  return out;
}

// The custom op of docs/autograd.md, checked the way the docs say.
Tensor cube(const Tensor& x) {
  Tensor out;
  {
    NoGradGuard no_grad;
    out = x * x * x;
  }
  if (needs_grad({&x})) {
    record(out, "cube", {x}, [x = x.detach()](const Tensor& g) { return std::vector<Tensor>{g * x * x * 3.0}; });
  }
  return out;
}

TEST(Gradcheck, CustomOpFromTheDocs) {
  EXPECT_TRUE(testing::gradcheck_passes([](const auto& in) { return cube(in[0]); }, {testing::param({3, 4}, 0)}));
}

TEST(Gradcheck, PassesACorrectBackward) {
  Tensor x = testing::param({2, 3}, 1);
  Tensor y = testing::param({3}, 2);
  EXPECT_TRUE(testing::gradcheck_passes([](const auto& in) { return mul(in[0], exp(in[1])); }, {x, y}));
}

TEST(Gradcheck, CatchesAWrongBackwardAndNamesTheElement) {
  Tensor x = testing::param({2, 3}, 1);
  const GradcheckResult r = gradcheck([](const auto& in) { return square_with_bug(in[0]); }, {x});
  ASSERT_FALSE(r.ok);
  ASSERT_EQ(r.inputs.size(), 1u);
  EXPECT_EQ(r.inputs[0].index, (std::vector<std::size_t>{1, 1}));  // flat element 4 of [2, 3]
  EXPECT_NE(r.report().find("MISMATCH"), std::string::npos);
  EXPECT_GT(std::fabs(r.inputs[0].analytic - r.inputs[0].numeric), 1e-3);
}

TEST(Gradcheck, RefusesFloat32) {
  Tensor x = ones({2}).set_requires_grad(true);
  try {
    gradcheck([](const auto& in) { return exp(in[0]); }, {x});
    FAIL() << "expected an error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("float64"), std::string::npos) << e.what();
  }
}

TEST(Gradcheck, RestoresInputsAndTheirGradients) {
  Tensor x = testing::param({4}, 5);
  const std::vector<double> before = x.to_vector();
  x.set_grad(ones({4}, DType::float64));
  EXPECT_TRUE(testing::gradcheck_passes([](const auto& in) { return tanh(in[0]); }, {x}));
  EXPECT_EQ(x.to_vector(), before);
  testing::expect_values(x.grad(), {1, 1, 1, 1});
}

TEST(Gradcheck, ChecksOnlyInputsThatRequireGrad) {
  Tensor x = testing::param({3}, 1);
  Tensor c = ones({3}, DType::float32);  // a constant may even be float32
  const GradcheckResult r = gradcheck([](const auto& in) { return mul(in[0], in[1].to(DType::float64)); }, {x, c});
  EXPECT_TRUE(r.ok) << r.report();
  EXPECT_EQ(r.inputs.size(), 1u);
}

}  // namespace
}  // namespace attnlab
