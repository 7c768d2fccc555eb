// The sparse kernel: equal to softmax when the window covers the sequence, exact zeros outside its
// pattern, and the pattern itself (window, summary keys, global tokens).
#include <gtest/gtest.h>

#include "framework/attention/kernel.hpp"
#include "tests/test_util.hpp"

namespace attnlab {
namespace {

std::shared_ptr<AttentionKernel> kernel(const std::string& name, bool causal, const std::string& options = "") {
  Generator gen(0);
  return make_kernel(name, KernelSpec{2, 4, 32, causal}, options.empty() ? YAML::Node() : YAML::Load(options), gen);
}

TEST(SparseKernel, FullWindowEqualsSoftmax) {
  for (bool causal : {false, true}) {
    Generator gen(1);
    const Tensor q = randn({2, 2, 7, 4}, gen, DType::float64), k = randn({2, 2, 7, 4}, gen, DType::float64),
                 v = randn({2, 2, 7, 4}, gen, DType::float64);
    const Tensor padding = from_mask({false, false, true, false, false, false, false, false, false, false, false, false, false, true},
                                     {2, 7});
    const AttentionContext context{causal, padding, true};
    const AttentionResult a = kernel("sparse", causal, "window: 7")->forward(q, k, v, context);
    const AttentionResult b = kernel("softmax", causal)->forward(q, k, v, context);
    const auto x = a.output.to_vector(), y = b.output.to_vector();
    for (std::size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(x[i], y[i], 1e-12) << "causal " << causal;
    const auto pa = a.pattern.to_vector(), pb = b.pattern.to_vector();
    for (std::size_t i = 0; i < pa.size(); ++i) EXPECT_NEAR(pa[i], pb[i], 1e-12);
  }
}

TEST(SparseKernel, PatternIsWindowPlusSummaryPlusGlobalWithExactZerosElsewhere) {
  Generator gen(2);
  const std::size_t t = 16;
  const Tensor q = randn({1, 1, t, 4}, gen), k = randn({1, 1, t, 4}, gen), v = randn({1, 1, t, 4}, gen);
  const AttentionResult r = kernel("sparse", true, "{window: 2, stride: 4, global_tokens: 1}")
                                ->forward(q, k, v, AttentionContext{true, Tensor(), true});
  for (std::size_t i = 0; i < t; ++i)
    for (std::size_t j = 0; j < t; ++j) {
      const bool allowed = j <= i && (i - j <= 2 || j % 4 == 3 || j == 0 || i == 0);  // window 2, stride 4, 1 global
      if (allowed) {
        EXPECT_GT(r.pattern.at({0, 0, i, j}), 0.0) << i << "," << j;
      } else {
        EXPECT_EQ(r.pattern.at({0, 0, i, j}), 0.0) << i << "," << j;
      }
    }
}

TEST(SparseKernel, DefaultStrideKeepsTheSummaryKeysFixed) {
  // window 0, 4 summaries over 32 tokens: stride 8, so the last query sees itself and keys 7, 15, 23, 31.
  Generator gen(5);
  const Tensor x = randn({1, 1, 32, 4}, gen);
  const AttentionResult r = kernel("sparse", true, "{window: 0, summaries: 4}")->forward(x, x, x, AttentionContext{true, Tensor(), true});
  std::vector<std::size_t> seen;
  for (std::size_t j = 0; j < 32; ++j)
    if (r.pattern.at({0, 0, 31, j}) > 0) seen.push_back(j);
  EXPECT_EQ(seen, (std::vector<std::size_t>{7, 15, 23, 31}));
}

// A query's keys depend on its position, not on the sequence's length: the forward over a prefix gives the
// prefix's rows of the whole sequence's (the default stride is set by max_len, 32 here: stride 8).
TEST(SparseKernel, APrefixGetsTheWholeSequencesOutputs) {
  Generator gen(6);
  const Tensor q = randn({1, 2, 32, 4}, gen, DType::float64), k = randn({1, 2, 32, 4}, gen, DType::float64),
               v = randn({1, 2, 32, 4}, gen, DType::float64);
  auto sparse = kernel("sparse", true, "{window: 1, summaries: 4}");
  sparse->to(DType::float64);
  const std::vector<double> whole = sparse->forward(q, k, v, AttentionContext{true}).output.to_vector();
  for (std::int64_t t : {5, 13, 17, 31}) {
    const Tensor out = sparse->forward(slice(q, 2, 0, t), slice(k, 2, 0, t), slice(v, 2, 0, t), AttentionContext{true}).output;
    for (std::size_t h = 0; h < 2; ++h)
      for (std::size_t i = 0; i < static_cast<std::size_t>(t); ++i)
        for (std::size_t c = 0; c < 4; ++c) ASSERT_EQ(out.at({0, h, i, c}), whole[(h * 32 + i) * 4 + c]) << "t " << t << " query " << i;
  }
}

TEST(SparseKernel, RejectsCrossAttentionAndBadOptions) {
  Generator gen(3);
  EXPECT_THROW(kernel("sparse", false)->forward(randn({1, 2, 3, 4}, gen), randn({1, 2, 5, 4}, gen), randn({1, 2, 5, 4}, gen), {}),
               std::invalid_argument);
  EXPECT_THROW(kernel("sparse", false, "summaries: 0"), std::exception);
  EXPECT_THROW(kernel("sparse", false, "widow: 3"), std::exception);
}

TEST(SparseKernelGradcheck, NarrowPatternCausalAndNot) {
  for (bool causal : {false, true}) {
    auto k = kernel("sparse", causal, "{window: 1, stride: 3, global_tokens: 1}");
    const Tensor padding = from_mask({false, false, false, false, true, false, false, false, false, false, false, false, false, false},
                                     {2, 7});
    EXPECT_TRUE(testing::gradcheck_passes(
        [&](const auto& in) { return k->forward(in[0], in[1], in[2], AttentionContext{causal, padding, false}).output; },
        {testing::param({2, 2, 7, 4}, 1), testing::param({2, 2, 7, 4}, 2), testing::param({2, 2, 7, 4}, 3)}))
        << "causal " << causal;
  }
}

}  // namespace
}  // namespace attnlab
