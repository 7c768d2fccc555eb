// MultiHeadAttention: shapes, parameter count, permutation equivariance, no leak from the future,
// cross-attention, its named activations (q, k, v, pattern, z, result: cached, replaced, and equal to
// what they stand for), and float64 gradchecks over inputs and parameters.
#include <gtest/gtest.h>

#include "framework/attention/multi_head.hpp"
#include "tests/test_util.hpp"

namespace attnlab {
namespace {

std::shared_ptr<MultiHeadAttention> make_mha(std::size_t d, std::size_t heads, bool causal, bool bias = true,
                                             std::uint64_t seed = 0, std::shared_ptr<const PositionalEncoding> rotary = nullptr) {
  Generator gen(seed);
  auto kernel = make_kernel("softmax", KernelSpec{heads, d / heads, 16, causal}, YAML::Node(), gen);
  return std::make_shared<MultiHeadAttention>(d, heads, kernel, bias, gen, nullptr, std::move(rotary));
}

using testing::with_parameters;

// Self-attention with the named activations of `request`; the cache comes back in `cache`.
Tensor attend(MultiHeadAttention& mha, const Tensor& x, const AttentionContext& context, const HookRequest& request,
              std::map<std::string, Tensor>& cache) {
  ActivationHooks hooks(request);
  const Tensor out = mha.self_attention(x, context, HookScope(&hooks, ""));
  hooks.check_all_matched();
  cache = hooks.take_cache();
  return out;
}

Tensor pattern_of(MultiHeadAttention& mha, const Tensor& x, const Tensor& memory, const AttentionContext& context) {
  HookRequest request;
  request.cache = {"hook_pattern"};
  ActivationHooks hooks(request);
  if (memory.defined()) {
    mha.cross_attention(x, memory, context, HookScope(&hooks, ""));
  } else {
    mha.self_attention(x, context, HookScope(&hooks, ""));
  }
  return hooks.take_cache().at("hook_pattern");
}

TEST(MultiHeadAttention, ShapesAndNames) {
  auto mha = make_mha(8, 2, false);
  Generator gen(1);
  const Tensor x = randn({3, 5, 8}, gen);
  EXPECT_EQ(mha->self_attention(x, AttentionContext{}).shape(), (Shape{3, 5, 8}));
  EXPECT_EQ(pattern_of(*mha, x, Tensor(), AttentionContext{}).shape(), (Shape{3, 2, 5, 5}));
  std::vector<std::string> names;
  for (const auto& p : mha->named_parameters()) names.push_back(p.name);
  EXPECT_EQ(names, (std::vector<std::string>{"qkv.weight", "qkv.bias", "proj.weight", "proj.bias"}));
  EXPECT_THROW(make_mha(8, 3, false), std::invalid_argument);
  try {
    check_heads_divide(64, 3);
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "n_heads (3) must divide d_model (64)");
  }
}

TEST(MultiHeadAttention, SingleHeadParameterCount) {
  // d = d_k = d_v: W^Q, W^K, W^V hold d (2 d_k + d_v) parameters; the output projection adds d^2.
  const std::size_t d = 6;
  auto mha = make_mha(d, 1, false, /*bias=*/false);
  EXPECT_EQ(mha->qkv->parameter_count(), d * (2 * d + d));
  EXPECT_EQ(mha->parameter_count(), d * (2 * d + d) + d * d);
}

TEST(MultiHeadAttention, BidirectionalWithoutPositionsIsPermutationEquivariant) {
  auto mha = make_mha(8, 2, false);
  Generator gen(2);
  const Tensor x = randn({2, 5, 8}, gen, DType::float64);
  mha->to(DType::float64);
  const Tensor perm = from_indices({3, 0, 4, 1, 2}, {5});
  const Tensor y = mha->self_attention(x, AttentionContext{});
  const Tensor y_of_permuted = mha->self_attention(index_select(x, 1, perm), AttentionContext{});
  const auto a = index_select(y, 1, perm).to_vector(), b = y_of_permuted.to_vector();
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-12);
}

