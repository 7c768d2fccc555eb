// CausalLM and the classifiers: shapes, parameter counts, generation, padding handling, tied embeddings,
// gradchecks.
#include <gtest/gtest.h>

#include <filesystem>

#include "framework/io/checkpoint.hpp"
#include "framework/models/text_models.hpp"
#include "framework/optim/optimizer.hpp"
#include "tests/test_util.hpp"

namespace attnlab {
namespace {

EncoderConfig tiny_encoder(std::size_t max_len = 8) {
  EncoderConfig c;
  c.d_model = 4;
  c.n_heads = 2;
  c.n_layers = 1;
  c.ff_hidden = 8;
  c.max_len = max_len;
  return c;
}

std::vector<Tensor> parameters_of(const Module& m) { return m.parameters(); }

// nanoGPT's shakespeare_char CPU sizes: 65 characters, width 128, 4 heads, 4 layers, block 64.
CausalLMConfig shakespeare_sizes() {
  CausalLMConfig config;
  config.vocab_size = 65;
  config.encoder.d_model = 128;
  config.encoder.n_heads = 4;
  config.encoder.n_layers = 4;
  config.encoder.max_len = 64;
  return config;
}

TEST(CausalLM, ParameterCountMatchesTheGptReference) {
  // The model of shared/bench/torch_gpt.py: V*C + T*C + L*(12 C^2 + 13 C) + 2C + C*V.
  const CausalLMConfig config = shakespeare_sizes();
  Generator gen(0);
  CausalLM model(config, gen);
  const std::size_t v = 65, c = 128, t = 64, l = 4;
  EXPECT_EQ(model.parameter_count(), v * c + t * c + l * (12 * c * c + 13 * c) + 2 * c + c * v);
  Tensor ids = from_indices(std::vector<std::int64_t>(2 * 10, 3), {2, 10});
  EXPECT_EQ(model.forward(ids).shape(), (Shape{2, 10, 65}));
}

TEST(CausalLM, TiedEmbeddingsAreOneParameter) {
  CausalLMConfig config = shakespeare_sizes();
  config.encoder.bias = false;
  config.tie_embeddings = true;
  Generator gen(0);
  CausalLM model(config, gen);
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
  CausalLMConfig config;
  config.vocab_size = 7;
  config.encoder = tiny_encoder(4);
  config.tie_embeddings = true;
  Generator gen(1);
  CausalLM model(config, gen);
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
  CausalLM restored(config, other);
  restored.load_state_dict(load_checkpoint(path).tensors);
  std::filesystem::remove(path);
  EXPECT_TRUE(restored.head->weight.same(restored.body->tok->weight));  // still one tensor
  EXPECT_EQ(restored.head->weight.to_vector(), model.body->tok->weight.to_vector());
  restored.eval();
  model.eval();
  EXPECT_EQ(restored.forward(ids).to_vector(), model.forward(ids).to_vector());
  // An untied model's state has head.weight, which a tied model does not take.
  CausalLMConfig untied = config;
  untied.tie_embeddings = false;
  Generator g3(2);
  CausalLM separate(untied, g3);
  EXPECT_THROW(restored.load_state_dict(separate.state_dict()), std::invalid_argument);
}

TEST(CausalLM, GptInitScalesResidualProjections) {
  CausalLMConfig config;
  config.vocab_size = 50;
  config.encoder = tiny_encoder();
  config.encoder.d_model = 64;
  config.encoder.n_layers = 8;
  Generator gen(0);
  CausalLM model(config, gen);
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
  CausalLMConfig config;
  config.vocab_size = 7;
  config.encoder = tiny_encoder(4);
  Generator gen(0);
  CausalLM model(config, gen);
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

TEST(TextModelsGradcheck, CausalLM) {
  CausalLMConfig config;
  config.vocab_size = 5;
  config.encoder = tiny_encoder();
  Generator gen(1);
  CausalLM model(config, gen);
  model.to(DType::float64);
  const Tensor ids = from_indices({0, 4, 2, 1, 3, 3}, {2, 3}), targets = from_indices({4, 2, 1, 3, 3, 0}, {2, 3});
  EXPECT_TRUE(testing::gradcheck_passes([&](const auto&) { return model.loss(ids, targets); }, parameters_of(model)));
}

TEST(TextModelsGradcheck, CausalLMWithTiedEmbeddingsAndNoBiases) {
  // The tied weight gets the gradient of both uses: the embedding lookup and the output layer.
  CausalLMConfig config;
  config.vocab_size = 5;
  config.encoder = tiny_encoder();
  config.encoder.bias = false;
  config.tie_embeddings = true;
  Generator gen(1);
  CausalLM model(config, gen);
  model.to(DType::float64);
  ASSERT_TRUE(model.head->weight.same(model.body->tok->weight));
  const Tensor ids = from_indices({0, 4, 2, 1, 3, 3}, {2, 3}), targets = from_indices({4, 2, 1, 3, 3, 0}, {2, 3});
  EXPECT_TRUE(testing::gradcheck_passes([&](const auto&) { return model.loss(ids, targets); }, parameters_of(model)));
}

TEST(TextModelsGradcheck, CausalLMWithRotary) {
  CausalLMConfig config;
  config.vocab_size = 5;
  config.positional = PositionalKind::rotary;
  config.encoder = tiny_encoder();
  Generator gen(1);
  CausalLM model(config, gen);
  model.to(DType::float64);
  const Tensor ids = from_indices({0, 4, 2, 1}, {1, 4});
  EXPECT_TRUE(testing::gradcheck_passes([&](const auto&) { return model.forward(ids); }, parameters_of(model)));
}

TEST(SequenceClassifier, MeanPoolingIgnoresPaddedTokens) {
  ClassifierConfig config;
  config.vocab_size = 9;
  config.num_classes = 3;
  config.encoder = tiny_encoder();
  Generator gen(2);
  SequenceClassifier model(config, gen);
  model.eval();
  const Tensor padding = from_mask({false, false, true, true}, {1, 4});
  const Tensor a = model.forward(from_indices({1, 2, 3, 4}, {1, 4}), padding);
  const Tensor b = model.forward(from_indices({1, 2, 8, 0}, {1, 4}), padding);
  EXPECT_EQ(a.shape(), (Shape{1, 3}));
  const auto va = a.to_vector(), vb = b.to_vector();
  for (std::size_t i = 0; i < 3; ++i) EXPECT_NEAR(va[i], vb[i], 1e-6);
}

TEST(TextModelsGradcheck, SequenceClassifierMeanAndCls) {
  for (Pooling pooling : {Pooling::mean, Pooling::cls}) {
    ClassifierConfig config;
    config.vocab_size = 6;
    config.num_classes = 3;
    config.pooling = pooling;
    config.encoder = tiny_encoder();
    Generator gen(3);
    SequenceClassifier model(config, gen);
    model.to(DType::float64);
    const Tensor ids = from_indices({0, 5, 2, 1, 3, 4}, {2, 3});
    const Tensor padding = from_mask({false, false, true, false, false, false}, {2, 3});
    EXPECT_TRUE(testing::gradcheck_passes([&](const auto&) { return model.forward(ids, padding); }, parameters_of(model)))
        << pooling_name(pooling);
  }
}

TEST(TextModelsGradcheck, TokenClassifier) {
  ClassifierConfig config;
  config.vocab_size = 6;
  config.num_classes = 2;
  config.positional = PositionalKind::sinusoidal;
  config.encoder = tiny_encoder();
  config.encoder.norm = NormPlacement::post;
  Generator gen(4);
  TokenClassifier model(config, gen);
  model.to(DType::float64);
  const Tensor ids = from_indices({0, 5, 2, 1, 3, 4}, {2, 3});
  EXPECT_TRUE(testing::gradcheck_passes([&](const auto&) { return model.forward(ids); }, parameters_of(model)));
}

}  // namespace
}  // namespace attnlab
