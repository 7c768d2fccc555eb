// End to end in seconds: a tiny causal LM and a tiny classifier, trained with AdamW, each overfit one
// fixed batch. A broken gradient anywhere in the stack keeps the loss up.
#include <gtest/gtest.h>

#include "framework/models/text_models.hpp"
#include "framework/optim/optimizer.hpp"
#include "tests/test_util.hpp"

namespace attnlab {
namespace {

ModelConfig small_model() {
  ModelConfig c;
  c.encoder.d_model = 32;
  c.encoder.n_heads = 4;
  c.encoder.n_layers = 2;
  return c;
}

DataShape tokens(std::size_t vocab, std::size_t max_len, std::size_t classes) {
  DataShape s;
  s.vocab_size = vocab;
  s.max_len = max_len;
  s.num_classes = classes;
  return s;
}

TEST(Overfit, TinyCausalLMMemorisesAFixedBatch) {
  Generator gen(0);
  CausalLM model(small_model(), tokens(16, 12, 16), gen);
  AdamWOptions options;
  options.lr = 1e-2;
  options.weight_decay = 0.0;
  AdamW optimizer(model.named_parameters(), options);
  Generator data(1);
  const Tensor ids = uniform({4, 12}, data, 0, 16, DType::float64).to(DType::int64);
  std::vector<std::int64_t> next(48);
  for (std::size_t i = 0; i < 48; ++i) next[i] = static_cast<std::int64_t>(ids.to_vector()[(i / 12) * 12 + (i % 12 + 1) % 12]);
  const Tensor targets = from_indices(next, {4, 12});
  double first = 0, last = 0;
  for (int step = 0; step < 150; ++step) {
    Tensor loss = model.loss(ids, targets);
    if (step == 0) first = loss.item();
    last = loss.item();
    optimizer.zero_grad();
    loss.backward();
    optimizer.step();
  }
  EXPECT_NEAR(first, std::log(16.0), 0.5);  // starts near chance
  EXPECT_LT(last, 0.05) << "first " << first;
}

TEST(Overfit, TinyClassifierMemorisesAFixedBatch) {
  ModelConfig config = small_model();
  config.kind.options.set("pooling", "cls");
  Generator gen(2);
  SequenceClassifier model(config, tokens(10, 8, 3), gen);
  // At lr 3e-3 this training oscillates (in float64 too), and whether it has settled by the last step
  // turned on the rounding: one CPU's float32 run ended at 0.69 where another's, and float64, ended below
  // 0.004. At 1e-3 over 250 steps ten initial seeds in float32 and float64 (20 runs) all ended at
  // 0.0059-0.0084, so the bound holds by margin, not by the trajectory's luck.
  AdamWOptions options;
  options.lr = 1e-3;
  AdamW optimizer(model.named_parameters(), options);
  Generator data(3);
  const Tensor ids = uniform({16, 8}, data, 0, 10, DType::float64).to(DType::int64);
  const Tensor labels = uniform({16}, data, 0, 3, DType::float64).to(DType::int64);
  double last = 0;
  for (int step = 0; step < 250; ++step) {
    Tensor loss = cross_entropy(model.forward(Batch{ids, Tensor(), Tensor()}).logits, labels);
    last = loss.item();
    optimizer.zero_grad();
    loss.backward();
    optimizer.step();
  }
  EXPECT_LT(last, 0.05);
}

}  // namespace
}  // namespace attnlab