TEST(MultiHeadAttention, CausalOutputsIgnoreTheFuture) {
  auto mha = make_mha(8, 2, true);
  Generator gen(3);
  Tensor x = randn({1, 6, 8}, gen, DType::float64);
  mha->to(DType::float64);
  const Tensor before = mha->self_attention(x, AttentionContext{true, Tensor(), false});
  Tensor changed = x.clone();
  for (std::size_t c = 0; c < 8; ++c) changed.data<double>()[4 * 8 + c] += 10.0;  // token 4
  const Tensor after = mha->self_attention(changed, AttentionContext{true, Tensor(), false});
  for (std::size_t t = 0; t < 4; ++t)
    for (std::size_t c = 0; c < 8; ++c) EXPECT_EQ(before.at({0, t, c}), after.at({0, t, c})) << "token " << t;
  EXPECT_NE(before.at({0, 5, 0}), after.at({0, 5, 0}));  // later tokens do see it
}

TEST(MultiHeadAttention, CrossAttentionGivesRectangularPatterns) {
  auto mha = make_mha(8, 2, false);
  Generator gen(4);
  const Tensor x = randn({2, 3, 8}, gen), memory = randn({2, 7, 8}, gen);
  EXPECT_EQ(mha->cross_attention(x, memory, AttentionContext{}).shape(), (Shape{2, 3, 8}));
  const Tensor pattern = pattern_of(*mha, x, memory, AttentionContext{});
  EXPECT_EQ(pattern.shape(), (Shape{2, 2, 3, 7}));
  for (double v : sum(pattern, -1).to_vector()) EXPECT_NEAR(v, 1.0, 1e-6);
  EXPECT_THROW(mha->cross_attention(x, randn({1, 7, 8}, gen), AttentionContext{}), std::invalid_argument);
}

TEST(MultiHeadAttentionHooks, CachingChangesNothingAndHeadResultsSumToTheOutput) {
  auto mha = make_mha(8, 2, true);
  mha->to(DType::float64);
  Generator gen(5);
  const Tensor x = randn({2, 5, 8}, gen, DType::float64);
  const AttentionContext causal{true, Tensor(), false};
  const Tensor plain = mha->self_attention(x, causal);
  HookRequest request;
  request.cache = {"hook_*"};
  std::map<std::string, Tensor> cache;
  const Tensor hooked = attend(*mha, x, causal, request, cache);
  EXPECT_EQ(hooked.to_vector(), plain.to_vector());
  for (const char* name : {"hook_q", "hook_k", "hook_v", "hook_pattern", "hook_z", "hook_result"}) EXPECT_TRUE(cache.count(name)) << name;
  EXPECT_EQ(cache.at("hook_q").shape(), (Shape{2, 2, 5, 4}));
  EXPECT_EQ(cache.at("hook_result").shape(), (Shape{2, 2, 5, 8}));
  // Each head's contribution, summed over heads, plus the projection's bias, is the output.
  testing::expect_values(sum(cache.at("hook_result"), 1) + mha->proj->bias, plain.to_vector(), 1e-12);
  // z is the pattern times v.
  testing::expect_values(cache.at("hook_z"), matmul(cache.at("hook_pattern"), cache.at("hook_v")).to_vector(), 1e-12);
}

