// The Fourier analysis of grokking on inputs whose answer is known: an embedding built from two
// frequencies of Z_13, and logits that are one frequency of a + b - c (Nanda et al.'s algorithm).
#include <gtest/gtest.h>

#include <cmath>

#include "experiments/analysis/part.hpp"

namespace attnlab {
namespace {

constexpr std::size_t kP = 13;
const double kPi = std::acos(-1.0);

TEST(Fourier, TheSpectrumOfAHandBuiltEmbeddingIsItsFrequencies) {
  // Columns: cos(3a), sin(3a), cos(5a) (each of squared norm p / 2), and a column of zeros.
  std::vector<double> e(kP * 4, 0.0);
  for (std::size_t a = 0; a < kP; ++a) {
    const double w = 2 * kPi * static_cast<double>(a) / kP;
    e[a * 4] = std::cos(3 * w), e[a * 4 + 1] = std::sin(3 * w), e[a * 4 + 2] = std::cos(5 * w);
  }
  const std::vector<double> shares = fourier_spectrum(e, kP, 4);
  ASSERT_EQ(shares.size(), kP / 2 + 1);
  for (std::size_t k = 0; k < shares.size(); ++k) EXPECT_NEAR(shares[k], k == 3 ? 2.0 / 3 : k == 5 ? 1.0 / 3 : 0.0, 1e-12) << k;
  EXPECT_EQ(key_frequencies(shares), (std::vector<std::size_t>{3, 5}));
  // A constant embedding has its norm at frequency 0 and no key frequency.
  EXPECT_NEAR(fourier_spectrum(std::vector<double>(kP, 1.0), kP, 1)[0], 1.0, 1e-12);
}

TEST(Fourier, RestrictedAndExcludedLossesKeepAndRemoveTheKeyFrequencies) {
  std::vector<ModularPair> pairs;
  std::vector<double> logits;
  for (std::size_t a = 0; a < kP; ++a)
    for (std::size_t b = 0; b < kP; ++b) {
      pairs.push_back({a, b, static_cast<std::int64_t>((a + b) % kP), (a * kP + b) % 3 == 0});
      for (std::size_t c = 0; c < kP; ++c) logits.push_back(4.0 * std::cos(2 * kPi * 3.0 * (static_cast<double>(a + b) - static_cast<double>(c)) / kP));
    }
  // The plain loss: every row is the same distribution, its answer at the peak.
  double top_total = 0;
  for (std::size_t c = 0; c < kP; ++c) top_total += std::exp(4.0 * std::cos(2 * kPi * 3.0 * static_cast<double>(c) / kP) - 4.0);
  const double plain = std::log(top_total);
  const FourierLosses with_key = fourier_losses(logits, pairs, kP, 1, {3});
  EXPECT_NEAR(with_key.restricted, plain, 1e-9);           // all of it is the key frequency
  EXPECT_NEAR(with_key.excluded, std::log(double(kP)), 1e-9);  // nothing left: uniform
  const FourierLosses other = fourier_losses(logits, pairs, kP, 1, {4});
  EXPECT_NEAR(other.restricted, std::log(double(kP)), 1e-9);
  EXPECT_NEAR(other.excluded, plain, 1e-9);
}

}  // namespace
}  // namespace attnlab
