// The fused kernel under softmax_attention's blocked path (softmax/flash_attention.hpp) across its tiling
// boundaries: row tiles of 6 (and the 4, 2, 1 left over), column tiles of 2 vectors (and an odd one),
// head dims that are not whole vectors (padded copies), chunks of keys and blocks of query rows that do
// not divide the lengths, Tq != Tk both ways, causal, windows, ALiBi and padding. float64 against the
// composed form to 1e-12 in values and gradients; float32 against it within float tolerance (the float
// path has twice double's lanes, 16 and 8 with AVX-512, 8 and 4 without, so it crosses other edges);
// float32 against float64 at n = 4096; heads packed as a fused projection writes them against the split.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "framework/attention/softmax/blocked_attention.hpp"
#include "framework/attention/softmax/softmax_attention.hpp"
#include "framework/nn/positional.hpp"
#include "tests/attention/composed_attention.hpp"
#include "tests/test_util.hpp"

namespace attnlab {
namespace {

struct Case {
  std::size_t tq, tk, d, dv, window;
  bool causal, alibi, padded;
};

std::string name_of(const Case& c) {
  return "q" + std::to_string(c.tq) + "_k" + std::to_string(c.tk) + "_d" + std::to_string(c.d) + "_dv" + std::to_string(c.dv) +
         (c.window ? "_w" + std::to_string(c.window) : "") + (c.causal ? "_causal" : "_bidirectional") + (c.alibi ? "_alibi" : "") +
         (c.padded ? "_padded" : "");
}

constexpr std::size_t kBatch = 2, kHeads = 2;
constexpr double kScale = 0.45;

// Keys 0, 5 and the last of batch 0, and the second half of batch 1, are padding (so some causal rows of
// batch 1 see only padded keys: zeros).
std::vector<bool> padding_of(const Case& c) {
  if (!c.padded) return {};
  std::vector<bool> padded(kBatch * c.tk, false);
  for (std::size_t j : {std::size_t{0}, std::size_t{5}, c.tk - 1})
    if (j < c.tk) padded[j] = true;
  for (std::size_t j = c.tk / 2; j < c.tk; ++j) padded[c.tk + j] = true;
  return padded;
}

struct Result {
  std::vector<double> out, grads;  // the output, then dq, dk, dv
};

// The op (fused = true) or the composed form on inputs of `dtype`, with a fixed non-uniform upstream gradient.
Result run(const Case& c, DType dtype, bool fused) {
  std::vector<Tensor> in{testing::param({kBatch, kHeads, c.tq, c.d}, 1).detach().to(dtype),
                         testing::param({kBatch, kHeads, c.tk, c.d}, 2).detach().to(dtype),
                         testing::param({kBatch, kHeads, c.tk, c.dv}, 3).detach().to(dtype)};
  for (Tensor& t : in) t.set_requires_grad(true);
  const std::vector<double> slopes = c.alibi ? alibi_slopes(kHeads) : std::vector<double>{};
  const std::vector<bool> padded = padding_of(c);
  Tensor out;
  if (fused) {
    Tensor mask;
    if (c.padded) mask = reshape(from_mask(padded, {kBatch, c.tk}), {static_cast<std::int64_t>(kBatch), 1, 1, static_cast<std::int64_t>(c.tk)});
    out = softmax_attention(in[0], in[1], in[2], kScale, mask, c.causal, nullptr, ScoreBand{c.window, slopes});
  } else {
    out = testing::composed_attention(in[0], in[1], in[2], kScale, c.window, c.causal, slopes, padded);
  }
  sum(out * testing::param({kBatch, kHeads, c.tq, c.dv}, 4).detach().to(dtype)).backward();
  Result r{out.to_vector(), {}};
  for (const Tensor& t : in)
    for (double g : t.grad().to_vector()) r.grads.push_back(g);
  return r;
}

// Largest |a - b| over the largest |b| (1 when b is all zero).
double relative_error(const std::vector<double>& a, const std::vector<double>& b) {
  double diff = 0, size = 0;
  for (std::size_t i = 0; i < a.size(); ++i) diff = std::max(diff, std::fabs(a[i] - b[i])), size = std::max(size, std::fabs(b[i]));
  return diff / (size > 0 ? size : 1.0);
}

class FlashAttention : public ::testing::TestWithParam<Case> {};

TEST_P(FlashAttention, Float64EqualsTheComposedFormInValuesAndGradients) {
  const Result got = run(GetParam(), DType::float64, true), want = run(GetParam(), DType::float64, false);
  ASSERT_EQ(got.out.size(), want.out.size());
  for (std::size_t i = 0; i < got.out.size(); ++i) ASSERT_NEAR(got.out[i], want.out[i], 1e-12) << "output element " << i;
  ASSERT_EQ(got.grads.size(), want.grads.size());
  for (std::size_t i = 0; i < got.grads.size(); ++i) ASSERT_NEAR(got.grads[i], want.grads[i], 1e-12) << "gradient element " << i;
}

TEST_P(FlashAttention, Float32EqualsTheComposedFormWithinFloatRounding) {
  const Result got = run(GetParam(), DType::float32, true), want = run(GetParam(), DType::float64, false);
  EXPECT_LT(relative_error(got.out, want.out), 5e-6);
  EXPECT_LT(relative_error(got.grads, want.grads), 5e-6);
}

// The op on heads packed as a fused projection writes them, qkv [B, T, 3 H D], reads and writes them in
// place: its output is the split op's merged, and its gradient the split op's packed back, bit for bit
// (the same arithmetic on the same values), in both types. Self-attention: cases with Tq = Tk, D = Dv.
TEST_P(FlashAttention, PackedHeadsGiveTheSplitHeadsResultsBitForBit) {
  const Case c = GetParam();
  if (c.tq != c.tk || c.d != c.dv) GTEST_SKIP() << "packed heads are self-attention's";
  const std::size_t width = kHeads * c.d;
  const std::vector<double> slopes = c.alibi ? alibi_slopes(kHeads) : std::vector<double>{};
  Tensor mask;
  if (c.padded) {
    mask = reshape(from_mask(padding_of(c), {kBatch, c.tk}), {static_cast<std::int64_t>(kBatch), 1, 1, static_cast<std::int64_t>(c.tk)});
  }
  for (DType dtype : {DType::float64, DType::float32}) {
    std::vector<double> got[2];
    for (int packed = 0; packed < 2; ++packed) {
      Tensor qkv = testing::param({kBatch, c.tq, 3 * width}, 13).detach().to(dtype);
      qkv.set_requires_grad(true);
      Tensor out;  // [B, T, H D]
      if (packed) {
        ASSERT_TRUE(detail::packed_attention_applies(qkv, kHeads, mask));
        out = detail::blocked_softmax_attention_packed(qkv, kHeads, kScale, mask, c.causal, ScoreBand{c.window, slopes});
      } else {
        const auto heads = split_heads(qkv, 3, kHeads);
        const Tensor z = softmax_attention(heads[0], heads[1], heads[2], kScale, mask, c.causal, nullptr, ScoreBand{c.window, slopes});
        out = reshape(permute(z, {0, 2, 1, 3}), {static_cast<std::int64_t>(kBatch), static_cast<std::int64_t>(c.tq), static_cast<std::int64_t>(width)});
      }
      sum(out * testing::param({kBatch, c.tq, width}, 14).detach().to(dtype)).backward();
      got[packed] = out.to_vector();
      for (double g : qkv.grad().to_vector()) got[packed].push_back(g);
    }
    ASSERT_EQ(got[1].size(), got[0].size());
    for (std::size_t i = 0; i < got[0].size(); ++i) ASSERT_EQ(got[1][i], got[0][i]) << dtype_name(dtype) << " element " << i;
  }
}

// Lengths 1, 7, 20, 44, 67, 130, 600 against row tiles of 8 and vectors of 16 floats / 8 doubles (AVX-512)
// or tiles of 6 and vectors of 8 / 4 (AVX2), tiles of 4, 2 and 1 after them (20 and 44 end in a 4-row
// tile after full ones with AVX-512), chunks of 64-256 keys and blocks of 96 rows; head dims 5, 12, 13
// and 24 are not whole vectors of one type or the other.
INSTANTIATE_TEST_SUITE_P(
    Tiles, FlashAttention,
    ::testing::Values(Case{1, 1, 8, 8, 0, true, false, false}, Case{1, 1, 16, 16, 0, false, true, false},
                      Case{7, 7, 5, 5, 0, false, false, true}, Case{7, 7, 12, 12, 2, true, true, false},
                      Case{20, 20, 32, 32, 0, true, true, false}, Case{44, 44, 16, 16, 0, true, false, true},
                      Case{67, 67, 16, 16, 0, true, true, true}, Case{67, 67, 24, 24, 0, false, false, false},
                      Case{130, 130, 12, 12, 0, false, false, true}, Case{130, 130, 24, 24, 20, true, false, false},
                      Case{130, 130, 8, 8, 9, false, true, true}, Case{600, 600, 32, 32, 0, true, false, false},
                      Case{600, 600, 64, 64, 0, false, true, false}, Case{600, 600, 16, 16, 50, true, false, true},
                      Case{67, 130, 13, 6, 0, true, false, false}, Case{130, 67, 8, 8, 0, true, false, false},
                      Case{130, 67, 16, 16, 0, false, false, true}, Case{600, 130, 32, 32, 0, true, true, true},
                      Case{67, 600, 24, 24, 40, false, true, false}, Case{130, 600, 32, 32, 0, true, false, true}),
    [](const ::testing::TestParamInfo<Case>& p) { return name_of(p.param); });

TEST(FlashAttention, ScoresThatRiseAlongTheKeysRescaleTheRunningSums) {
  // Key j scaled by 1 + j / 2: each chunk's scores pass the previous chunks' max by hundreds, far more
  // than the forward's one-pass margin and than exp's range in either type, so rows must leave the
  // one-pass path and rescale their output and sum (without it the weights overflow). float64 to 1e-12;
  // float32 to 1e-4 (the scores are in the hundreds, so their rounding moves the weights by 1e-5).
  const std::size_t t = 600, d = 16;
  std::vector<double> rise(t * d);
  for (std::size_t j = 0; j < t; ++j)
    for (std::size_t c = 0; c < d; ++c) rise[j * d + c] = 1.0 + double(j) / 2.0;
  const Tensor keys = (testing::param({1, 2, t, d}, 12) * from_vector(rise, {t, d}, DType::float64)).detach();
  for (bool causal : {false, true})
    for (DType dtype : {DType::float64, DType::float32}) {
      std::vector<double> got[2];
      for (int fused = 0; fused < 2; ++fused) {
        const DType type = fused ? dtype : DType::float64;
        std::vector<Tensor> in{testing::param({1, 2, t, d}, 9).detach().to(type), keys.clone().to(type), testing::param({1, 2, t, d}, 10).detach().to(type)};
        for (Tensor& x : in) x.set_requires_grad(true);
        const Tensor out = fused ? softmax_attention(in[0], in[1], in[2], kScale, Tensor(), causal)
                                 : testing::composed_attention(in[0], in[1], in[2], kScale, 0, causal, {}, {});
        sum(out * testing::param({1, 2, t, d}, 11).detach().to(type)).backward();
        got[fused] = out.to_vector();
        for (const Tensor& x : in)
          for (double g : x.grad().to_vector()) got[fused].push_back(g);
      }
      EXPECT_LT(relative_error(got[1], got[0]), dtype == DType::float64 ? 1e-12 : 1e-4) << "causal " << causal << " " << dtype_name(dtype);
    }
}

TEST(FlashAttention, Float32AgreesWithFloat64AtLength4096) {
  // One head of the benchmark's size (d = 32), bidirectional and causal: every chunk, block and the
  // online softmax's rescaling over 4096 keys, float against double.
  const std::size_t n = 4096, d = 32;
  for (bool causal : {false, true}) {
    std::vector<double> outs[2], grads[2];
    for (int t = 0; t < 2; ++t) {
      const DType dtype = t ? DType::float32 : DType::float64;
      std::vector<Tensor> in{testing::param({1, 1, n, d}, 5).detach().to(dtype), testing::param({1, 1, n, d}, 6).detach().to(dtype),
                             testing::param({1, 1, n, d}, 7).detach().to(dtype)};
      for (Tensor& x : in) x.set_requires_grad(true);
      const Tensor out = softmax_attention(in[0], in[1], in[2], 1.0 / std::sqrt(double(d)), Tensor(), causal);
      sum(out * testing::param({1, 1, n, d}, 8).detach().to(dtype)).backward();
      outs[t] = out.to_vector();
      for (const Tensor& x : in)
        for (double g : x.grad().to_vector()) grads[t].push_back(g);
    }
    EXPECT_LT(relative_error(outs[1], outs[0]), 1e-5) << "causal " << causal;
    EXPECT_LT(relative_error(grads[1], grads[0]), 1e-5) << "causal " << causal;
  }
}

}  // namespace
}  // namespace attnlab
