// CausalLM and the classifiers: shapes, parameter counts, generation, padding handling, tied embeddings,
// gradchecks, and the named activations of a model (cached, replaced, missing, gradients through them).
#include <gtest/gtest.h>

#include <filesystem>
#include <limits>

#include "framework/io/checkpoint.hpp"
#include "framework/models/text_models.hpp"
#include "framework/optim/optimizer.hpp"
#include "tests/test_util.hpp"

namespace attnlab {
namespace {

// A model's config and the shape of the data it is built for.
struct Spec {
  ModelConfig config;
  DataShape shape;
};

// A tiny stack for `vocab` tokens in sequences of up to `max_len` (and `classes` labels).
Spec tiny(std::size_t vocab, std::size_t max_len = 8, std::size_t classes = 0) {
  Spec s;
  s.config.encoder.d_model = 4;
  s.config.encoder.n_heads = 2;
  s.config.encoder.n_layers = 1;
  s.config.encoder.ff_hidden = 8;
  s.shape.vocab_size = vocab;
  s.shape.num_classes = classes ? classes : vocab;
  s.shape.max_len = max_len;
  return s;
}

std::vector<Tensor> parameters_of(const Module& m) { return m.parameters(); }

// nanoGPT's shakespeare_char CPU sizes: 65 characters, width 128, 4 heads, 4 layers, block 64.
Spec shakespeare_sizes() {
  Spec s = tiny(65, 64);
  s.config.encoder.d_model = 128;
  s.config.encoder.n_heads = 4;
  s.config.encoder.n_layers = 4;
  s.config.encoder.ff_hidden = 0;
  return s;
}

TEST(CausalLM, ParameterCountMatchesTheGptReference) {
  // The model of scripts/bench/torch_gpt.py: V*C + T*C + L*(12 C^2 + 13 C) + 2C + C*V.
  const Spec spec = shakespeare_sizes();
  Generator gen(0);
  CausalLM model(spec.config, spec.shape, gen);
  const std::size_t v = 65, c = 128, t = 64, l = 4;
  EXPECT_EQ(model.parameter_count(), v * c + t * c + l * (12 * c * c + 13 * c) + 2 * c + c * v);
  Tensor ids = from_indices(std::vector<std::int64_t>(2 * 10, 3), {2, 10});
  EXPECT_EQ(model.logits(ids).shape(), (Shape{2, 10, 65}));
}

TEST(CausalLM, TiedEmbeddingsAreOneParameter) {
  Spec spec = shakespeare_sizes();
  spec.config.encoder.bias = false;
  spec.config.kind.options.set("tie_embeddings", "true");
  Generator gen(0);
  CausalLM model(spec.config, spec.shape, gen);
  EXPECT_TRUE(model.head->weight.same(model.body->tok->weight));
  // nanoGPT's shakespeare_char CPU model (bias=False): V*C + T*C + L*(12 C^2 + 2 C) + C.
  const std::size_t v = 65, c = 128, t = 64, l = 4;
  EXPECT_EQ(model.parameter_count(), v * c + t * c + l * (12 * c * c + 2 * c) + c);
  std::size_t listed = 0;
  for (const auto& p : model.named_parameters()) {
    listed += p.tensor.same(model.body->tok->weight);
    EXPECT_NE(p.name, "head.weight");
  }
  EXPECT_EQ(listed, 1u);
  const auto state = model.state_dict();
  EXPECT_TRUE(state.count("body.tok.weight"));
  EXPECT_FALSE(state.count("head.weight"));
  auto std_of = [](const Tensor& w) { return std::sqrt(var(reshape(w, {-1}), 0).item()); };
  EXPECT_NEAR(std_of(model.body->tok->weight), 0.02, 0.002);  // GPT-2's embedding init
}

TEST(CausalLM, TiedEmbeddingsSurviveAnOptimizerStepAndACheckpoint) {
  Spec spec = tiny(7, 4);
  spec.config.kind.options.set("tie_embeddings", "true");
  Generator gen(1);
  CausalLM model(spec.config, spec.shape, gen);
  AdamWOptions options;
  options.decay_kinds = {ParamKind::weight, ParamKind::embedding};
  AdamW optimizer(model.named_parameters(), options);
  const Tensor ids = from_indices({0, 4, 2, 1, 3, 6, 5, 2}, {2, 4}), targets = from_indices({4, 2, 1, 3, 6, 5, 2, 0}, {2, 4});
  const std::vector<double> before = model.body->tok->weight.to_vector();
  optimizer.zero_grad();
  model.loss(ids, targets).backward();
  optimizer.step();
  EXPECT_NE(model.body->tok->weight.to_vector(), before);
  EXPECT_TRUE(model.head->weight.same(model.body->tok->weight));

  const std::string path = ::testing::TempDir() + "attnlab_tied.ckpt";
  Checkpoint ck;
  ck.tensors = model.state_dict();
  save_checkpoint(path, ck);
  Generator other(99);
  CausalLM restored(spec.config, spec.shape, other);
  restored.load_state_dict(load_checkpoint(path).tensors);
  std::filesystem::remove(path);
  EXPECT_TRUE(restored.head->weight.same(restored.body->tok->weight));  // still one tensor
  EXPECT_EQ(restored.head->weight.to_vector(), model.body->tok->weight.to_vector());
  restored.eval();
  model.eval();
  EXPECT_EQ(restored.logits(ids).to_vector(), model.logits(ids).to_vector());
  // An untied model's state has head.weight, which a tied model does not take.
  Spec untied = spec;
  untied.config.kind.options.set("tie_embeddings", "false");
  Generator g3(2);
  CausalLM separate(untied.config, untied.shape, g3);
  EXPECT_THROW(restored.load_state_dict(separate.state_dict()), std::invalid_argument);
}

TEST(CausalLM, GptInitScalesResidualProjections) {
  Spec spec = tiny(50);
  spec.config.encoder.d_model = 64;
  spec.config.encoder.n_layers = 8;
  Generator gen(0);
  CausalLM model(spec.config, spec.shape, gen);
  auto std_of = [](const Tensor& t) { return std::sqrt(var(reshape(t, {-1}), 0).item()); };
  for (const auto& p : model.named_parameters()) {
    if (p.name == "body.encoder.blocks.0.attn.proj.weight") {
      EXPECT_NEAR(std_of(p.tensor), 0.02 / 4.0, 0.001);
    } else if (p.name == "body.encoder.blocks.0.attn.qkv.weight") {
      EXPECT_NEAR(std_of(p.tensor), 0.02, 0.002);
    } else if (p.name == "body.encoder.blocks.0.attn.qkv.bias") {
      EXPECT_EQ(max(p.tensor).item(), 0.0);
      EXPECT_EQ(-max(neg(p.tensor)).item(), 0.0);
    }
  }
}

TEST(CausalLM, GenerateIsSeededGreedyAtTemperatureZeroAndRespectsTopK) {
  const Spec spec = tiny(7, 4);
  Generator gen(0);
  CausalLM model(spec.config, spec.shape, gen);
  Generator g1(5), g2(5);
  const auto a = model.generate({1, 2}, 10, 1.0, 0, g1), b = model.generate({1, 2}, 10, 1.0, 0, g2);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.size(), 10u);  // longer than max_len: the context window slides
  // top_k = 1 is greedy whatever the temperature.
  Generator g3(1), g4(2);
  EXPECT_EQ(model.generate({3}, 6, 2.0, 1, g3), model.generate({3}, 6, 0.0, 0, g4));
  EXPECT_TRUE(model.is_training());  // mode restored
  EXPECT_THROW(model.generate({9}, 1, 1.0, 0, g1), std::invalid_argument);
}

// Weights that diverged give NaN scores: generation refuses them rather than picking token 0 every time.
TEST(CausalLM, GenerateRefusesScoresThatAreNotFinite) {
  const Spec spec = tiny(7, 4);
  Generator gen(0);
  CausalLM model(spec.config, spec.shape, gen);
  model.head->weight.data<float>()[0] = std::numeric_limits<float>::quiet_NaN();
  for (double temperature : {0.0, 1.0}) {
    Generator g(1);
    try {
      model.generate({1, 2}, 3, temperature, 0, g);
      ADD_FAILURE() << "generated from NaN scores";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("generate: the model's next-token scores are not finite (NaN)"), std::string::npos) << e.what();
    }
  }
}

