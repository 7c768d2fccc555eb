// The encoder-decoder: gradchecks of the decoder layer and the whole model, the three masking patterns
// (no decoder position sees a later target token, padding changes nothing, each pattern is zero where
// its mask says), per-part kernels, shared and tied embeddings, and decoding (greedy agrees with teacher
// forcing on its own output; beam search finds the best sequence when the beam covers them all).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "framework/models/seq2seq.hpp"
#include "tests/test_util.hpp"

namespace attnlab {
namespace {

struct Spec {
  ModelConfig config;
  DataShape shape;
};

// A tiny encoder-decoder: sources of up to 5 tokens over 7 ids, targets of up to 6 positions over 6 ids
// (0 pad, 1 bos, 2 eos).
Spec tiny() {
  Spec s;
  s.config.kind.name = "seq2seq";
  s.config.encoder.d_model = 8;
  s.config.encoder.n_heads = 2;
  s.config.encoder.n_layers = 1;
  s.config.encoder.ff_hidden = 8;
  s.shape.vocab_size = 7;
  s.shape.num_classes = 6;
  s.shape.max_len = 5;
  s.shape.target_max_len = 6;
  s.shape.bos = 1;
  s.shape.eos = 2;
  s.shape.padded = true;
  return s;
}

Tensor ids(std::vector<std::int64_t> values, std::size_t rows) { return from_indices(values, {rows, values.size() / rows}); }

Batch batch(Tensor source, Tensor source_mask, Tensor decoder_input, Tensor decoder_mask = Tensor()) {
  Batch b;
  b.input = std::move(source);
  b.key_padding_mask = std::move(source_mask);
  b.decoder_input = std::move(decoder_input);
  b.decoder_padding_mask = std::move(decoder_mask);
  return b;
}

TEST(DecoderLayerGradcheck, PreAndPostNormWithPaddingOnBothSides) {
  for (const auto& [norm, feed_forward] : {std::pair{NormPlacement::pre, true}, {NormPlacement::post, true}, {NormPlacement::pre, false},
                                           {NormPlacement::post, false}, {NormPlacement::none, true}}) {
    EncoderConfig self;
    self.d_model = 4, self.n_heads = 2, self.ff_hidden = 6, self.max_len = 4, self.causal = true, self.norm = norm;
    self.feed_forward = feed_forward;
    EncoderConfig cross = self;
    cross.causal = false;
    cross.max_len = 5;
    Generator gen(1);
    DecoderLayer layer(self, cross, gen);
    EXPECT_EQ(static_cast<bool>(layer.ff), feed_forward);
    layer.to(DType::float64);
    const Tensor x = testing::param({2, 4, 4}, 2), memory = testing::param({2, 5, 4}, 3);
    const Tensor target_pad = from_mask({false, false, false, false, false, false, true, true}, {2, 4});
    const Tensor source_pad = from_mask({false, false, false, true, true, false, false, false, false, false}, {2, 5});
    const AttentionContext self_context{true, target_pad, false}, cross_context{false, source_pad, false};
    EXPECT_TRUE(testing::gradcheck_passes([&](const auto& in) { return layer.forward(in[0], in[1], self_context, cross_context); },
                                          testing::with_parameters({x, memory}, layer)))
        << norm_placement_name(norm) << (feed_forward ? "" : " without feed-forward");
  }
}

TEST(Seq2SeqGradcheck, TheWholeModelThroughEveryPart) {
  Spec spec = tiny();
  spec.config.kind.options.set("positional", "rotary");
  Generator gen(4);
  Seq2Seq model(spec.config, spec.shape, gen);
  model.to(DType::float64);
  const Batch b = batch(ids({3, 4, 5, 0, 6, 3, 4, 5}, 2), from_mask({false, false, false, true, false, false, false, false}, {2, 4}),
                        ids({1, 3, 4, 1, 5, 0}, 2), from_mask({false, false, false, false, false, true}, {2, 3}));
  EXPECT_TRUE(testing::gradcheck_passes([&](const auto&) { return model.forward(b).logits; }, model.parameters()));
}

TEST(Seq2Seq, NoDecoderPositionSeesALaterTargetToken) {
  const Spec spec = tiny();
  Generator gen(5);
  Seq2Seq model(spec.config, spec.shape, gen);
  model.eval();
  const Tensor source = ids({3, 4, 5, 6}, 1);
  const Tensor before = model.forward(batch(source, Tensor(), ids({1, 3, 4, 5, 3}, 1))).logits;
  for (std::size_t changed = 1; changed < 5; ++changed) {
    std::vector<std::int64_t> target{1, 3, 4, 5, 3};
    target[changed] = target[changed] == 3 ? 5 : 3;  // another token
    const Tensor after = model.forward(batch(source, Tensor(), ids(target, 1))).logits;
    for (std::size_t t = 0; t < 5; ++t)
      for (std::size_t v = 0; v < 6; ++v) {
        if (t < changed) {
          EXPECT_EQ(before.at({0, t, v}), after.at({0, t, v})) << "position " << t << " saw position " << changed;
        }
      }
    EXPECT_NE(before.at({0, changed, 0}), after.at({0, changed, 0}));  // the changed position itself does change
  }
}

TEST(Seq2Seq, PaddingChangesNothing) {
  const Spec spec = tiny();
  Generator gen(6);
  Seq2Seq model(spec.config, spec.shape, gen);
  model.eval();
  // One pair alone, then beside a longer one so that both sides are padded; and the padding's ids changed.
  const Tensor alone = model.forward(batch(ids({3, 4, 5}, 1), Tensor(), ids({1, 5, 4}, 1))).logits;
  for (std::int64_t filler : {0, 5}) {
    const Batch b = batch(ids({3, 4, 5, filler + 1, filler, 6, 6, 5, 4, 3}, 2),
                          from_mask({false, false, false, true, true, false, false, false, false, false}, {2, 5}),
                          ids({1, 5, 4, filler, filler, 1, 3, 3, 3, 3}, 2),
                          from_mask({false, false, false, true, true, false, false, false, false, false}, {2, 5}));
    const Tensor padded = model.forward(b).logits;
    for (std::size_t t = 0; t < 3; ++t)
      for (std::size_t v = 0; v < 6; ++v) EXPECT_NEAR(alone.at({0, t, v}), padded.at({0, t, v}), 1e-5) << "filler " << filler;
  }
}

TEST(Seq2Seq, TheThreeMaskingPatterns) {
  const Spec spec = tiny();
  Generator gen(7);
  Seq2Seq model(spec.config, spec.shape, gen);
  const Batch b = batch(ids({3, 4, 5, 0, 0}, 1), from_mask({false, false, false, true, true}, {1, 5}), ids({1, 3, 4, 0}, 1),
                        from_mask({false, false, false, true}, {1, 4}));
  ForwardOptions o;
  for (const auto& part : model.attention_parts()) o.hooks.cache.insert(o.hooks.cache.end(), part.pattern_hooks.begin(), part.pattern_hooks.end());
  const ModelOutput out = model.forward(b, o);
  const Tensor encoder = out.cache.at("encoder.blocks.0.attn.hook_pattern");     // [1, H, 5, 5]
  const Tensor decoder = out.cache.at("decoder.blocks.0.attn.hook_pattern");     // [1, H, 4, 4]
  const Tensor cross = out.cache.at("decoder.blocks.0.cross_attn.hook_pattern");  // [1, H, 4, 5]
  EXPECT_EQ(cross.shape(), (Shape{1, 2, 4, 5}));
  for (std::size_t h = 0; h < 2; ++h) {
    for (std::size_t i = 0; i < 5; ++i)
      for (std::size_t j = 3; j < 5; ++j) EXPECT_EQ(encoder.at({0, h, i, j}), 0.0) << "encoder: padded source key " << j;
    for (std::size_t i = 0; i < 4; ++i)
      for (std::size_t j = 0; j < 4; ++j) {
        if (j > i || j == 3) {
          EXPECT_EQ(decoder.at({0, h, i, j}), 0.0) << "decoder: key " << j << " from query " << i;
        } else {
          EXPECT_GT(decoder.at({0, h, i, j}), 0.0);
        }
      }
    for (std::size_t i = 0; i < 4; ++i)
      for (std::size_t j = 0; j < 5; ++j) {
        if (j >= 3) {
          EXPECT_EQ(cross.at({0, h, i, j}), 0.0) << "cross: padded source key " << j;
        } else {
          EXPECT_GT(cross.at({0, h, i, j}), 0.0) << "cross: every real source key, later ones too";
        }
      }
  }
}

TEST(Seq2Seq, EachPartCanHaveItsOwnKernel) {
  Spec spec = tiny();
  spec.config.encoder.attention = "linear";
  spec.config.kind.options.set("cross_attention", "{name: cosine}");
  Generator gen(8);
  Seq2Seq model(spec.config, spec.shape, gen);
  EXPECT_EQ(model.encoder->encoder->blocks[0]->attn->kernel->name(), "linear");
  EXPECT_EQ(model.decoder->decoder->blocks[0]->attn->kernel->name(), "linear");
  EXPECT_EQ(model.decoder->decoder->blocks[0]->cross_attn->kernel->name(), "cosine");
  const std::vector<KernelUse> uses = kernel_uses(spec.config, spec.shape);
  ASSERT_EQ(uses.size(), 3u);
  EXPECT_EQ(uses[2].key, "model.cross_attention");
  EXPECT_TRUE(uses[2].spec.cross);
  EXPECT_EQ(uses[2].spec.max_len, 5u);  // the source's length
  EXPECT_TRUE(uses[1].spec.causal);
  EXPECT_EQ(uses[1].spec.max_len, 6u);  // the target's
  spec.config.kind.options.set("cross_attention", "{name: sparse}");  // no cross-attention
  EXPECT_THROW(Seq2Seq(spec.config, spec.shape, gen), std::invalid_argument);
}

TEST(Seq2Seq, SharedAndTiedEmbeddingsAreOneTensor) {
  Spec spec = tiny();
  spec.shape.num_classes = spec.shape.vocab_size;
  spec.shape.shared_vocabulary = true;
  spec.config.kind.options.set("share_embeddings", "true");
  spec.config.kind.options.set("tie_embeddings", "true");
  Generator gen(9);
  Seq2Seq model(spec.config, spec.shape, gen);
  EXPECT_TRUE(model.encoder->tok->weight.same(model.decoder->tok->weight));
  EXPECT_TRUE(model.head->weight.same(model.decoder->tok->weight));
  std::size_t embeddings = 0;
  for (const auto& p : model.named_parameters()) embeddings += p.tensor.same(model.encoder->tok->weight);
  EXPECT_EQ(embeddings, 1u);
  spec.shape.shared_vocabulary = false;
  EXPECT_THROW(Seq2Seq(spec.config, spec.shape, gen), OptionError);
}

// Greedy decoding's tokens are the argmax of the teacher-forced logits on its own output: incremental
// decoding and the batched forward agree.
TEST(Seq2SeqDecoding, GreedyAgreesWithTeacherForcingOnItsOwnOutput) {
  const Spec spec = tiny();
  Generator gen(10);
  Seq2Seq model(spec.config, spec.shape, gen);
  const Tensor source = ids({3, 4, 5, 0, 6, 6, 3, 4}, 2), mask = from_mask({false, false, false, true, false, false, false, false}, {2, 4});
  const std::vector<Decoded> greedy = model.greedy_decode(source, mask);
  ASSERT_EQ(greedy.size(), 2u);
  EXPECT_TRUE(model.is_training());  // the mode comes back
  model.eval();
  for (std::size_t r = 0; r < 2; ++r) {
    const std::vector<std::int64_t>& out = greedy[r].tokens;
    ASSERT_FALSE(out.empty());
    EXPECT_TRUE(out.back() == 2 || out.size() == 6);  // stopped at EOS or at the limit
    std::vector<std::int64_t> input{1};
    input.insert(input.end(), out.begin(), out.end() - 1);
    const Tensor row_source = slice(source, 0, static_cast<std::int64_t>(r), static_cast<std::int64_t>(r) + 1);
    const Tensor row_mask = slice(mask, 0, static_cast<std::int64_t>(r), static_cast<std::int64_t>(r) + 1);
    const Tensor logits = model.forward(batch(row_source, row_mask, ids(input, 1))).logits;
    const Tensor chosen = argmax(logits, -1);
    double log_prob = 0;
    const Tensor lp = log_softmax(logits);
    for (std::size_t t = 0; t < out.size(); ++t) {
      EXPECT_EQ(chosen.at({0, t}), static_cast<double>(out[t])) << "row " << r << " position " << t;
      log_prob += lp.at({0, t, static_cast<std::size_t>(out[t])});
    }
    EXPECT_NEAR(greedy[r].log_prob, log_prob, 1e-4);
  }
  const std::vector<Decoded> beam1 = model.beam_decode(source, mask, 1);
  for (std::size_t r = 0; r < 2; ++r) EXPECT_EQ(beam1[r].tokens, greedy[r].tokens);
}

// With a beam wider than the number of candidates at any step, beam search (raw log-probability, length_penalty 0)
// returns the most likely sequence of all, found here by scoring every sequence with teacher forcing.
TEST(Seq2SeqDecoding, AWideEnoughBeamFindsTheMostLikelySequence) {
  Spec spec = tiny();
  spec.shape.target_max_len = 3;  // at most 3 tokens: every sequence over 6 ids ending in EOS or cut at 3
  Generator gen(11);
  Seq2Seq model(spec.config, spec.shape, gen);
  // Sharpen the output layer so that sequences differ clearly in probability.
  {
    NoGradGuard no_grad;
    model.head->weight.set_data(model.head->weight * 40.0);
  }
  model.eval();
  const Tensor source = ids({3, 5, 4}, 1);
  double best = -INFINITY;
  std::vector<std::int64_t> best_tokens;
  const std::function<void(std::vector<std::int64_t>)> search = [&](std::vector<std::int64_t> prefix) {
    if (!prefix.empty() && (prefix.back() == 2 || prefix.size() == 3)) {
      std::vector<std::int64_t> input{1};
      input.insert(input.end(), prefix.begin(), prefix.end() - 1);
      const Tensor lp = log_softmax(model.forward(batch(source, Tensor(), ids(input, 1))).logits);
      double score = 0;
      for (std::size_t t = 0; t < prefix.size(); ++t) score += lp.at({0, t, static_cast<std::size_t>(prefix[t])});
      if (prefix.back() == 2 && score > best) best = score, best_tokens = prefix;  // finished sequences only
      return;
    }
    for (std::int64_t v = 0; v < 6; ++v) {
      prefix.push_back(v);
      search(prefix);
      prefix.pop_back();
    }
  };
  search({});
  ASSERT_FALSE(best_tokens.empty());
  const std::vector<Decoded> beam = model.beam_decode(source, Tensor(), 1000, 3, 0.0);
  EXPECT_EQ(beam[0].tokens, best_tokens);
  EXPECT_NEAR(beam[0].log_prob, best, 1e-4);
}

TEST(Seq2SeqDecoding, LimitsAreChecked) {
  const Spec spec = tiny();
  Generator gen(12);
  Seq2Seq model(spec.config, spec.shape, gen);
  EXPECT_THROW(model.greedy_decode(ids({3, 4}, 1), Tensor(), 7), std::invalid_argument);  // more than 6 target positions
  EXPECT_THROW(model.beam_decode(ids({3, 4}, 1), Tensor(), 0), std::invalid_argument);
  const std::vector<Decoded> two = model.greedy_decode(ids({3, 4}, 1), Tensor(), 2);
  EXPECT_LE(two[0].tokens.size(), 2u);
}

}  // namespace
}  // namespace attnlab