TEST(MultiHeadAttentionHooks, ZeroingAHeadsZEqualsZeroingItsOutputColumns) {
  auto mha = make_mha(8, 2, false);
  mha->to(DType::float64);
  Generator gen(6);
  const Tensor x = randn({2, 4, 8}, gen, DType::float64);
  HookRequest request;
  request.replace = {{"hook_z", [](const Tensor& z, const std::string&) {
                        Tensor out = z.clone();
                        double* p = out.data<double>();
                        for (std::size_t b = 0; b < 2; ++b)  // head 1 of every batch element: [B, H, T, D]
                          for (std::size_t i = 0; i < 4 * 4; ++i) p[(b * 2 + 1) * 16 + i] = 0.0;
                        return out;
                      }}};
  std::map<std::string, Tensor> cache;
  const Tensor ablated = attend(*mha, x, AttentionContext{}, request, cache);
  EXPECT_NE(ablated.to_vector(), mha->self_attention(x, AttentionContext{}).to_vector());
  {
    NoGradGuard no_grad;
    double* w = mha->proj->weight.data<double>();  // [C, C]: head 1 owns columns 4..7
    for (std::size_t r = 0; r < 8; ++r)
      for (std::size_t c = 4; c < 8; ++c) w[r * 8 + c] = 0.0;
  }
  testing::expect_values(ablated, mha->self_attention(x, AttentionContext{}).to_vector(), 1e-12);
}

TEST(MultiHeadAttentionHooks, AReplacedPatternMixesTheValues) {
  auto mha = make_mha(8, 2, false);
  mha->to(DType::float64);
  Generator gen(7);
  const Tensor x = randn({1, 3, 8}, gen, DType::float64);
  HookRequest same;
  same.replace = {{"hook_pattern", [](const Tensor& p, const std::string&) { return p; }}};
  same.cache = {"hook_v", "hook_z"};
  std::map<std::string, Tensor> cache;
  EXPECT_EQ(attend(*mha, x, AttentionContext{}, same, cache).to_vector(), mha->self_attention(x, AttentionContext{}).to_vector());
  HookRequest uniform;
  uniform.replace = {{"hook_pattern", [](const Tensor& p, const std::string&) { return full(p.shape(), 1.0 / 3, DType::float64); }}};
  uniform.cache = {"hook_v", "hook_z"};
  const Tensor mixed = attend(*mha, x, AttentionContext{}, uniform, cache);
  EXPECT_NE(mixed.to_vector(), mha->self_attention(x, AttentionContext{}).to_vector());  // the replacement acts
  const Tensor mean_v = matmul(full({1, 2, 3, 3}, 1.0 / 3, DType::float64), cache.at("hook_v"));
  testing::expect_values(cache.at("hook_z"), mean_v.to_vector(), 1e-12);
}

TEST(MultiHeadAttentionGradcheck, SelfAttention) {
  auto mha = make_mha(4, 2, false);
  mha->to(DType::float64);
  EXPECT_TRUE(testing::gradcheck_passes([&](const auto& in) { return mha->self_attention(in[0], AttentionContext{}); },
                                        with_parameters({testing::param({2, 3, 4}, 1)}, *mha)));
}

TEST(MultiHeadAttentionGradcheck, CausalWithPaddingAndRotary) {
  Generator gen(0);
  auto rope = std::make_shared<PositionalEncoding>(PositionalKind::rotary, 8, 4, 2, gen);
  auto mha = make_mha(4, 2, true, true, 0, rope);
  mha->to(DType::float64);
  rope->to(DType::float64);
  const Tensor padding = from_mask({false, false, false, true, false, false, false, false}, {2, 4});
  EXPECT_TRUE(testing::gradcheck_passes([&](const auto& in) { return mha->self_attention(in[0], AttentionContext{true, padding, false}); },
                                        with_parameters({testing::param({2, 4, 4}, 1)}, *mha)));
}

TEST(MultiHeadAttentionGradcheck, CrossAttention) {
  auto mha = make_mha(4, 2, false);
  mha->to(DType::float64);
  const Tensor padding = from_mask({false, false, true, false, false, false, false, false, false, false}, {2, 5});
  EXPECT_TRUE(testing::gradcheck_passes(
      [&](const auto& in) { return mha->cross_attention(in[0], in[1], AttentionContext{false, padding, false}); },
      with_parameters({testing::param({2, 3, 4}, 1), testing::param({2, 5, 4}, 2)}, *mha)));
}