TEST(CausalLM, GenerateShowsEachTokenAsItIsPicked) {
  const Spec spec = tiny(7, 4);
  Generator gen(0);
  CausalLM model(spec.config, spec.shape, gen);
  Generator g1(5), g2(5);
  std::vector<std::int64_t> seen;
  const auto returned = model.generate({1, 2}, 10, 1.0, 0, g1, Decoding::cached, [&](std::int64_t id) { seen.push_back(id); });
  EXPECT_EQ(seen, returned);
  EXPECT_EQ(returned, model.generate({1, 2}, 10, 1.0, 0, g2));  // watching changes nothing
  // A watcher that throws ends the generation there (sample's closed output): no token after it is picked.
  std::size_t calls = 0;
  EXPECT_THROW(model.generate({1}, 10, 1.0, 0, g1, Decoding::cached,
                              [&](std::int64_t) {
                                if (++calls == 3) throw std::runtime_error("closed");
                              }),
               std::runtime_error);
  EXPECT_EQ(calls, 3u);
  EXPECT_TRUE(model.is_training());  // mode restored on the way out
}

TEST(TextModelsGradcheck, CausalLM) {
  const Spec spec = tiny(5);
  Generator gen(1);
  CausalLM model(spec.config, spec.shape, gen);
  model.to(DType::float64);
  const Tensor ids = from_indices({0, 4, 2, 1, 3, 3}, {2, 3}), targets = from_indices({4, 2, 1, 3, 3, 0}, {2, 3});
  EXPECT_TRUE(testing::gradcheck_passes([&](const auto&) { return model.loss(ids, targets); }, parameters_of(model)));
}

