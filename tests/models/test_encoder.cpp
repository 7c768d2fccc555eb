// Encoder layers and stacks: shapes, pre/post norm, causal stacks ignore the future, config checks, the
// blocks' named activations, float64 gradchecks over inputs and parameters.
#include <gtest/gtest.h>

#include "framework/models/encoder.hpp"
#include "tests/test_util.hpp"

namespace attnlab {
namespace {

EncoderConfig tiny(bool causal, NormPlacement norm) {
  EncoderConfig c;
  c.d_model = 4;
  c.n_heads = 2;
  c.n_layers = 2;
  c.ff_hidden = 6;
  c.max_len = 8;
  c.causal = causal;
  c.norm = norm;
  return c;
}

using testing::with_parameters;

TEST(Encoder, ShapesNamesAndPatterns) {
  Generator gen(0);
  Encoder enc(tiny(false, NormPlacement::pre), gen);
  HookRequest request;
  request.cache = {"blocks.*.attn.hook_pattern"};
  ActivationHooks hooks(request);
  const Tensor hidden = enc.forward(randn({3, 5, 4}, gen), Tensor(), HookScope(&hooks, ""));
  EXPECT_EQ(hidden.shape(), (Shape{3, 5, 4}));
  const auto patterns = hooks.take_cache();
  ASSERT_EQ(patterns.size(), 2u);
  EXPECT_EQ(patterns.at("blocks.1.attn.hook_pattern").shape(), (Shape{3, 2, 5, 5}));
  const auto params = enc.named_parameters();
  EXPECT_EQ(params.front().name, "blocks.0.norm1.weight");
  EXPECT_EQ(params.back().name, "final_norm.bias");
  Encoder post(tiny(false, NormPlacement::post), gen);
  EXPECT_FALSE(post.final_norm);
  EXPECT_EQ(post.parameter_count() + 8, enc.parameter_count());
  EXPECT_THROW(enc.forward(randn({1, 9, 4}, gen)), std::invalid_argument);  // longer than max_len
}

TEST(Encoder, ConfigErrorsNameTheFix) {
  EncoderConfig c = tiny(false, NormPlacement::pre);
  c.n_heads = 3;
  try {
    c.validate();
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "n_heads (3) must divide d_model (4)");
  }
  c = tiny(false, NormPlacement::pre);
  c.attention = "nope";
  EXPECT_THROW(c.validate(), std::invalid_argument);
  c = tiny(false, NormPlacement::pre);
  c.dropout = 1.0;
  EXPECT_THROW(c.validate(), std::invalid_argument);
}

TEST(Encoder, CausalStackIgnoresTheFuture) {
  for (NormPlacement norm : {NormPlacement::pre, NormPlacement::post}) {
    Generator gen(1);
    Encoder enc(tiny(true, norm), gen);
    enc.to(DType::float64);
    Tensor x = randn({1, 6, 4}, gen, DType::float64);
    const Tensor before = enc.forward(x);
    Tensor changed = x.clone();
    for (std::size_t c = 0; c < 4; ++c) changed.data<double>()[5 * 4 + c] = 3.0;
    const Tensor after = enc.forward(changed);
    for (std::size_t t = 0; t < 5; ++t)
      for (std::size_t c = 0; c < 4; ++c) EXPECT_EQ(before.at({0, t, c}), after.at({0, t, c}));
  }
}

// model.norm: none (Nanda et al.'s grokking model): no LayerNorm anywhere, the block is x + Attn(x), then
// + FF(h), the stack's output its last block's; gradients check.
TEST(Encoder, WithoutNormsTheBlockIsTheResidualSums) {
  Generator gen(3);
  Encoder enc(tiny(true, NormPlacement::none), gen);
  enc.to(DType::float64);
  for (const auto& [name, p] : enc.state_dict()) EXPECT_EQ(name.find("norm"), std::string::npos) << name;
  EXPECT_EQ(enc.final_norm, nullptr);
  HookRequest request;
  request.cache = {"blocks.*.hook_*"};
  ActivationHooks hooks(request);
  const Tensor x = randn({2, 4, 4}, gen, DType::float64);
  const Tensor out = enc.forward(x, Tensor(), HookScope(&hooks, ""));
  const auto c = hooks.take_cache();
  testing::expect_values(c.at("blocks.0.hook_resid_pre") + c.at("blocks.0.hook_attn_out"), c.at("blocks.0.hook_resid_mid").to_vector(), 1e-14);
  testing::expect_values(c.at("blocks.1.hook_resid_mid") + c.at("blocks.1.hook_mlp_out"), c.at("blocks.1.hook_resid_post").to_vector(), 1e-14);
  EXPECT_EQ(c.at("blocks.1.hook_resid_post").to_vector(), out.to_vector());
  EXPECT_TRUE(testing::gradcheck_passes([&](const auto& in) { return enc.forward(in[0]); },
                                        with_parameters({testing::param({2, 3, 4}, 1)}, enc)));
}

TEST(EncoderGradcheck, PreNormBidirectional) {
  Generator gen(2);
  Encoder enc(tiny(false, NormPlacement::pre), gen);
  enc.to(DType::float64);
  const Tensor padding = from_mask({false, false, false, true, false, false, false, false}, {2, 4});
  EXPECT_TRUE(testing::gradcheck_passes([&](const auto& in) { return enc.forward(in[0], padding); },
                                        with_parameters({testing::param({2, 4, 4}, 1)}, enc)));
}

TEST(EncoderGradcheck, PostNormCausal) {
  Generator gen(3);
  EncoderConfig c = tiny(true, NormPlacement::post);
  c.activation = Activation::relu;
  Encoder enc(c, gen);
  enc.to(DType::float64);
  EXPECT_TRUE(testing::gradcheck_passes([&](const auto& in) { return enc.forward(in[0]); },
                                        with_parameters({testing::param({2, 3, 4}, 1)}, enc)));
}

TEST(Encoder, WithoutBiasesHasGainsAndWeightsOnly) {
  // nanoGPT's bias=False: no bias in any Linear layer and no LayerNorm shift; gains stay.
  EncoderConfig c = tiny(false, NormPlacement::pre);
  c.bias = false;
  Generator gen(4);
  Encoder enc(c, gen);
  std::vector<std::string> names;
  for (const auto& p : enc.named_parameters()) {
    EXPECT_NE(p.kind, ParamKind::bias) << p.name;
    EXPECT_EQ(p.name.find(".bias"), std::string::npos) << p.name;
    names.push_back(p.name);
  }
  EXPECT_EQ(names.back(), "final_norm.weight");
  // Per layer: 2 gains (C), qkv (3 C^2), proj (C^2), fc1 (H C), fc2 (C H); then the final gain (C).
  const std::size_t d = 4, h = 6;
  EXPECT_EQ(enc.parameter_count(), 2 * (2 * d + 4 * d * d + 2 * h * d) + d);
}

TEST(EncoderGradcheck, PreNormCausalWithoutBiases) {
  Generator gen(5);
  EncoderConfig c = tiny(true, NormPlacement::pre);
  c.bias = false;
  Encoder enc(c, gen);
  enc.to(DType::float64);
  EXPECT_TRUE(testing::gradcheck_passes([&](const auto& in) { return enc.forward(in[0]); },
                                        with_parameters({testing::param({2, 3, 4}, 1)}, enc)));
}

TEST(Encoder, TheResidualStreamFlowsFromBlockToBlock) {
  for (NormPlacement norm : {NormPlacement::pre, NormPlacement::post}) {
    Generator gen(6);
    Encoder enc(tiny(true, norm), gen);
    enc.to(DType::float64);
    HookRequest request;
    request.cache = {"blocks.*.hook_*", "final_norm.hook_normalized"};
    ActivationHooks hooks(request);
    const Tensor out = enc.forward(randn({2, 4, 4}, gen, DType::float64), Tensor(), HookScope(&hooks, ""));
    const auto c = hooks.take_cache();
    EXPECT_EQ(c.at("blocks.1.hook_resid_pre").to_vector(), c.at("blocks.0.hook_resid_post").to_vector());
    if (norm == NormPlacement::pre) {
      // resid_mid = resid_pre + attn_out, resid_post = resid_mid + mlp_out, and the final norm's output is the stack's.
      testing::expect_values(c.at("blocks.0.hook_resid_pre") + c.at("blocks.0.hook_attn_out"), c.at("blocks.0.hook_resid_mid").to_vector(), 1e-14);
      testing::expect_values(c.at("blocks.1.hook_resid_mid") + c.at("blocks.1.hook_mlp_out"), c.at("blocks.1.hook_resid_post").to_vector(), 1e-14);
      EXPECT_EQ(c.at("final_norm.hook_normalized").to_vector(), out.to_vector());
    } else {
      EXPECT_EQ(c.count("final_norm.hook_normalized"), 0u);  // post-norm stacks have no final norm
      EXPECT_EQ(c.at("blocks.1.hook_resid_post").to_vector(), out.to_vector());
    }
  }
}

TEST(Encoder, WithoutFeedForwardBlocksAreAttentionAlone) {
  // model.feed_forward: false (Zoology's MQAR blocks): no ff, no norm2, no hook_mlp_out; resid_post =
  // resid_pre + attn_out (pre-norm) or norm1(resid_pre + attn_out) (post-norm).
  for (NormPlacement norm : {NormPlacement::pre, NormPlacement::post}) {
    EncoderConfig c = tiny(true, norm);
    c.feed_forward = false;
    Generator gen(7);
    Encoder enc(c, gen);
    enc.to(DType::float64);
    for (const auto& p : enc.named_parameters()) {
      EXPECT_EQ(p.name.find(".ff."), std::string::npos) << p.name;
      EXPECT_EQ(p.name.find(".norm2."), std::string::npos) << p.name;
    }
    const std::size_t d = 4;  // per layer: norm1 (2 C), qkv (3 C^2 + 3 C), proj (C^2 + C); pre-norm: the final norm (2 C)
    EXPECT_EQ(enc.parameter_count(), 2 * (2 * d + 4 * d * d + 4 * d) + (norm == NormPlacement::pre ? 2 * d : 0));
    HookRequest request;
    request.cache = {"blocks.*.hook_*"};
    ActivationHooks hooks(request);
    enc.forward(randn({2, 4, 4}, gen, DType::float64), Tensor(), HookScope(&hooks, ""));
    const auto cache = hooks.take_cache();
    EXPECT_EQ(cache.count("blocks.0.hook_mlp_out"), 0u);
    EXPECT_EQ(cache.count("blocks.0.hook_resid_mid"), 0u);
    const Tensor sum = cache.at("blocks.1.hook_resid_pre") + cache.at("blocks.1.hook_attn_out");
    testing::expect_values(norm == NormPlacement::pre ? sum : enc.blocks[1]->norm1->forward(sum),
                           cache.at("blocks.1.hook_resid_post").to_vector(), 1e-14);
    EXPECT_TRUE(testing::gradcheck_passes([&](const auto& in) { return enc.forward(in[0]); },
                                          with_parameters({testing::param({2, 3, 4}, 1)}, enc)));
  }
}

}  // namespace
}  // namespace attnlab
