// Fused ops: softmax, log_softmax, layer_norm, cross_entropy and dropout against naive formulas, their
// numerical edge cases (masked rows, large logits, ignored targets, label smoothing), and float64 gradchecks.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "tests/test_util.hpp"

namespace attnlab {
namespace {

using testing::expect_values;
using testing::gradcheck_passes;
using testing::param;

constexpr double kInf = std::numeric_limits<double>::infinity();

std::vector<double> naive_softmax(const std::vector<double>& row) {
  double m = -kInf, s = 0;
  for (double v : row) m = std::max(m, v);
  std::vector<double> out;
  for (double v : row) s += std::exp(v - m);
  for (double v : row) out.push_back(std::exp(v - m) / s);
  return out;
}

TEST(Softmax, MatchesTheFormulaAndRowsSumToOne) {
  Generator gen(5);
  Tensor x = randn({4, 7}, gen, DType::float64, 0.0, 3.0);
  Tensor y = softmax(x);
  const auto v = x.to_vector(), got = y.to_vector();
  for (std::size_t r = 0; r < 4; ++r) {
    const auto want = naive_softmax(std::vector<double>(v.begin() + r * 7, v.begin() + r * 7 + 7));
    double total = 0;
    for (std::size_t i = 0; i < 7; ++i) {
      EXPECT_NEAR(got[r * 7 + i], want[i], 1e-14);
      total += got[r * 7 + i];
    }
    EXPECT_NEAR(total, 1.0, 1e-14);
  }
}

TEST(Softmax, LargeLogitsStayFinite) {
  Tensor y = softmax(from_vector({1000.0, 1001.0, -1000.0}, {3}));
  expect_values(y, {1.0 / (1.0 + std::exp(1.0)), std::exp(1.0) / (1.0 + std::exp(1.0)), 0.0}, 1e-6);
}

TEST(Softmax, FullyMaskedRowGivesZerosAndZeroGradient) {
  Tensor x = from_vector({0.5, 1.0, 2.0, 0.1, 0.2, 0.3}, {2, 3}, DType::float64).set_requires_grad(true);
  Tensor mask = from_mask({false, true, false, true, true, true}, {2, 3});
  Tensor y = softmax(masked_fill(x, mask, -kInf));
  const auto v = y.to_vector();
  for (double e : v) EXPECT_FALSE(std::isnan(e));
  EXPECT_EQ(v[1], 0.0);  // masked key: exactly zero
  EXPECT_NEAR(v[0] + v[2], 1.0, 1e-15);
  EXPECT_EQ(v[3], 0.0);
  EXPECT_EQ(v[4], 0.0);
  EXPECT_EQ(v[5], 0.0);
  sum(y * from_vector({1, 2, 3, 4, 5, 6}, {2, 3}, DType::float64)).backward();
  const auto g = x.grad().to_vector();
  for (double e : g) EXPECT_FALSE(std::isnan(e));
  EXPECT_EQ(g[1], 0.0);
  EXPECT_EQ(g[3], 0.0);
  EXPECT_EQ(g[5], 0.0);
}

TEST(LogSoftmax, EqualsLogOfSoftmaxAndHandlesMaskedRows) {
  Generator gen(6);
  Tensor x = randn({3, 5}, gen, DType::float64, 0.0, 4.0);
  const auto a = log_softmax(x).to_vector(), b = log(softmax(x)).to_vector();
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-12);
  Tensor masked = full({1, 3}, -kInf, DType::float64);
  expect_values(log_softmax(masked), {0, 0, 0});
}

TEST(LayerNorm, MatchesTheFormula) {
  Generator gen(7);
  Tensor x = randn({3, 6}, gen, DType::float64, 1.0, 2.0);
  Tensor w = randn({6}, gen, DType::float64);
  Tensor b = randn({6}, gen, DType::float64);
  const auto y = layer_norm(x, w, b).to_vector(), v = x.to_vector(), wv = w.to_vector(), bv = b.to_vector();
  for (std::size_t r = 0; r < 3; ++r) {
    double mu = 0, var = 0;
    for (std::size_t i = 0; i < 6; ++i) mu += v[r * 6 + i] / 6;
    for (std::size_t i = 0; i < 6; ++i) var += (v[r * 6 + i] - mu) * (v[r * 6 + i] - mu) / 6;
    for (std::size_t i = 0; i < 6; ++i)
      EXPECT_NEAR(y[r * 6 + i], (v[r * 6 + i] - mu) / std::sqrt(var + 1e-5) * wv[i] + bv[i], 1e-12);
  }
  EXPECT_THROW(layer_norm(x, ones({5}, DType::float64), Tensor()), std::invalid_argument);
}

TEST(CrossEntropy, MatchesTheFormulaAndSkipsIgnoredTargets) {
  Tensor logits = from_vector({2.0, 1.0, 0.1, 0.5, 2.5, 0.3, 1.0, 1.0, 1.0}, {3, 3}, DType::float64);
  Tensor targets = from_indices(std::vector<std::int64_t>{0, -100, 2}, {3});
  const double l0 = -std::log(naive_softmax({2.0, 1.0, 0.1})[0]);
  const double l2 = -std::log(1.0 / 3.0);
  EXPECT_NEAR(cross_entropy(logits, targets).item(), (l0 + l2) / 2, 1e-12);
  Tensor all_ignored = from_indices(std::vector<std::int64_t>{-100, -100, -100}, {3});
  EXPECT_EQ(cross_entropy(logits, all_ignored).item(), 0.0);
  EXPECT_THROW(cross_entropy(logits, from_indices(std::vector<std::int64_t>{0, 3, 1}, {3})), std::out_of_range);
  EXPECT_THROW(cross_entropy(logits, from_indices(std::vector<std::int64_t>{0, 1}, {2})), std::invalid_argument);
}

TEST(CrossEntropy, LargeLogitsStayFinite) {
  Tensor logits = from_vector({1000.0, -1000.0}, {1, 2});
  EXPECT_NEAR(cross_entropy(logits, from_indices(std::vector<std::int64_t>{1}, {1})).item(), 2000.0, 1e-3);
  // Smoothed by 0.1: 0.9 * 2000 + 0.1 * mean(0, 2000).
  EXPECT_NEAR(cross_entropy(logits, from_indices(std::vector<std::int64_t>{1}, {1}), -100, 0.1).item(), 1900.0, 1e-3);
}

// Label smoothing eps: each scored row's loss is (1 - eps)(-log p[target]) + eps mean_c(-log p[c]), the
// mean over scored rows as without it (torch.nn.functional.cross_entropy's label_smoothing).
TEST(CrossEntropy, LabelSmoothingMatchesTheFormulaAndSkipsIgnoredTargets) {
  const std::vector<std::vector<double>> rows{
      {2.0, 1.0, 0.1, -0.7, 0.5}, {0.5, 2.5, 0.3, 1.2, -1.0}, {1.0, 1.0, 1.0, 1.0, 1.0}, {-2.0, 0.4, 3.1, 0.0, 0.9}};
  const std::vector<std::int64_t> target_values{0, -100, 4, 2};
  std::vector<double> values;
  for (const auto& row : rows) values.insert(values.end(), row.begin(), row.end());
  const Tensor logits = from_vector(values, {4, 5}, DType::float64);
  const Tensor targets = from_indices(target_values, {4});
  const double eps = 0.1;
  double total = 0;
  for (std::size_t r = 0; r < rows.size(); ++r) {
    if (target_values[r] == -100) continue;
    const auto p = naive_softmax(rows[r]);
    double uniform = 0;
    for (double pc : p) uniform += -std::log(pc) / 5.0;
    total += (1 - eps) * -std::log(p[static_cast<std::size_t>(target_values[r])]) + eps * uniform;
  }
  EXPECT_NEAR(cross_entropy(logits, targets, -100, eps).item(), total / 3.0, 1e-12);
  // torch.nn.functional.cross_entropy(logits, targets, label_smoothing=0.1) in float64 (PyTorch 1.13).
  EXPECT_NEAR(cross_entropy(logits, targets, -100, eps).item(), 0.9372887276745406, 1e-12);
  // Smoothing moves the loss: the same rows unsmoothed give PyTorch's 0.8026220610078739.
  EXPECT_NEAR(cross_entropy(logits, targets).item(), 0.8026220610078739, 1e-12);
  const Tensor all_ignored = from_indices(std::vector<std::int64_t>{-100, -100, -100, -100}, {4});
  EXPECT_EQ(cross_entropy(logits, all_ignored, -100, eps).item(), 0.0);
}

TEST(CrossEntropy, LabelSmoothingOutsideZeroToOneIsAnError) {
  const Tensor logits = from_vector({2.0, 1.0, 0.1, 0.5, 2.5, 0.3}, {2, 3}, DType::float64);
  const Tensor targets = from_indices(std::vector<std::int64_t>{0, 2}, {2});
  for (double eps : {-0.1, 1.0, 1.5, std::nan("")}) {
    try {
      cross_entropy(logits, targets, -100, eps);
      ADD_FAILURE() << "label_smoothing " << eps << " was accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("label_smoothing must be in [0, 1)"), std::string::npos) << e.what();
    }
  }
  EXPECT_NO_THROW(cross_entropy(logits, targets, -100, 0.0));
  EXPECT_NO_THROW(cross_entropy(logits, targets, -100, 0.999));
}

// Without smoothing the loss and its gradient are the unsmoothed op's, bit for bit, in float32: the loss
// is the mean over scored rows of -log_softmax(x)[target] summed in double, the gradient softmax(x) *
// scale with scale subtracted at the target (scale = 1 / count). Checked with the scored rows together
// (count 51: a scale that is not a power of two, so a reordered product shows) and with each row scored
// alone (the loss is then that row's own value, not hidden in a mean).
TEST(CrossEntropy, NoSmoothingKeepsTheUnsmoothedValuesBitForBit) {
  constexpr std::size_t kRows = 64, kClasses = 37;  // 37 classes: rows start at many alignments
  constexpr std::int64_t kIgnore = -100;
  Generator gen(11);
  const Tensor values = randn({kRows, kClasses}, gen, DType::float32, 0.0, 3.0);
  const auto log_probs = log_softmax(values).to_vector(), probs = softmax(values).to_vector();
  const auto check = [&](const std::vector<std::int64_t>& target_values) {
    Tensor logits = values.clone();
    logits.set_requires_grad(true);
    const Tensor loss = cross_entropy(logits, from_indices(target_values, {kRows}), kIgnore, 0.0);
    loss.backward();
    double total = 0;
    std::size_t count = 0;
    for (std::size_t r = 0; r < kRows; ++r) {
      if (target_values[r] == kIgnore) continue;
      total += -log_probs[r * kClasses + static_cast<std::size_t>(target_values[r])];
      ++count;
    }
    EXPECT_EQ(loss.item(), static_cast<double>(static_cast<float>(total / static_cast<double>(count))));
    const float scale = 1.0f / static_cast<float>(count);
    const auto grad = logits.grad().to_vector();
    for (std::size_t r = 0; r < kRows; ++r)
      for (std::size_t c = 0; c < kClasses; ++c) {
        float want = 0.0f;
        if (target_values[r] != kIgnore) {
          want = static_cast<float>(probs[r * kClasses + c]) * scale;
          if (static_cast<std::int64_t>(c) == target_values[r]) want -= scale;
        }
        EXPECT_EQ(grad[r * kClasses + c], static_cast<double>(want)) << "row " << r << " class " << c;
      }
  };
  std::vector<std::int64_t> targets(kRows);
  for (std::size_t r = 0; r < kRows; ++r) targets[r] = r % 5 == 1 ? kIgnore : static_cast<std::int64_t>((r * 7) % kClasses);
  check(targets);
  for (std::size_t r = 0; r < kRows; ++r) {
    if (targets[r] == kIgnore) continue;
    std::vector<std::int64_t> alone(kRows, kIgnore);
    alone[r] = targets[r];
    SCOPED_TRACE("row " + std::to_string(r) + " scored alone");
    check(alone);
  }
}

TEST(Dropout, EvalIsIdentityTrainingDropsAndRescales) {
  Generator gen(8);
  Tensor x = ones({10000});
  EXPECT_TRUE(dropout(x, 0.3, false, gen).same(x));
  const auto y = dropout(x, 0.3, true, gen).to_vector();
  std::size_t zeros_seen = 0;
  for (double v : y) {
    if (v == 0.0) ++zeros_seen;
    else EXPECT_FLOAT_EQ(v, 1.0f / 0.7f);
  }
  EXPECT_NEAR(static_cast<double>(zeros_seen) / 10000.0, 0.3, 0.02);
  Generator g1(9), g2(9);
  EXPECT_EQ(dropout(x, 0.5, true, g1).to_vector(), dropout(x, 0.5, true, g2).to_vector());
  EXPECT_THROW(dropout(x, 1.5, true, gen), std::invalid_argument);
}

// Data-parallel ranks: each call draws one number from the shared generator, so every rank's generator
// stays where the others' are (rank 0's checkpoint resumes them all), while the ranks' masks differ and
// still drop p of the elements; rank -1 (a single process) draws the mask from the generator itself.
TEST(Dropout, RanksDrawTheirOwnMasksFromOneSharedStream) {
  const Tensor x = ones({4000});
  Generator plain(5), reference(5);
  const auto single = dropout(x, 0.25, true, plain).to_vector();
  std::vector<std::vector<double>> masks;
  for (int rank : {0, 1}) {
    set_dropout_rank(rank);
    Generator shared(5), advanced(5);
    masks.push_back(dropout(x, 0.25, true, shared).to_vector());
    advanced.next_u64();
    EXPECT_EQ(shared.state(), advanced.state()) << "rank " << rank << " advanced its generator by other than one number";
    std::size_t dropped = 0;
    for (double v : masks.back()) dropped += v == 0.0;
    EXPECT_NEAR(static_cast<double>(dropped) / 4000.0, 0.25, 0.03);
  }
  set_dropout_rank(-1);
  EXPECT_NE(masks[0], masks[1]);
  EXPECT_NE(masks[0], single);
  EXPECT_EQ(dropout(x, 0.25, true, reference).to_vector(), single);  // back to the single-process stream
}

TEST(FusedGradcheck, Softmax) {
  EXPECT_TRUE(gradcheck_passes([](const auto& in) { return softmax(in[0]); }, {param({3, 5}, 1, 2.0)}));
}
TEST(FusedGradcheck, SoftmaxWithMaskedRows) {
  // Row 0 partly masked, row 1 fully masked (zeros, zero gradient), row 2 unmasked.
  Tensor mask = from_mask({false, true, false, true, true, true, true, true, true, false, false, false}, {3, 4});
  EXPECT_TRUE(gradcheck_passes([mask](const auto& in) { return softmax(masked_fill(in[0], mask, -kInf)); },
                               {param({3, 4}, 1)}));
}
TEST(FusedGradcheck, LogSoftmax) {
  EXPECT_TRUE(gradcheck_passes([](const auto& in) { return log_softmax(in[0]); }, {param({2, 3, 4}, 1, 2.0)}));
}
TEST(FusedGradcheck, LayerNormAffine) {
  EXPECT_TRUE(gradcheck_passes([](const auto& in) { return layer_norm(in[0], in[1], in[2]); },
                               {param({2, 3, 5}, 1, 2.0), param({5}, 2), param({5}, 3)}));
}
TEST(FusedGradcheck, LayerNormWithoutAffine) {
  EXPECT_TRUE(gradcheck_passes([](const auto& in) { return layer_norm(in[0], Tensor(), Tensor()); }, {param({4, 6}, 1)}));
}
TEST(FusedGradcheck, CrossEntropyWithIgnoreIndex) {
  const Tensor targets = from_indices(std::vector<std::int64_t>{2, -1, 0, 4, 1, -1}, {2, 3});
  EXPECT_TRUE(gradcheck_passes([targets](const auto& in) { return cross_entropy(in[0], targets, -1); },
                               {param({2, 3, 5}, 1, 2.0)}));
}
TEST(FusedGradcheck, CrossEntropyWithLabelSmoothing) {
  const Tensor targets = from_indices(std::vector<std::int64_t>{2, -1, 0, 4, 1, -1}, {2, 3});
  for (double eps : {0.1, 0.6})
    EXPECT_TRUE(gradcheck_passes([targets, eps](const auto& in) { return cross_entropy(in[0], targets, -1, eps); },
                                 {param({2, 3, 5}, 1, 2.0)}))
        << "label_smoothing " << eps;
}
TEST(FusedGradcheck, LayerNormLinear) {
  EXPECT_TRUE(gradcheck_passes(
      [](const auto& in) { return layer_norm_linear(in[0], in[1], in[2], 1e-5, in[3], in[4]); },
      {param({2, 3, 6}, 1, 2.0), param({6}, 2), param({6}, 3), param({4, 6}, 4), param({4}, 5)}));
  // Without the norm's affine parameters and without a bias.
  EXPECT_TRUE(gradcheck_passes([](const auto& in) { return layer_norm_linear(in[0], Tensor(), Tensor(), 1e-5, in[1], Tensor()); },
                               {param({5, 6}, 6), param({3, 6}, 7)}));
}
TEST(Fused, LayerNormLinearEqualsTheComposedOpsAndKeepsWhatTheyKeep) {
  const Tensor x = param({4, 5, 8}, 8), nw = param({8}, 9), nb = param({8}, 10), w = param({6, 8}, 11), b = param({6}, 12);
  const Tensor fused = layer_norm_linear(x, nw, nb, 1e-5, w, b);
  const Tensor composed = matmul(layer_norm(x, nw, nb), w, false, true) + b;
  const std::vector<double> f = fused.to_vector(), c = composed.to_vector();
  for (std::size_t i = 0; i < f.size(); ++i) EXPECT_NEAR(f[i], c[i], 1e-12);
  // Gradients equal the composed ops' for every input.
  Tensor g = param({4, 5, 6}, 13).detach();
  fused.backward(g);
  std::vector<std::vector<double>> fused_grads;
  for (Tensor t : {x, nw, nb, w, b}) fused_grads.push_back(t.grad().to_vector()), t.zero_grad();
  composed.backward(g);
  std::size_t n = 0;
  for (Tensor t : {x, nw, nb, w, b}) {
    const std::vector<double> want = t.grad().to_vector();
    for (std::size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(fused_grads[n][i], want[i], 1e-11) << "input " << n;
    ++n;
  }
  // What stays alive for the backward besides x (which the caller holds): the output, the norm's output
  // [4, 5, 8] (the Linear's input, for the weight gradient) and each row's mean and 1/std [20]; x_hat is
  // made again from x. Nothing else.
  const std::size_t before = Storage::live_bytes();
  Tensor out = layer_norm_linear(x, nw, nb, 1e-5, w, b);
  EXPECT_EQ(Storage::live_bytes() - before, (out.numel() + 4 * 5 * 8 + 2 * 20) * sizeof(double));
}
TEST(FusedGradcheck, Dropout) {
  // The same seed on every evaluation gives the same mask, so finite differences see one function.
  EXPECT_TRUE(gradcheck_passes(
      [](const auto& in) {
        Generator gen(123);
        return dropout(in[0], 0.4, true, gen);
      },
      {param({4, 5}, 1)}));
}

}  // namespace
}  // namespace attnlab