TEST(TextModelsGradcheck, CausalLMWithTiedEmbeddingsAndNoBiases) {
  // The tied weight gets the gradient of both uses: the embedding lookup and the output layer.
  Spec spec = tiny(5);
  spec.config.encoder.bias = false;
  spec.config.kind.options.set("tie_embeddings", "true");
  Generator gen(1);
  CausalLM model(spec.config, spec.shape, gen);
  model.to(DType::float64);
  ASSERT_TRUE(model.head->weight.same(model.body->tok->weight));
  const Tensor ids = from_indices({0, 4, 2, 1, 3, 3}, {2, 3}), targets = from_indices({4, 2, 1, 3, 3, 0}, {2, 3});
  EXPECT_TRUE(testing::gradcheck_passes([&](const auto&) { return model.loss(ids, targets); }, parameters_of(model)));
}

TEST(TextModelsGradcheck, CausalLMWithRotary) {
  Spec spec = tiny(5);
  spec.config.kind.options.set("positional", "rotary");
  Generator gen(1);
  CausalLM model(spec.config, spec.shape, gen);
  model.to(DType::float64);
  const Tensor ids = from_indices({0, 4, 2, 1}, {1, 4});
  EXPECT_TRUE(testing::gradcheck_passes([&](const auto&) { return model.logits(ids); }, parameters_of(model)));
}

TEST(SequenceClassifier, MeanPoolingIgnoresPaddedTokens) {
  const Spec spec = tiny(9, 8, 3);
  Generator gen(2);
  SequenceClassifier model(spec.config, spec.shape, gen);
  model.eval();
  const Tensor padding = from_mask({false, false, true, true}, {1, 4});
  const Tensor a = model.forward(Batch{from_indices({1, 2, 3, 4}, {1, 4}), Tensor(), padding}).logits;
  const Tensor b = model.forward(Batch{from_indices({1, 2, 8, 0}, {1, 4}), Tensor(), padding}).logits;
  EXPECT_EQ(a.shape(), (Shape{1, 3}));
  const auto va = a.to_vector(), vb = b.to_vector();
  for (std::size_t i = 0; i < 3; ++i) EXPECT_NEAR(va[i], vb[i], 1e-6);
}

TEST(TextModelsGradcheck, SequenceClassifierMeanAndCls) {
  for (Pooling pooling : {Pooling::mean, Pooling::cls}) {
    Spec spec = tiny(6, 8, 3);
    spec.config.kind.options.set("pooling", pooling_name(pooling));
    Generator gen(3);
    SequenceClassifier model(spec.config, spec.shape, gen);
    model.to(DType::float64);
    const Tensor ids = from_indices({0, 5, 2, 1, 3, 4}, {2, 3});
    const Tensor padding = from_mask({false, false, true, false, false, false}, {2, 3});
    EXPECT_TRUE(testing::gradcheck_passes([&](const auto&) { return model.forward(Batch{ids, Tensor(), padding}).logits; },
                                          parameters_of(model)))
        << pooling_name(pooling);
  }
}