TEST(MultiHeadAttentionGradcheck, ThroughAReplacedActivation) {
  // Gradients flow through replacements: head 0's z scaled by 0.5.
  auto mha = make_mha(4, 2, true);
  mha->to(DType::float64);
  HookRequest request;
  request.replace = {{"hook_z", [](const Tensor& z, const std::string&) {
                        Tensor scale = ones({1, 2, 1, 1}, DType::float64);
                        scale.data<double>()[0] = 0.5;
                        return z * scale;
                      }}};
  EXPECT_TRUE(testing::gradcheck_passes(
      [&](const auto& in) {
        std::map<std::string, Tensor> cache;
        return attend(*mha, in[0], AttentionContext{true, Tensor(), false}, request, cache);
      },
      with_parameters({testing::param({2, 3, 4}, 3)}, *mha)));
}

}  // namespace
}  // namespace attnlab

namespace attnlab {
namespace {

// The short causal convolution: y[t, c] = sum_j w[c, j] x[t - K + 1 + j, c], written out.
TEST(ShortConv, EqualsItsDefinitionAndPassesGradcheck) {
  const Tensor x = testing::param({2, 7, 5}, 1), w = testing::param({5, 3}, 2);
  const Tensor y = causal_depthwise_conv(x, w);
  std::vector<double> want(2 * 7 * 5, 0.0);
  for (std::size_t b = 0; b < 2; ++b)
    for (std::size_t t = 0; t < 7; ++t)
      for (std::size_t c = 0; c < 5; ++c)
        for (std::size_t j = 0; j < 3; ++j)
          if (t + j >= 2) want[(b * 7 + t) * 5 + c] += w.at({c, j}) * x.at({b, t + j - 2, c});
  testing::expect_values(y, want, 1e-12);
  EXPECT_TRUE(testing::gradcheck_passes([](const std::vector<Tensor>& in) { return causal_depthwise_conv(in[0], in[1]); }, {x, w}));
  EXPECT_THROW(causal_depthwise_conv(x, testing::param({4, 3}, 3)), std::invalid_argument);
}

// With the convolution on q, k, v, every kernel's module stays causal, and the weights are its parameters.
TEST(ShortConv, MultiHeadAttentionWithItSeesNoFutureToken) {
  for (const char* name : {"softmax", "delta"}) {
    Generator gen(4);
    auto kernel = make_kernel(name, KernelSpec{2, 4, 16, true}, YAML::Node(), gen);
    auto mha = std::make_shared<MultiHeadAttention>(8, 2, kernel, true, gen, nullptr, nullptr, AttentionSetup{4, false});
    mha->to(DType::float64);
    ASSERT_TRUE(mha->short_conv);
    EXPECT_EQ(mha->short_conv->weight.shape(), (Shape{24, 4}));
    const Tensor x = testing::param({1, 9, 8}, 5);
    const Tensor before = mha->self_attention(x, AttentionContext{true});
    Tensor changed = x.detach().clone();
    for (std::size_t c = 0; c < 8; ++c) changed.data<double>()[7 * 8 + c] += 3.0;  // token 7
    const Tensor after = mha->self_attention(changed, AttentionContext{true});
    for (std::size_t t = 0; t < 7; ++t)
      for (std::size_t c = 0; c < 8; ++c) EXPECT_EQ(before.at({0, t, c}), after.at({0, t, c})) << name << " token " << t;
    EXPECT_NE(before.at({0, 7, 0}), after.at({0, 7, 0})) << name;
    EXPECT_TRUE(testing::gradcheck_passes(
        [&](const std::vector<Tensor>& in) { return mha->self_attention(in[0], AttentionContext{true}); },
        with_parameters({testing::param({1, 5, 8}, 6)}, *mha)))
        << name;
  }
}

}  // namespace
}  // namespace attnlab
