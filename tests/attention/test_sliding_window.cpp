// Sliding-window attention and ALiBi inside the blocked softmax op, against the composed form
// (composed_attention.hpp) in float64, values and gradients to 1e-12: causal and bidirectional, several
// windows, key padding, sequences of several blocks. And ALiBi's slopes by the paper's rule.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "framework/attention/kernel.hpp"
#include "framework/attention/softmax/softmax_attention.hpp"
#include "framework/nn/positional.hpp"
#include "tests/attention/composed_attention.hpp"
#include "tests/test_util.hpp"

namespace attnlab {
namespace {

struct Band {
  std::size_t t, window;
  bool causal, alibi, padded;
};

class BandedSoftmax : public ::testing::TestWithParam<Band> {};

TEST_P(BandedSoftmax, EqualsTheComposedFormInValuesAndGradients) {
  const Band c = GetParam();
  constexpr std::size_t b = 2, h = 3, d = 4;
  const Tensor q = testing::param({b, h, c.t, d}, 1), k = testing::param({b, h, c.t, d}, 2), v = testing::param({b, h, c.t, d}, 3);
  const std::vector<double> slopes = c.alibi ? alibi_slopes(h) : std::vector<double>{};
  std::vector<bool> padded;
  Tensor mask;
  if (c.padded) {
    padded.assign(b * c.t, false);
    padded[1] = padded[c.t - 1] = padded[2 * c.t - 3] = true;
    mask = reshape(from_mask(padded, {b, c.t}), {static_cast<std::int64_t>(b), 1, 1, static_cast<std::int64_t>(c.t)});
  }
  const double scale = 0.5;
  const Tensor got = softmax_attention(q, k, v, scale, mask, c.causal, nullptr, ScoreBand{c.window, slopes});
  const Tensor want = testing::composed_attention(q, k, v, scale, c.window, c.causal, slopes, padded);
  testing::expect_values(got, want.to_vector(), 1e-12);
  // The composed path of the op itself (taken when the weights are asked for) agrees too.
  Tensor weights;
  testing::expect_values(softmax_attention(q, k, v, scale, mask, c.causal, &weights, ScoreBand{c.window, slopes}), want.to_vector(), 1e-12);
  const Tensor loss_weights = testing::param({b, h, c.t, d}, 4);
  const auto grads_of = [&](const Tensor& out) {
    for (const Tensor* t : {&q, &k, &v}) const_cast<Tensor*>(t)->zero_grad();
    sum(out * loss_weights).backward();
    std::vector<double> all;
    for (const Tensor* t : {&q, &k, &v})
      for (double g : t->grad().to_vector()) all.push_back(g);
    return all;
  };
  const auto g1 = grads_of(softmax_attention(q, k, v, scale, mask, c.causal, nullptr, ScoreBand{c.window, slopes}));
  const auto g2 = grads_of(testing::composed_attention(q, k, v, scale, c.window, c.causal, slopes, padded));
  ASSERT_EQ(g1.size(), g2.size());
  for (std::size_t i = 0; i < g1.size(); ++i) EXPECT_NEAR(g1[i], g2[i], 1e-12) << "gradient element " << i;
}

// 40 tokens with a window of 3: most tiles of scores hold no key of the band and are skipped; 600
// tokens span several blocks of query rows and chunks of keys.
INSTANTIATE_TEST_SUITE_P(Cases, BandedSoftmax,
                         ::testing::Values(Band{40, 3, true, false, false}, Band{40, 3, false, false, false}, Band{40, 1, true, true, true},
                                           Band{40, 7, false, true, true}, Band{40, 100, true, false, false}, Band{600, 0, true, true, false},
                                           Band{600, 0, false, true, true}, Band{600, 20, false, true, false}),
                         [](const ::testing::TestParamInfo<Band>& p) {
                           const Band& c = p.param;
                           return "t" + std::to_string(c.t) + "_w" + std::to_string(c.window) + (c.causal ? "_causal" : "_bidirectional") +
                                  (c.alibi ? "_alibi" : "") + (c.padded ? "_padded" : "");
                         });

TEST(Alibi, SlopesFollowThePapersRule) {
  const std::vector<double> eight = alibi_slopes(8);
  for (std::size_t h = 0; h < 8; ++h) EXPECT_DOUBLE_EQ(eight[h], std::pow(2.0, -double(h + 1)));  // 1/2 ... 1/256
  // 12 heads: the 8 slopes of 8 heads, then every other slope of 16 heads' sequence: 2^-0.5, 2^-1.5, ...
  const std::vector<double> twelve = alibi_slopes(12);
  ASSERT_EQ(twelve.size(), 12u);
  for (std::size_t h = 0; h < 8; ++h) EXPECT_DOUBLE_EQ(twelve[h], eight[h]);
  for (std::size_t i = 0; i < 4; ++i) EXPECT_DOUBLE_EQ(twelve[8 + i], std::pow(2.0, -0.5 * double(2 * i + 1)));
  EXPECT_DOUBLE_EQ(alibi_slopes(4)[0], 0.25);
}

TEST(SlidingWindow, KernelSeesOnlyItsWindow) {
  Generator gen(3);
  auto kernel = make_kernel("sliding_window", KernelSpec{2, 4, 12, true}, YAML::Load("{window: 2}"), gen);
  const Tensor x = randn({1, 2, 12, 4}, gen);
  const Tensor pattern = kernel->forward(x, x, x, AttentionContext{true, Tensor(), true}).pattern;
  for (std::size_t i = 0; i < 12; ++i)
    for (std::size_t j = 0; j < 12; ++j)
      if (j > i || i - j > 2) EXPECT_EQ(pattern.at({0, 1, i, j}), 0.0) << i << " <- " << j;
      else EXPECT_GT(pattern.at({0, 1, i, j}), 0.0) << i << " <- " << j;
}

TEST(Alibi, KernelsWithoutTheCapabilityAreRefusedNamingThoseWithIt) {
  KernelSpec spec{2, 4, 8, true};
  spec.alibi = true;
  try {
    check_kernel("linear", spec, ComponentOptions());
    FAIL();
  } catch (const std::invalid_argument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("linear cannot add ALiBi's distance bias"), std::string::npos) << m;
    EXPECT_NE(m.find("[sliding_window, softmax]"), std::string::npos) << m;
  }
  EXPECT_NO_THROW(check_kernel("sliding_window", spec, ComponentOptions()));
}

}  // namespace
}  // namespace attnlab