TEST(TextModelsGradcheck, TokenClassifier) {
  Spec spec = tiny(6, 8, 2);
  spec.config.kind.options.set("positional", "sinusoidal");
  spec.config.encoder.norm = NormPlacement::post;
  Generator gen(4);
  TokenClassifier model(spec.config, spec.shape, gen);
  model.to(DType::float64);
  const Tensor ids = from_indices({0, 5, 2, 1, 3, 4}, {2, 3});
  EXPECT_TRUE(testing::gradcheck_passes([&](const auto&) { return model.forward(Batch{ids, Tensor(), Tensor()}).logits; },
                                        parameters_of(model)));
}

// Named activations at the model level: caching changes no logit, every layer's pattern comes back, a
// head's z replaced by zeros acts as zeroing its output columns, unknown names are errors.
TEST(ModelHooks, CachingEveryActivationLeavesTheLogitsBitForBit) {
  Spec spec = tiny(7, 6);
  spec.config.encoder.n_layers = 2;
  Generator gen(8);
  CausalLM model(spec.config, spec.shape, gen);
  const Batch batch{from_indices({0, 4, 2, 1, 3, 6, 5, 2, 2, 1, 0, 3}, {2, 6}), Tensor(), Tensor()};
  const Tensor plain = model.forward(batch).logits;
  ForwardOptions everything;
  everything.hooks.cache = {"*"};
  const ModelOutput out = model.forward(batch, everything);
  EXPECT_EQ(out.logits.to_vector(), plain.to_vector());
  for (const char* name : {"hook_embed", "blocks.0.hook_resid_pre", "blocks.1.attn.hook_pattern", "blocks.1.attn.hook_result",
                           "blocks.1.hook_mlp_out", "final_norm.hook_normalized"})
    EXPECT_TRUE(out.cache.count(name)) << name;
  for (int l = 0; l < 2; ++l) {
    const Tensor pattern = out.cache.at("blocks." + std::to_string(l) + ".attn.hook_pattern");  // [B, H, T, T]
    ASSERT_EQ(pattern.shape(), (Shape{2, 2, 6, 6}));
    for (double s : sum(pattern, -1).to_vector()) EXPECT_NEAR(s, 1.0, 1e-5);
    for (std::size_t i = 0; i < 6; ++i)
      for (std::size_t j = i + 1; j < 6; ++j) EXPECT_EQ(pattern.at({1, 1, i, j}), 0.0);
  }
}

TEST(ModelHooks, AblatingAHeadAndAskingForAMissingNameOrAWrongShape) {
  Spec spec = tiny(7, 6);
  Generator gen(9);
  CausalLM model(spec.config, spec.shape, gen);
  model.to(DType::float64);
  const Batch batch{from_indices({0, 4, 2, 1, 3, 6}, {1, 6}), Tensor(), Tensor()};
  ForwardOptions ablate;
  ablate.hooks.replace = {{"blocks.0.attn.hook_z", [](const Tensor& z, const std::string&) {
                             Tensor keep = ones({1, 2, 1, 1}, DType::float64);
                             keep.data<double>()[1] = 0.0;  // head 1
                             return z * keep;
                           }}};
  const Tensor ablated = model.forward(batch, ablate).logits;
  EXPECT_NE(ablated.to_vector(), model.forward(batch).logits.to_vector());
  {
    NoGradGuard no_grad;
    double* w = model.body->encoder->blocks[0]->attn->proj->weight.data<double>();  // head 1: columns 2..3 of [4, 4]
    for (std::size_t r = 0; r < 4; ++r) w[r * 4 + 2] = w[r * 4 + 3] = 0.0;
  }
  testing::expect_values(ablated, model.forward(batch).logits.to_vector(), 1e-12);
  ForwardOptions missing;
  missing.hooks.cache = {"blocks.7.attn.hook_z"};
  EXPECT_THROW(model.forward(batch, missing), std::invalid_argument);
  ForwardOptions reshaped;
  reshaped.hooks.replace = {{"hook_embed", [](const Tensor& x, const std::string&) { return slice(x, 1, 0, 2); }}};
  EXPECT_THROW(model.forward(batch, reshaped), std::invalid_argument);
}


