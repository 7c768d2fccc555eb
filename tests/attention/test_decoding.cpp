// The registry-driven decoding suite: every registered kernel that supports causal attention continues
// sequences token by token (kernel.hpp's start_decoding and decode) with the outputs of its forward. The
// sequence arrives as a prompt, single tokens and chunks; the outputs of each step equal the rows of a
// forward over the sequence so far (what recomputing gives) and, for kernels that keep a state, of the
// forward over the whole sequence; in float64 to 1e-10 and in float32 to its rounding, with and without
// padding (left padding and a padded token inside a row) and ALiBi. A kernel that declares `incremental`
// keeps exactly the state its state_size declares, and one that does not takes the recomputing default.
// Beam search's reordering of the batch continues the reordered sequences.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "framework/attention/decode_state.hpp"
#include "framework/nn/positional.hpp"

namespace attnlab {
namespace {

using I = std::int64_t;
constexpr std::size_t kB = 2, kH = 2, kT = 20, kD = 4;
// How the sequence arrives: a prompt of 6 tokens, single tokens and chunks (20 in all; past sliding_window's
// default window of 16, so its state forgets).
const std::vector<std::size_t> kSteps = {6, 1, 1, 4, 1, 1, 5, 1};

struct Inputs {
  Tensor q, k, v, input, padding;  // [B, H, T, D] x 3, [B, T, C] (kernels that read it), [B, T] (or undefined)
  std::vector<double> slopes;      // ALiBi's, or empty
};

Inputs random_inputs(std::size_t batch, std::size_t t, DType dtype, std::uint64_t seed) {
  Generator gen(seed);
  Inputs in;
  in.q = randn({batch, kH, t, kD}, gen, dtype);
  in.k = randn({batch, kH, t, kD}, gen, dtype);
  in.v = randn({batch, kH, t, kD}, gen, dtype);
  in.input = randn({batch, t, kH * kD}, gen, dtype);
  return in;
}

// Tokens [t0, t1) of a [B, H, T, D] or [B, T, ...] tensor along its token axis.
Tensor tokens(const Tensor& x, std::size_t axis, std::size_t t0, std::size_t t1) {
  return x.defined() ? slice(x, static_cast<I>(axis), static_cast<I>(t0), static_cast<I>(t1)) : x;
}

AttentionContext context_of(const Inputs& in, bool reads_input, std::size_t t0, std::size_t t1) {
  AttentionContext c{true, tokens(in.padding, 1, t0, t1), false};
  if (reads_input) c.input = tokens(in.input, 1, t0, t1);
  c.alibi_slopes = in.slopes;
  return c;
}

class DecodingSuite : public ::testing::TestWithParam<std::string> {
 protected:
  const KernelInfo& info() const { return KernelRegistry::instance().find(GetParam()); }
  std::shared_ptr<AttentionKernel> build(DType dtype, bool padded, bool alibi) const {
    Generator gen(7);
    KernelSpec spec{kH, kD, kT, /*causal=*/true, padded};
    spec.alibi = alibi;
    auto kernel = make_kernel(GetParam(), spec, YAML::Node(), gen);
    kernel->to(dtype);
    kernel->eval();
    return kernel;
  }
  void SetUp() override {
    if (!info().capabilities.causal) GTEST_SKIP() << GetParam() << " is not causal";
  }
  // Feeds `in` in kSteps and checks each step's outputs against the forward of the prefix and (kernels
  // that keep a state) of the whole sequence.
  void expect_decoding_matches(DType dtype, bool padded, bool alibi, double tolerance) const {
    NoGradGuard no_grad;
    auto kernel = build(dtype, padded, alibi);
    const bool reads = info().capabilities.reads_input;
    Inputs in = random_inputs(kB, kT, dtype, 3);
    if (padded) {  // row 0: three padded tokens first (a left-padded prompt); row 1: a padded token at 8
      std::vector<bool> pad(kB * kT, false);
      pad[0] = pad[1] = pad[2] = pad[kT + 8] = true;
      in.padding = from_mask(pad, {kB, kT});
    }
    if (alibi) in.slopes = alibi_slopes(kH);
    const Tensor whole = kernel->forward(in.q, in.k, in.v, context_of(in, reads, 0, kT)).output;
    std::unique_ptr<DecodeState> state = kernel->start_decoding(kB);
    std::size_t t0 = 0;
    for (std::size_t n : kSteps) {
      const std::size_t t1 = t0 + n;
      const Tensor out = kernel->decode(*state, tokens(in.q, 2, t0, t1), tokens(in.k, 2, t0, t1), tokens(in.v, 2, t0, t1),
                                        context_of(in, reads, t0, t1));
      ASSERT_EQ(out.shape(), (Shape{kB, kH, n, kD}));
      const Tensor prefix = kernel->forward(tokens(in.q, 2, 0, t1), tokens(in.k, 2, 0, t1), tokens(in.v, 2, 0, t1), context_of(in, reads, 0, t1)).output;
      const std::vector<double> got = out.to_vector(), recomputed = tokens(prefix, 2, t0, t1).to_vector(), full = tokens(whole, 2, t0, t1).to_vector();
      for (std::size_t i = 0; i < got.size(); ++i) {
        ASSERT_NEAR(got[i], recomputed[i], tolerance) << "tokens " << t0 << ".." << t1 << ", element " << i;
        if (info().capabilities.incremental) {
          ASSERT_NEAR(got[i], full[i], tolerance) << "tokens " << t0 << ".." << t1 << ", element " << i;
        }
      }
      t0 = t1;
    }
    EXPECT_EQ(state->tokens(), kT);
  }
};

TEST_P(DecodingSuite, StepsEqualTheForwardInFloat64) {
  expect_decoding_matches(DType::float64, false, false, 1e-10);
  if (info().capabilities.padding_mask) expect_decoding_matches(DType::float64, true, false, 1e-10);
  if (info().capabilities.alibi) expect_decoding_matches(DType::float64, true, true, 1e-10);
}

TEST_P(DecodingSuite, StepsEqualTheForwardInFloat32) {
  expect_decoding_matches(DType::float32, false, false, 2e-5);
  if (info().capabilities.padding_mask) expect_decoding_matches(DType::float32, true, false, 2e-5);
  if (info().capabilities.alibi) expect_decoding_matches(DType::float32, true, true, 2e-5);
}

TEST_P(DecodingSuite, AKernelWithAStateKeepsWhatItDeclaresAndTheOthersRecompute) {
  NoGradGuard no_grad;
  auto kernel = build(DType::float32, false, false);
  std::unique_ptr<DecodeState> state = kernel->start_decoding(kB);
  EXPECT_EQ(state->recomputes(), !info().capabilities.incremental);
  const Inputs in = random_inputs(kB, kT, DType::float32, 4);
  for (std::size_t t = 0; t < kT; ++t)
    kernel->decode(*state, tokens(in.q, 2, t, t + 1), tokens(in.k, 2, t, t + 1), tokens(in.v, 2, t, t + 1),
                   context_of(in, info().capabilities.reads_input, t, t + 1));
  if (!info().capabilities.incremental) GTEST_SKIP() << GetParam() << " is recomputed";
  const StateSize declared = info().state_size(KernelSpec{kH, kD, kT, true}, ComponentOptions());
  EXPECT_EQ(state->numbers_per_sequence(), declared.at(kT)) << declared.what;
}

TEST_P(DecodingSuite, ReorderedRowsContinueTheReorderedSequences) {
  // Beam search keeps some hypotheses, some twice, and drops others: select_rows({1, 0, 1}) after 7 tokens,
  // then 5 more, against the forward over the reordered sequences.
  NoGradGuard no_grad;
  auto kernel = build(DType::float64, false, false);
  const bool reads = info().capabilities.reads_input;
  const std::vector<std::size_t> rows{1, 0, 1};
  const Inputs first = random_inputs(kB, 7, DType::float64, 5), later = random_inputs(rows.size(), 5, DType::float64, 6);
  std::unique_ptr<DecodeState> state = kernel->start_decoding(kB);
  kernel->decode(*state, first.q, first.k, first.v, context_of(first, reads, 0, 7));
  state->select_rows(rows);
  Inputs joined;
  const auto join = [&](const Tensor& a, const Tensor& b, std::size_t axis) { return concat({select_batch_rows(a, rows), b}, static_cast<I>(axis)); };
  joined.q = join(first.q, later.q, 2), joined.k = join(first.k, later.k, 2), joined.v = join(first.v, later.v, 2);
  joined.input = join(first.input, later.input, 1);
  const Tensor want = tokens(kernel->forward(joined.q, joined.k, joined.v, context_of(joined, reads, 0, 12)).output, 2, 7, 12);
  for (std::size_t t = 0; t < 5; ++t) {
    const Tensor out = kernel->decode(*state, tokens(later.q, 2, t, t + 1), tokens(later.k, 2, t, t + 1), tokens(later.v, 2, t, t + 1),
                                      context_of(later, reads, t, t + 1));
    ASSERT_EQ(out.size(0), rows.size());
    const std::vector<double> step = out.to_vector();
    for (std::size_t r = 0; r < rows.size(); ++r)
      for (std::size_t h = 0; h < kH; ++h)
        for (std::size_t c = 0; c < kD; ++c) EXPECT_NEAR(step[(r * kH + h) * kD + c], want.at({r, h, t, c}), 1e-10) << "row " << r << ", token " << t;
  }
}

// A window's cache after a long prompt holds the window, not the prompt: trim() moves the kept columns into
// a buffer sized by the window (a kernel's time per token must not grow with the prompt it was given,
// nor its memory), and the keys, values and padding kept are the last `window` tokens', before and after
// the single tokens that follow.
TEST(KeyValueCacheWindow, ALongPromptLeavesOnlyTheWindowsColumns) {
  constexpr std::size_t kWindow = 4, kPrompt = 100, kMore = 10, kAll = kPrompt + kMore;
  const Inputs in = random_inputs(kB, kAll, DType::float32, 8);
  std::vector<bool> pad(kB * kAll, false);
  for (std::size_t t = 0; t < kAll; t += 3) pad[kAll + t] = true;  // every third key of row 1
  const Tensor padding = from_mask(pad, {kB, kAll});
  KeyValueCache cache(kB, kWindow);
  const auto expect_last_window = [&](std::size_t seen) {
    ASSERT_EQ(cache.kept(), kWindow);
    EXPECT_LE(cache.capacity(), 2 * kWindow + 8) << "after " << seen << " tokens";
    EXPECT_EQ(cache.keys().to_vector(), tokens(in.k, 2, seen - kWindow, seen).to_vector()) << seen;
    EXPECT_EQ(cache.values().to_vector(), tokens(in.v, 2, seen - kWindow, seen).to_vector()) << seen;
    EXPECT_EQ(cache.key_padding_mask().to_vector(), tokens(padding, 1, seen - kWindow, seen).to_vector()) << seen;
  };
  cache.append(tokens(in.k, 2, 0, kPrompt), tokens(in.v, 2, 0, kPrompt), tokens(padding, 1, 0, kPrompt));
  EXPECT_GE(cache.capacity(), kPrompt);
  cache.trim();
  expect_last_window(kPrompt);
  for (std::size_t t = kPrompt; t < kAll; ++t) {
    cache.append(tokens(in.k, 2, t, t + 1), tokens(in.v, 2, t, t + 1), tokens(padding, 1, t, t + 1));
    cache.trim();
    expect_last_window(t + 1);
  }
  EXPECT_EQ(cache.tokens(), kAll);
}

std::vector<std::string> registered_kernels() { return KernelRegistry::instance().names(); }

INSTANTIATE_TEST_SUITE_P(Registry, DecodingSuite, ::testing::ValuesIn(registered_kernels()),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

// A causal kernel registered by this test, the way an extension that keeps no state would be: uniform
// attention over the visible keys, declaring nothing about decoding. The registry suites check it as
// any kernel, and decoding takes the recomputing default.
class CausalMeanKernel : public AttentionKernel {
 public:
  static constexpr const char* kName = "test_causal_mean";
  static constexpr const char* kDescription = "uniform attention over the visible keys (test)";
  static KernelCapabilities declared_capabilities() { return {}; }
  struct Options {};
  static Schema<Options> options_schema() { return {}; }
  static StateSize state_size(const KernelSpec& spec, const Options&) {
    return {static_cast<double>(spec.n_heads * spec.head_dim), 0, "the sum of the values"};
  }
  CausalMeanKernel(const KernelSpec&, const Options&, Generator&) {}
  AttentionResult forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionContext& context) override {
    Tensor padding;
    if (context.key_padding_mask.defined())
      padding = reshape(context.key_padding_mask, {static_cast<I>(k.size(0)), 1, 1, static_cast<I>(k.size(2))});
    const Tensor weights = scaled_masked_softmax(mul(matmul(q, k, false, true), 0.0), 1.0, padding, context.causal);
    AttentionResult r;
    r.output = matmul(weights, v);
    if (context.need_pattern) r.pattern = weights.detach();
    return r;
  }
};

ATTNLAB_REGISTER_KERNEL(CausalMeanKernel);

TEST(Decoding, AKernelThatDeclaresNoStateIsRecomputedWithTheSameOutputs) {
  Generator gen(0);
  auto kernel = make_kernel("test_causal_mean", KernelSpec{kH, kD, kT, true}, YAML::Node(), gen);
  EXPECT_FALSE(kernel->capabilities().incremental);
  std::unique_ptr<DecodeState> state = kernel->start_decoding(1);
  ASSERT_TRUE(state->recomputes());
  NoGradGuard no_grad;
  const Inputs in = random_inputs(1, 5, DType::float64, 8);
  const Tensor whole = kernel->forward(in.q, in.k, in.v, AttentionContext{true, Tensor(), false}).output;
  for (std::size_t t = 0; t < 5; ++t) {
    const Tensor out = kernel->decode(*state, tokens(in.q, 2, t, t + 1), tokens(in.k, 2, t, t + 1), tokens(in.v, 2, t, t + 1),
                                      AttentionContext{true, Tensor(), false});
    // The mean of the values so far, by hand.
    for (std::size_t h = 0; h < kH; ++h)
      for (std::size_t c = 0; c < kD; ++c) {
        double mean = 0;
        for (std::size_t j = 0; j <= t; ++j) mean += in.v.at({0, h, j, c}) / static_cast<double>(t + 1);
        EXPECT_NEAR(out.at({0, h, 0, c}), mean, 1e-12);
        EXPECT_NEAR(out.at({0, h, 0, c}), whole.at({0, h, t, c}), 1e-12);
      }
  }
  EXPECT_EQ(state->numbers_per_sequence(), 3.0 * kH * kD * 5);  // q, k and v of five tokens
}

TEST(Decoding, AStateFromAnotherKernelIsRefused) {
  Generator gen(0);
  auto linear = make_kernel("linear", KernelSpec{kH, kD, kT, true}, YAML::Node(), gen);
  auto softmax = make_kernel("softmax", KernelSpec{kH, kD, kT, true}, YAML::Node(), gen);
  std::unique_ptr<DecodeState> state = linear->start_decoding(1);
  const Inputs in = random_inputs(1, 1, DType::float32, 9);
  NoGradGuard no_grad;
  EXPECT_THROW(softmax->decode(*state, in.q, in.k, in.v, AttentionContext{true, Tensor(), false}), std::logic_error);
}

}  // namespace
}  // namespace attnlab
