// Decoding from the layers' states, end to end, for every registered kernel that supports causal
// attention: a causal LM's logits from its decoding state (a prompt, single tokens, chunks) equal its
// forward's at every position (kernels that keep a state; the others equal the forward of the sequence so
// far, which they recompute), in float64 to 1e-10 and in float32 to its rounding, with learned, rotary and
// ALiBi positions, the short convolution, and padding (a left-padded row, a padded token inside a row).
// Generation picks the same tokens with and without the cache, past max_len too. An encoder-decoder's
// greedy and beam decoding give the same outputs with and without it, for every kernel in its decoder
// and in its cross-attention.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "framework/models/seq2seq.hpp"
#include "framework/models/text_models.hpp"

namespace attnlab {
namespace {

using I = std::int64_t;
constexpr std::size_t kVocab = 11, kLen = 12, kBatch = 2;
const std::vector<std::size_t> kSteps = {4, 1, 1, 3, 1, 1, 1};  // 12 tokens: a prompt, single tokens, a chunk

struct Case {
  std::string positional = "learned";
  std::size_t short_conv = 0;
  bool padded = false;
  DType dtype = DType::float32;
  std::string options;  // the kernel's, as YAML ("": its defaults)
};

std::string describe(const Case& s) {
  return "positional " + s.positional + ", short_conv " + std::to_string(s.short_conv) + (s.padded ? ", padded" : "") +
         (s.dtype == DType::float64 ? ", float64" : ", float32") + (s.options.empty() ? "" : ", options " + s.options);
}

std::unique_ptr<CausalLM> causal_lm(const std::string& kernel, const Case& s) {
  ModelConfig config;
  config.kind.name = "causal_lm";
  config.kind.options.set("positional", s.positional);
  config.encoder.d_model = 8;
  config.encoder.n_heads = 2;
  config.encoder.n_layers = 2;
  config.encoder.ff_hidden = 16;
  config.encoder.attention = kernel;
  if (!s.options.empty()) config.encoder.attention_options = YamlTree(YAML::Load(s.options));
  config.encoder.short_conv = s.short_conv;
  DataShape shape;
  shape.vocab_size = shape.num_classes = kVocab;
  shape.max_len = kLen;
  shape.padded = s.padded;
  Generator gen(3);
  auto model = std::make_unique<CausalLM>(config, shape, gen);
  model->to(s.dtype);
  model->eval();
  return model;
}

Tensor random_ids(std::size_t rows, std::size_t length, std::uint64_t seed) {
  Generator gen(seed);
  std::vector<std::int64_t> ids(rows * length);
  for (auto& id : ids) id = static_cast<std::int64_t>(gen.next_below(kVocab));
  return from_indices(ids, {rows, length});
}

Tensor columns(const Tensor& x, std::size_t t0, std::size_t t1) {
  return x.defined() ? slice(x, 1, static_cast<I>(t0), static_cast<I>(t1)) : x;
}

class CausalLMDecoding : public ::testing::TestWithParam<std::string> {
 protected:
  const KernelCapabilities& capabilities() const { return KernelRegistry::instance().find(GetParam()).capabilities; }
  void SetUp() override {
    if (!capabilities().causal) GTEST_SKIP() << GetParam() << " is not causal";
  }
  void expect_cached_logits_match(const Case& s, double tolerance) const {
    SCOPED_TRACE(describe(s));
    auto model = causal_lm(GetParam(), s);
    const Tensor ids = random_ids(kBatch, kLen, 5);
    Tensor mask;
    if (s.padded) {  // row 0 left-padded by three tokens, row 1 with a padded token at 5
      std::vector<bool> pad(kBatch * kLen, false);
      pad[0] = pad[1] = pad[2] = pad[kLen + 5] = true;
      mask = from_mask(pad, {kBatch, kLen});
    }
    NoGradGuard no_grad;
    const Tensor whole = model->forward(Batch{ids, Tensor(), mask, Tensor(), Tensor()}).logits;  // [B, T, V]
    StackState state = model->start_decoding(kBatch);
    std::size_t t0 = 0;
    for (std::size_t n : kSteps) {
      const std::size_t t1 = t0 + n;
      const Tensor got = model->logits_step(columns(ids, t0, t1), columns(mask, t0, t1), state);
      ASSERT_EQ(got.shape(), (Shape{kBatch, n, kVocab}));
      // The whole sequence's logits, for every kernel: a prefix's outputs must not depend on what follows
      // (from the second layer on, a recomputed kernel reads keys the layer below made at shorter lengths).
      const std::vector<double> a = got.to_vector(), b = columns(whole, t0, t1).to_vector();
      for (std::size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], tolerance) << "tokens " << t0 << ".." << t1 << ", element " << i;
      t0 = t1;
    }
  }
  std::vector<Case> setups(DType dtype) const {
    std::vector<Case> all;
    for (const char* positional : {"learned", "rotary", "alibi"}) {
      if (std::string(positional) == "alibi" && !capabilities().alibi) continue;
      for (bool padded : {false, true}) {
        if (padded && !capabilities().padding_mask) continue;
        all.push_back(Case{positional, 0, padded, dtype});
      }
    }
    all.push_back(Case{"rotary", 3, capabilities().padding_mask, dtype});  // Zoology's short convolution before the kernel
    // Windows shorter than the sequence (the defaults cover all 12 tokens). Found in review: sparse's default
    // stride followed the sequence's length, and its cache picked other tokens than recomputing.
    if (GetParam() == "sparse") all.push_back(Case{"learned", 0, false, dtype, "{window: 1, summaries: 4}"});
    if (GetParam() == "sliding_window") all.push_back(Case{"learned", 0, true, dtype, "{window: 3}"});
    return all;
  }
};

TEST_P(CausalLMDecoding, CachedLogitsEqualTheForwardInFloat64) {
  for (const Case& s : setups(DType::float64)) expect_cached_logits_match(s, 1e-10);
}

TEST_P(CausalLMDecoding, CachedLogitsEqualTheForwardInFloat32) {
  for (const Case& s : setups(DType::float32)) expect_cached_logits_match(s, 5e-5);
}

TEST_P(CausalLMDecoding, GenerationPicksTheSameTokensWithAndWithoutTheCache) {
  Case s;
  s.positional = "rotary";
  auto model = causal_lm(GetParam(), s);
  for (double temperature : {0.0, 1.0}) {
    // 6 + 14 tokens: past max_len (12), where the window slides and both recompute.
    Generator a(9), b(9);
    const std::vector<std::int64_t> prompt{1, 4, 2, 7, 3, 3};
    const auto cached = model->generate(prompt, 14, temperature, 0, a, Decoding::cached);
    const auto recomputed = model->generate(prompt, 14, temperature, 0, b, Decoding::recomputed);
    EXPECT_EQ(cached, recomputed) << "temperature " << temperature;
    EXPECT_EQ(cached.size(), 14u);
  }
}

std::vector<std::string> registered_kernels() { return KernelRegistry::instance().names(); }

INSTANTIATE_TEST_SUITE_P(Registry, CausalLMDecoding, ::testing::ValuesIn(registered_kernels()),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

// ---- the encoder-decoder ----

// A small encoder-decoder over a shared vocabulary of 9 ids (0 pad, 1 bos, 2 eos), sources of up to 6 tokens,
// targets of up to 7; `decoder` and `cross` name its decoder's and cross-attention's kernels.
std::unique_ptr<Seq2Seq> seq2seq(const std::string& decoder, const std::string& cross) {
  ModelConfig config;
  config.kind.name = "seq2seq";
  config.kind.options.set("decoder_attention", "{name: " + decoder + "}");
  config.kind.options.set("cross_attention", "{name: " + cross + "}");
  config.encoder.d_model = 8;
  config.encoder.n_heads = 2;
  config.encoder.n_layers = 2;
  config.encoder.ff_hidden = 16;
  DataShape shape;
  shape.vocab_size = shape.num_classes = 9;
  shape.max_len = 6;
  shape.target_max_len = 7;
  shape.bos = 1;
  shape.eos = 2;
  shape.padded = true;
  Generator gen(4);
  auto model = std::make_unique<Seq2Seq>(config, shape, gen);
  {
    NoGradGuard no_grad;  // sharper outputs: decoding's choices are then far from ties
    model->head->weight.set_data(model->head->weight * 20.0);
  }
  return model;
}

void expect_same_decoding(Seq2Seq& model, const std::string& what) {
  const Tensor source = from_indices({3, 4, 5, 6, 0, 0, 7, 3, 8, 4, 5, 6, 5, 5, 3, 0, 0, 0}, {3, 6});
  const Tensor mask = from_mask({false, false, false, false, true, true, false, false, false, false, false, false,
                                 false, false, false, true, true, true}, {3, 6});
  const auto greedy = model.greedy_decode(source, mask, 0, Decoding::cached);
  const auto greedy_again = model.greedy_decode(source, mask, 0, Decoding::recomputed);
  for (std::size_t r = 0; r < 3; ++r) {
    EXPECT_EQ(greedy[r].tokens, greedy_again[r].tokens) << what << ", greedy, source " << r;
    EXPECT_NEAR(greedy[r].log_prob, greedy_again[r].log_prob, 1e-4) << what << ", greedy, source " << r;
  }
  const auto beam = model.beam_decode(source, mask, 4, 0, 1.0, Decoding::cached);
  const auto beam_again = model.beam_decode(source, mask, 4, 0, 1.0, Decoding::recomputed);
  for (std::size_t r = 0; r < 3; ++r) {
    EXPECT_EQ(beam[r].tokens, beam_again[r].tokens) << what << ", beam, source " << r;
    EXPECT_NEAR(beam[r].log_prob, beam_again[r].log_prob, 1e-4) << what << ", beam, source " << r;
  }
}

TEST(Seq2SeqDecoding, GreedyAndBeamDecodeAlikeWithAndWithoutTheCacheForEveryKernel) {
  for (const std::string& name : registered_kernels()) {
    const KernelCapabilities& c = KernelRegistry::instance().find(name).capabilities;
    if (c.causal) {
      auto model = seq2seq(name, "softmax");
      expect_same_decoding(*model, "decoder " + name);
    }
    if (c.cross_attention && c.bidirectional) {
      auto model = seq2seq("softmax", name);
      expect_same_decoding(*model, "cross-attention " + name);
    }
  }
}

// Diverged weights give NaN scores: greedy and beam decoding refuse them rather than emit token 0.
TEST(Seq2SeqDecoding, DecodingRefusesScoresThatAreNotFinite) {
  auto model = seq2seq("softmax", "softmax");
  model->head->weight.data<float>()[0] = std::numeric_limits<float>::quiet_NaN();
  const Tensor source = from_indices({3, 4, 5, 0, 0, 0}, {1, 6});
  const Tensor mask = from_mask({false, false, false, true, true, true}, {1, 6});
  for (std::size_t beam : {1, 3}) {
    try {
      beam > 1 ? model->beam_decode(source, mask, beam, 0, 1.0) : model->greedy_decode(source, mask, 0);
      ADD_FAILURE() << "decoded from NaN scores, beam " << beam;
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("decoding: the model's next-token scores are not finite (NaN)"), std::string::npos) << e.what();
    }
  }
}

TEST(Seq2SeqDecoding, CachedStepsEqualTheTeacherForcedLogits) {
  auto model = seq2seq("delta", "linear");
  model->eval();
  NoGradGuard no_grad;
  const Tensor source = from_indices({3, 4, 5, 6, 0, 0, 7, 3, 8, 4, 5, 6}, {2, 6});
  const Tensor mask = from_mask({false, false, false, false, true, true, false, false, false, false, false, false}, {2, 6});
  const Tensor target = from_indices({1, 5, 3, 8, 4, 1, 6, 6, 3, 2}, {2, 5});
  const Tensor memory = model->encode(source, mask);
  const Tensor whole = model->decode(memory, mask, target, Tensor());  // [2, 5, V]
  DecoderState state = model->start_decoding(memory, mask);
  const Tensor first = model->decode_step(columns(target, 0, 2), state), rest = model->decode_step(columns(target, 2, 5), state);
  const std::vector<double> got = concat({first, rest}, 1).to_vector(), want = whole.to_vector();
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-4) << "element " << i;
}

}  // namespace
}  // namespace attnlab