// A two-layer CausalLM (vocabulary 7, sequences up to 6) for the hook cases below.
Spec two_layers() {
  Spec spec = tiny(7, 6);
  spec.config.encoder.n_layers = 2;
  return spec;
}

TEST(ModelHooks, CachedPatternsAreOnePerLayerAndCausalDistributions) {
  const Spec spec = two_layers();
  Generator gen(10);
  CausalLM model(spec.config, spec.shape, gen);
  const Batch batch{from_indices({0, 4, 2, 1, 3, 6, 5, 2, 2, 1, 0, 3}, {2, 6}), Tensor(), Tensor()};
  ForwardOptions patterns;
  patterns.hooks.cache = {"blocks.*.attn.hook_pattern"};  // every layer's
  const ModelOutput out = model.forward(batch, patterns);
  ASSERT_EQ(out.cache.size(), 2u);  // the patterns and nothing else
  for (int l = 0; l < 2; ++l) {
    const std::string name = "blocks." + std::to_string(l) + ".attn.hook_pattern";
    ASSERT_EQ(out.cache.count(name), 1u) << name;
    const Tensor& pattern = out.cache.at(name);  // [B, H, T, T]
    ASSERT_EQ(pattern.shape(), (Shape{2, 2, 6, 6}));
    for (double s : sum(pattern, -1).to_vector()) EXPECT_NEAR(s, 1.0, 1e-5) << name;
    for (std::size_t b = 0; b < 2; ++b)
      for (std::size_t h = 0; h < 2; ++h)
        for (std::size_t i = 0; i < 6; ++i) {
          EXPECT_GT(pattern.at({b, h, i, i}), 0.0) << name;  // a token always sees itself
          for (std::size_t j = i + 1; j < 6; ++j) EXPECT_EQ(pattern.at({b, h, i, j}), 0.0) << name << " [" << b << ", " << h << ", " << i << ", " << j << "]";
        }
  }
}

TEST(ModelHooks, HeadResultsPlusTheProjectionBiasAreTheAttentionOutput) {
  Spec spec = two_layers();
  spec.config.encoder.dropout = 0.0;  // hook_attn_out is after the residual dropout
  Generator gen(11);
  CausalLM model(spec.config, spec.shape, gen);
  model.to(DType::float64);
  const Batch batch{from_indices({0, 4, 2, 1, 3, 6, 5, 2, 2, 1, 0, 3}, {2, 6}), Tensor(), Tensor()};
  ForwardOptions options;
  options.hooks.cache = {"blocks.*.attn.hook_result", "blocks.*.hook_attn_out"};
  const ModelOutput out = model.forward(batch, options);
  for (std::size_t l = 0; l < 2; ++l) {
    const std::string block = "blocks." + std::to_string(l) + ".";
    const Tensor& result = out.cache.at(block + "attn.hook_result");  // [B, H, T, C]
    ASSERT_EQ(result.shape(), (Shape{2, 2, 6, 4}));
    const Tensor& bias = model.body->encoder->blocks[l]->attn->proj->bias;
    testing::expect_values(sum(result, 1) + bias, out.cache.at(block + "hook_attn_out").to_vector(), 1e-12);
  }
}

TEST(ModelHooks, AMissingNameIsAnErrorListingTheModelsNames) {
  const Spec spec = two_layers();
  Generator gen(12);
  CausalLM model(spec.config, spec.shape, gen);
  const Batch batch{from_indices({0, 4, 2, 1}, {1, 4}), Tensor(), Tensor()};
  ForwardOptions missing;
  missing.hooks.cache = {"blocks.7.attn.hook_z"};
  try {
    model.forward(batch, missing);
    FAIL() << "blocks.7.attn.hook_z does not exist in a 2-layer model";
  } catch (const std::invalid_argument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("'blocks.7.attn.hook_z'"), std::string::npos) << m;
    for (const char* name : {"hook_embed", "blocks.0.hook_resid_pre", "blocks.1.attn.hook_z", "blocks.1.attn.hook_pattern",
                             "blocks.1.hook_resid_post", "final_norm.hook_normalized"})
      EXPECT_NE(m.find(name), std::string::npos) << name << " missing from: " << m;
  }
  ForwardOptions replace_missing;  // replacements are held to the same rule
  replace_missing.hooks.replace = {{"blocks.*.attn.hook_nope", [](const Tensor& x, const std::string&) { return x; }}};
  EXPECT_THROW(model.forward(batch, replace_missing), std::invalid_argument);
}

TEST(ModelHooks, ResidPreOfABlockIsResidPostOfTheOneBefore) {
  const Spec spec = two_layers();
  Generator gen(13);
  CausalLM model(spec.config, spec.shape, gen);
  const Batch batch{from_indices({0, 4, 2, 1, 3, 6}, {1, 6}), Tensor(), Tensor()};
  ForwardOptions options;
  options.hooks.cache = {"blocks.0.hook_resid_pre", "blocks.0.hook_resid_post", "blocks.1.hook_resid_pre"};
  const ModelOutput out = model.forward(batch, options);
  ASSERT_EQ(out.cache.size(), 3u);
  EXPECT_EQ(out.cache.at("blocks.1.hook_resid_pre").to_vector(), out.cache.at("blocks.0.hook_resid_post").to_vector());
  // and block 0 does change the stream, so the equality above says which tensors flow where
  EXPECT_NE(out.cache.at("blocks.0.hook_resid_pre").to_vector(), out.cache.at("blocks.0.hook_resid_post").to_vector());
}

TEST(ModelHooksGradcheck, CausalLMThroughAReplacedHeadZ) {
  // Gradients flow through a replacement: block 0's head 0 output scaled by 0.5, checked over every parameter.
  const Spec spec = two_layers();
  Generator gen(14);
  CausalLM model(spec.config, spec.shape, gen);
  model.to(DType::float64);
  ForwardOptions half;
  half.hooks.replace = {{"blocks.0.attn.hook_z", [](const Tensor& z, const std::string&) {
                           Tensor scale = ones({1, 2, 1, 1}, DType::float64);
                           scale.data<double>()[0] = 0.5;  // head 0
                           return z * scale;
                         }}};
  const Batch batch{from_indices({0, 4, 2, 1, 3, 6}, {2, 3}), Tensor(), Tensor()};
  EXPECT_NE(model.forward(batch, half).logits.to_vector(), model.forward(batch).logits.to_vector());  // it does act
  EXPECT_TRUE(testing::gradcheck_passes([&](const auto&) { return model.forward(batch, half).logits; }, parameters_of(model)));
}

}  // namespace
}  // namespace attnlab

namespace attnlab {
namespace {

// The standard deviation of a tensor's values.
double spread(const Tensor& t) {
  const std::vector<double> v = t.to_vector();
  double mean = 0, square = 0;
  for (double x : v) mean += x / static_cast<double>(v.size());
  for (double x : v) square += (x - mean) * (x - mean) / static_cast<double>(v.size());
  return std::sqrt(square);
}

// model.init: gpt2 draws N(0, 0.02) (the residual projections smaller); fan_in N(0, 1/sqrt(fan-in)) for
// weights and N(0, 1/sqrt(width)) for embeddings, whatever the width.
TEST(ModelInit, Gpt2AndFanInDrawTheStatedScales) {
  for (InitScheme scheme : {InitScheme::gpt2, InitScheme::fan_in}) {
    Spec spec = tiny(50, 8);
    spec.config.kind.name = "causal_lm";
    spec.config.encoder.d_model = 64, spec.config.encoder.ff_hidden = 256, spec.config.encoder.init = scheme;
    Generator gen(2);
    const auto model = make_model(spec.config, spec.shape, gen);
    const auto state = model->state_dict();
    const bool fan_in = scheme == InitScheme::fan_in;
    EXPECT_NEAR(spread(state.at("body.encoder.blocks.0.attn.qkv.weight")), fan_in ? 1 / 8.0 : 0.02, fan_in ? 0.01 : 0.002);
    EXPECT_NEAR(spread(state.at("body.encoder.blocks.0.ff.fc2.weight")), fan_in ? 1 / 16.0 : 0.02 / std::sqrt(2.0), fan_in ? 0.005 : 0.002);
    EXPECT_NEAR(spread(state.at("body.tok.weight")), fan_in ? 1 / 8.0 : 0.02, fan_in ? 0.01 : 0.002);
  }
}

}  // namespace
}  // namespace attnlab
