// gemm(): float products (oneDNN, libxsmm, OpenBLAS, each also forced through gemm_with) and double
// products (OpenBLAS) against a plain loop, for every transpose, blocks of larger matrices (leading
// dimensions above the block's width), beta 0 on a C full of NaN (written, never read), beta 1 and 0.5;
// which library takes which product; same bits on every call, thread and address; one OpenMP thread
// per caller of oneDNN.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <random>
#include <thread>
#include <type_traits>
#include <vector>

#include "framework/ops/blas.hpp"

namespace attnlab {
namespace {

// A [rows, cols] block at the top left of a [rows, cols + pad] matrix (leading dimension cols + pad).
template <class T>
struct Block {
  std::size_t rows, cols, ld;
  std::vector<T> values;
  Block(std::size_t r, std::size_t c, std::size_t pad, std::mt19937& gen) : rows(r), cols(c), ld(c + pad), values(r * (c + pad)) {
    std::normal_distribution<double> normal;
    for (T& v : values) v = static_cast<T>(normal(gen));
  }
  double at(std::size_t i, std::size_t j) const { return values[i * ld + j]; }
};

// C = op(A) op(B) + beta C0 through gemm() (float: through `library` when given) against a double loop,
// on blocks with padded rows.
template <class T>
void expect_product(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, T beta, std::mt19937& gen,
                    std::optional<FloatProducts> library = std::nullopt) {
  const Block<T> a = ta ? Block<T>(k, m, 3, gen) : Block<T>(m, k, 3, gen);
  const Block<T> b = tb ? Block<T>(n, k, 5, gen) : Block<T>(k, n, 5, gen);
  Block<T> c(m, n, 2, gen);
  if (beta == T(0))
    for (T& v : c.values) v = std::numeric_limits<T>::quiet_NaN();
  const Block<T> c0 = c;
  if constexpr (std::is_same_v<T, float>) {
    if (library) {
      gemm_with(*library, ta, tb, m, n, k, a.values.data(), a.ld, b.values.data(), b.ld, c.values.data(), c.ld, beta);
    } else {
      gemm(ta, tb, m, n, k, a.values.data(), a.ld, b.values.data(), b.ld, c.values.data(), c.ld, beta);
    }
  } else {
    gemm(ta, tb, m, n, k, a.values.data(), a.ld, b.values.data(), b.ld, c.values.data(), c.ld, beta);
  }
  const double tolerance = sizeof(T) == 4 ? 1e-4 : 1e-10;
  for (std::size_t i = 0; i < m; ++i)
    for (std::size_t j = 0; j < n; ++j) {
      double want = beta == T(0) ? 0.0 : beta * c0.at(i, j);
      for (std::size_t q = 0; q < k; ++q) want += (ta ? a.at(q, i) : a.at(i, q)) * (tb ? b.at(j, q) : b.at(q, j));
      ASSERT_NEAR(c.at(i, j), want, tolerance * (1 + std::fabs(want)))
          << (ta ? "T" : "N") << (tb ? "T" : "N") << " " << m << "x" << n << "x" << k << " beta " << beta << " at " << i << ", " << j;
    }
  for (std::size_t i = 0; i < m; ++i)  // the padding of C is left alone
    for (std::size_t j = n; j < c.ld; ++j) ASSERT_TRUE(std::isnan(c.at(i, j)) ? std::isnan(c0.at(i, j)) : c.at(i, j) == c0.at(i, j));
}

template <class T>
void expect_all_forms() {
  std::mt19937 gen(5);
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (T beta : {T(0), T(1), T(0.5)}) {
        expect_product<T>(ta, tb, 1, 1, 1, beta, gen);
        expect_product<T>(ta, tb, 7, 3, 5, beta, gen);
        expect_product<T>(ta, tb, 37, 70, 129, beta, gen);  // odd sizes around the kernels' tiles
        expect_product<T>(ta, tb, 96, 34, 64, beta, gen);   // a step's shape, in small
      }
}

TEST(Gemm, FloatMatchesALoopForEveryForm) { expect_all_forms<float>(); }

// Each library on its own, whichever this machine routes where: libxsmm's kernels (with the copy of B^T
// for A B^T, its rows a whole number of vectors apart, and A^T B^T, which the route never gives it),
// oneDNN's sgemm, directly and on a copy of B^T (which only a Zen 4 routes to), and OpenBLAS's, every
// form, small and step-sized shapes and a width no vector divides; libxsmm hands beta 0.5 to OpenBLAS.
TEST(Gemm, EveryFloatLibraryMatchesALoopForEveryForm) {
  std::mt19937 gen(11);
  for (FloatProducts library : {FloatProducts::libxsmm, FloatProducts::onednn, FloatProducts::onednn_bt_copy, FloatProducts::openblas})
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (float beta : {0.0f, 1.0f, 0.5f}) {
          expect_product<float>(ta, tb, 7, 3, 5, beta, gen, library);
          expect_product<float>(ta, tb, 32, 32, 32, beta, gen, library);
          expect_product<float>(ta, tb, 130, 96, 200, beta, gen, library);
          expect_product<float>(ta, tb, 96, 65, 128, beta, gen, library);  // libxsmm's B^T copy: rows padded to 80
        }
}

// The shapes above reach all three libraries: A B^T and everything above 64^3 multiply-adds go to oneDNN
// (to libxsmm on a Zen 4, a Zen 5 or an Intel CPU with AVX-512, as far as libxsmm_step_products()
// reaches: the next test), the other small products with beta 0 or 1 to libxsmm (to OpenBLAS's own
// small-matrix kernels where its kernel set has them), small A^T B^T and other betas to OpenBLAS.
// How oneDNN takes a product it is routed: a step-sized A B^T (step_sized_product) on a copy of B^T where
// onednn_takes_bt_copies() (a Zen 4), everything else as it is.
FloatProducts onednn_way(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k) {
  return onednn_takes_bt_copies() && tb && !ta && step_sized_product(ta, m, n, k) ? FloatProducts::onednn_bt_copy : FloatProducts::onednn;
}

// A step's products: above 64^3 multiply-adds, at least 32 rows of activations (m, or the k rows a weight
// gradient sums over), at least 16 on the other sides.
TEST(Gemm, StepSizedProductsHaveThirtyTwoRowsAndSixteenOnTheOtherSides) {
  EXPECT_TRUE(step_sized_product(false, 512, 16, 64));   // a 16-symbol head's logits
  EXPECT_TRUE(step_sized_product(true, 16, 64, 512));    // its weight gradient, summed over 512 rows
  EXPECT_TRUE(step_sized_product(false, 512, 64, 16));   // its input gradient
  EXPECT_TRUE(step_sized_product(false, 65, 64, 64));
  EXPECT_FALSE(step_sized_product(false, 64, 64, 64));   // not above 64^3
  EXPECT_FALSE(step_sized_product(false, 1, 4096, 4096));  // a generated token's
  EXPECT_FALSE(step_sized_product(false, 16, 512, 128));   // a few rows'
  EXPECT_FALSE(step_sized_product(false, 31, 512, 128));
  EXPECT_TRUE(step_sized_product(false, 32, 512, 128));
  EXPECT_FALSE(step_sized_product(true, 512, 128, 16));   // a weight gradient over 16 rows
  EXPECT_FALSE(step_sized_product(false, 2048, 15, 64));  // a side under 16
  EXPECT_FALSE(step_sized_product(true, 64, 15, 2048));
  EXPECT_FALSE(step_sized_product(false, 2048, 64, 15));
}

TEST(Gemm, SmallProductsGoToLibxsmmABtAndLargeOnesToOneDnnTheRestToOpenBlas) {
  const bool openblas_small = openblas_has_small_kernels(), step_on_libxsmm = libxsmm_takes_step_products();
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (float beta : {0.0f, 1.0f, 0.5f}) {
        const FloatProducts small = tb && !ta                                     ? FloatProducts::onednn
                                    : !tb && beta != 0.5f && !openblas_small ? FloatProducts::libxsmm
                                                                             : FloatProducts::openblas;
        const auto above = [&](std::size_t m, std::size_t n, std::size_t k) {
          return step_on_libxsmm && !(ta && tb) && beta != 0.5f ? FloatProducts::libxsmm : onednn_way(ta, tb, m, n, k);
        };
        EXPECT_EQ(sgemm_route(ta, tb, 96, 34, 64, beta), small) << ta << tb << beta;  // 208896 multiply-adds
        EXPECT_EQ(sgemm_route(ta, tb, 64, 64, 64, beta), small) << ta << tb << beta;  // the largest small one
        EXPECT_EQ(sgemm_route(ta, tb, 65, 64, 64, beta), above(65, 64, 64)) << ta << tb << beta;
        EXPECT_EQ(sgemm_route(ta, tb, 37, 70, 129, beta), above(37, 70, 129)) << ta << tb << beta;
      }
}

// Where a step-sized product (step_sized_product), not A^T B^T, with beta 0 or 1 goes
// by libxsmm_step_products()'s bounds: libxsmm within them (on a Zen 4, a Zen 5 or an Intel CPU with
// AVX-512), oneDNN outside (everywhere else, where the rule is all zero; an A B^T on a Zen 4 on a copy of
// B^T).
FloatProducts by_step_rule(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k) {
  const LibxsmmStepProducts rule = libxsmm_step_products();
  const bool within = ta ? m * n * k <= rule.largest_weight_gradient && k <= rule.longest_weight_gradient &&
                               m <= rule.tallest_weight_gradient && n <= rule.widest_weight_gradient
                         : m * n * k <= rule.largest && n <= rule.widest;
  return within ? FloatProducts::libxsmm : onednn_way(ta, tb, m, n, k);
}

// The same for A B, A B^T and A^T B, with the weight gradients A^T B of at least 128 x 128 from at least
// 512 rows on OpenBLAS where oneDNN runs its AVX2 kernels (no AVX-512).
FloatProducts by_route_rule(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k) {
  __builtin_cpu_init();
  if (ta && !tb && !__builtin_cpu_supports("avx512f") && m >= 128 && n >= 128 && k >= 512) return FloatProducts::openblas;
  return by_step_rule(ta, tb, m, n, k);
}

// The products of a training step's sizes go to libxsmm, A B^T through a copy of B^T, as far as
// libxsmm_step_products() reaches: the largest product and the widest, and for the weight gradients A^T B
// the largest one, the most rows summed over and the tallest and widest (the toy step's largest, 2048 x
// 256 x 64 = 2^25, is taken on a Zen 4 and a Zen 5); larger, wider and thin ones (a generated token's 1 x
// n x k) and A^T B^T to oneDNN. Without AVX-512 the weight gradients of at least 128 x 128 from 512 rows
// go to OpenBLAS (the next test).
TEST(Gemm, StepSizedProductsGoToLibxsmmAsFarAsTheRuleReaches) {
  const LibxsmmStepProducts rule = libxsmm_step_products();
  constexpr std::size_t any = LibxsmmStepProducts::kAny;
  EXPECT_EQ(rule.largest > 0, rule.largest_weight_gradient > 0);
  EXPECT_EQ(rule.largest > 0, rule.longest_weight_gradient > 0);
  EXPECT_GE(rule.largest, rule.largest_weight_gradient);
  const auto weight_gradient = [](std::size_t m, std::size_t n, std::size_t k) { return by_route_rule(true, false, m, n, k); };
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (float beta : {0.0f, 1.0f}) {
        const std::size_t m = ta ? 256 : 2048, n = 64, k = ta ? 2048 : 256;  // 2^25 multiply-adds
        const auto expected = [&](std::size_t columns) {  // m x columns x k
          return ta && tb ? FloatProducts::onednn : ta ? weight_gradient(m, columns, k) : by_step_rule(false, tb, m, columns, k);
        };
        EXPECT_EQ(sgemm_route(ta, tb, m, n, k, beta), expected(n)) << ta << tb << beta;
        EXPECT_EQ(sgemm_route(ta, tb, m, n + 1, k, beta), expected(n + 1)) << ta << tb << beta;
        EXPECT_EQ(sgemm_route(ta, tb, m, 2 * n, k, beta), expected(2 * n)) << ta << tb << beta;  // 2^26
        EXPECT_EQ(sgemm_route(ta, tb, m, 2 * n + 1, k, beta), ta && !tb ? weight_gradient(m, 2 * n + 1, k) : onednn_way(ta, tb, m, 2 * n + 1, k))
            << ta << tb << beta;
        EXPECT_EQ(sgemm_route(ta, tb, 1, 4096, 256, beta), FloatProducts::onednn) << ta << tb << beta;
        EXPECT_EQ(sgemm_route(ta, tb, m, 16, k, beta), expected(16)) << ta << tb << beta;  // a small vocabulary's head
        EXPECT_EQ(sgemm_route(ta, tb, m, 15, k, beta), FloatProducts::onednn) << ta << tb << beta;
        if (ta) {  // a weight gradient over a few rows; else a few rows' product
          EXPECT_EQ(sgemm_route(ta, tb, 128, 512, 16, beta), FloatProducts::onednn) << tb << beta;
        } else {
          EXPECT_EQ(sgemm_route(ta, tb, 16, 512, 128, beta), FloatProducts::onednn) << tb << beta;
        }
      }
  for (float beta : {0.0f, 1.0f}) {  // weight gradients over 1024 rows and over 1025
    EXPECT_EQ(sgemm_route(true, false, 64, 64, 1024, beta), weight_gradient(64, 64, 1024)) << beta;
    EXPECT_EQ(sgemm_route(true, false, 64, 64, 1025, beta), weight_gradient(64, 64, 1025)) << beta;
    EXPECT_EQ(sgemm_route(false, false, 1025, 64, 64, beta), by_step_rule(false, false, 1025, 64, 64)) << beta;  // not summed over
  }
  // The width bounds, where the rule has them: the widest product and weight gradient it takes, and one
  // column or row more.
  for (bool tb : {false, true})
    if (rule.widest < any) {
      EXPECT_EQ(sgemm_route(false, tb, 512, rule.widest, 64, 0.0f), FloatProducts::libxsmm) << tb;
      EXPECT_EQ(sgemm_route(false, tb, 512, rule.widest + 1, 64, 0.0f), onednn_way(false, tb, 512, rule.widest + 1, 64)) << tb;
    }
  if (rule.tallest_weight_gradient < any) {
    EXPECT_EQ(sgemm_route(true, false, rule.tallest_weight_gradient, 64, 512, 1.0f), FloatProducts::libxsmm);
    EXPECT_EQ(sgemm_route(true, false, rule.tallest_weight_gradient + 1, 64, 512, 1.0f), FloatProducts::onednn);
  }
  if (rule.widest_weight_gradient < any) {
    EXPECT_EQ(sgemm_route(true, false, 64, rule.widest_weight_gradient, 512, 0.0f), FloatProducts::libxsmm);
    EXPECT_EQ(sgemm_route(true, false, 64, rule.widest_weight_gradient + 1, 512, 0.0f), FloatProducts::onednn);
  }
}

// On an Intel CPU with AVX-512 the products of the GPT's and the default experiment's steps go where they
// were measured faster (blas.cpp): libxsmm those at most 128 columns wide and the weight gradients at most
// 192 x 128, oneDNN the wider ones, which libxsmm does not pack. Elsewhere they go by the machine's rule.
TEST(Gemm, AnIntelCpuWithAvx512SendsTheNarrowStepProductsToLibxsmm) {
  __builtin_cpu_init();
  const bool intel = cpu_vendor() == "GenuineIntel" && __builtin_cpu_supports("avx512f");
  struct Case {
    bool ta, tb;
    std::size_t m, n, k;
    FloatProducts on_intel;
  };
  const FloatProducts xsmm = FloatProducts::libxsmm, dnnl = FloatProducts::onednn;
  for (const Case& c : {Case{false, false, 768, 128, 512, xsmm}, Case{false, true, 768, 128, 512, xsmm},
                        Case{false, true, 768, 512, 128, dnnl}, Case{false, true, 768, 384, 128, dnnl},
                        Case{true, false, 128, 128, 768, xsmm}, Case{true, false, 65, 128, 768, xsmm},
                        Case{true, false, 384, 128, 768, dnnl}, Case{true, false, 128, 512, 768, dnnl},
                        Case{false, false, 2048, 64, 256, xsmm}, Case{false, false, 2048, 256, 64, dnnl},
                        Case{true, false, 192, 64, 2048, xsmm}, Case{true, false, 256, 64, 2048, dnnl},
                        Case{true, false, 64, 256, 2048, dnnl}}) {
    EXPECT_EQ(sgemm_route(c.ta, c.tb, c.m, c.n, c.k, 0.0f), intel ? c.on_intel : by_route_rule(c.ta, c.tb, c.m, c.n, c.k))
        << c.ta << c.tb << " " << c.m << "x" << c.n << "x" << c.k;
  }
}

// Where oneDNN runs its AVX2 kernels, the weight gradients A^T B of at least 128 x 128 from at least 512
// rows go to OpenBLAS; the head's (65 wide), the toy step's (64 wide) and shorter sums stay on oneDNN
// (libxsmm where libxsmm_step_products() takes them, on CPUs with AVX-512).
TEST(Gemm, LargeWeightGradientsGoToOpenBlasWithoutAvx512) {
  __builtin_cpu_init();
  const bool avx512 = __builtin_cpu_supports("avx512f");
  for (float beta : {0.0f, 1.0f}) {
    EXPECT_EQ(sgemm_route(true, false, 512, 128, 768, beta), avx512 ? by_step_rule(true, false, 512, 128, 768) : FloatProducts::openblas);
    EXPECT_EQ(sgemm_route(true, false, 128, 128, 512, beta), avx512 ? by_step_rule(true, false, 128, 128, 512) : FloatProducts::openblas);
    EXPECT_EQ(sgemm_route(true, false, 65, 128, 768, beta), by_step_rule(true, false, 65, 128, 768));
    EXPECT_EQ(sgemm_route(true, false, 256, 64, 2048, beta), by_step_rule(true, false, 256, 64, 2048));
    EXPECT_EQ(sgemm_route(true, false, 512, 128, 511, beta), by_step_rule(true, false, 512, 128, 511));  // just under 2^25
    // Not weight gradients: libxsmm's where its rule reaches this size (a Zen 5's, an Intel's), oneDNN's elsewhere.
    EXPECT_EQ(sgemm_route(false, false, 512, 128, 768, beta), by_step_rule(false, false, 512, 128, 768));
    EXPECT_EQ(sgemm_route(false, true, 512, 128, 768, beta), by_step_rule(false, true, 512, 128, 768));
  }
}
TEST(Gemm, DoubleMatchesALoopForEveryForm) { expect_all_forms<double>(); }

// Each thread keeps the last eight libxsmm kernels it used: twelve shapes in turn through libxsmm (on
// every machine: gemm_with), three times over, so that every kernel is looked up again after it was
// pushed out and found again while still kept.
TEST(Gemm, SmallKernelsStayRightWhenTheyAreLookedUpAgain) {
  std::mt19937 gen(7);
  for (int round = 0; round < 3; ++round)
    for (std::size_t k : {8, 16, 32})
      for (bool ta : {false, true})
        for (float beta : {0.0f, 1.0f}) expect_product<float>(ta, false, 32, 24, k, beta, gen, FloatProducts::libxsmm);
}

// oneDNN's A B^T of a step's size (directly and on a copy of B^T), libxsmm's, and libxsmm's small A B, each
// forced through its library (gemm_with), whichever this machine routes them to: the same bits on every
// call, on another thread, and with the operands and the result one float away from where they were
// (another alignment).
TEST(Gemm, FloatProductsAreTheSameBitsOnEveryCallThreadAndAddress) {
  struct Case {
    FloatProducts library;
    bool small;
  };
  std::mt19937 gen(9);
  for (const Case& one : {Case{FloatProducts::onednn, false}, Case{FloatProducts::onednn_bt_copy, false},
                          Case{FloatProducts::libxsmm, false}, Case{FloatProducts::libxsmm, true}}) {
    const bool small = one.small;
    const std::size_t m = small ? 64 : 130, n = small ? 32 : 96, k = small ? 32 : 64;
    const Block<float> a(m, k, 1, gen), b = small ? Block<float>(k, n, 1, gen) : Block<float>(n, k, 1, gen);
    auto product = [&](std::size_t shift) {
      std::vector<float> as(shift), bs(shift), c(m * n + 1);  // the same values, `shift` floats further on
      as.insert(as.end(), a.values.begin(), a.values.end());
      bs.insert(bs.end(), b.values.begin(), b.values.end());
      gemm_with(one.library, false, !small, m, n, k, as.data() + shift, a.ld, bs.data() + shift, b.ld, c.data() + shift, n);
      return std::vector<float>(c.begin() + shift, c.begin() + shift + m * n);
    };
    const std::vector<float> first = product(0);
    EXPECT_EQ(product(0), first) << small;
    EXPECT_EQ(product(1), first) << small;
    std::vector<float> on_thread;
    int openmp_threads = 0;
    std::thread([&] {
      on_thread = product(0);
      openmp_threads = omp_get_max_threads();  // oneDNN would open a team of this many threads
    }).join();
    EXPECT_EQ(on_thread, first) << small;
    if (one.library == FloatProducts::onednn || one.library == FloatProducts::onednn_bt_copy) {
      EXPECT_EQ(openmp_threads, 1);
    }
  }
}

TEST(Gemm, NamesTheFloatLibraries) {
  EXPECT_EQ(sgemm_library().rfind("oneDNN ", 0), 0u) << sgemm_library();
  EXPECT_EQ(sgemm_library().find(" (A B^T on a copy of B^T), ") != std::string::npos, onednn_takes_bt_copies()) << sgemm_library();
  const std::string small = sgemm_library().substr(sgemm_library().rfind(", ") + 2);
  EXPECT_EQ(small.rfind(openblas_has_small_kernels() ? "OpenBLAS " : "libxsmm ", 0), 0u) << sgemm_library();
  EXPECT_NE(small.find(" for small products"), std::string::npos) << sgemm_library();
  EXPECT_EQ(sgemm_library().find("for products of 64^3 to 2^") != std::string::npos, libxsmm_takes_step_products())
      << sgemm_library();
  const LibxsmmStepProducts rule = libxsmm_step_products();  // the bounds the rule has, named
  const std::string largest_weight_gradient =
      "weight gradients to 2^" + std::to_string(__builtin_ctzll(std::max<std::size_t>(rule.largest_weight_gradient, 1)));
  EXPECT_EQ(sgemm_library().find(largest_weight_gradient) != std::string::npos,
            rule.largest > 0 && rule.largest_weight_gradient < rule.largest)
      << sgemm_library();
  constexpr std::size_t any = LibxsmmStepProducts::kAny;
  EXPECT_EQ(sgemm_library().find("summed over up to " + std::to_string(rule.longest_weight_gradient) + " rows") != std::string::npos,
            rule.largest > 0 && rule.longest_weight_gradient < any)
      << sgemm_library();
  EXPECT_EQ(sgemm_library().find("multiply-adds up to " + std::to_string(rule.widest) + " columns") != std::string::npos,
            rule.largest > 0 && rule.widest < any)
      << sgemm_library();
  const auto side = [&](std::size_t x) { return x < any ? std::to_string(x) : std::string("any"); };
  EXPECT_EQ(sgemm_library().find("up to " + side(rule.tallest_weight_gradient) + " x " + side(rule.widest_weight_gradient)) !=
                std::string::npos,
            rule.largest > 0 && (rule.tallest_weight_gradient < any || rule.widest_weight_gradient < any))
      << sgemm_library();
}

// count_products: every product while on (float and double, empty ones not), none after, reset when
// turned on again.
TEST(Gemm, CountsTheProductsWhileCountingIsOn) {
  std::vector<float> a(64 * 48, 0.5f), b(48 * 32, 0.25f), c(64 * 32);
  std::vector<double> ad(8 * 4, 1.0), bd(4 * 2, 1.0), cd(8 * 2);
  gemm(false, false, 64, 32, 48, a.data(), 48, b.data(), 32, c.data(), 32);  // before: not counted
  count_products(true);
  gemm(false, false, 64, 32, 48, a.data(), 48, b.data(), 32, c.data(), 32);
  gemm(true, false, 32, 32, 64, a.data(), 32, a.data(), 32, c.data(), 32);
  gemm(false, false, 8, 2, 4, ad.data(), 4, bd.data(), 2, cd.data(), 2);
  gemm(false, false, 0, 32, 48, a.data(), 48, b.data(), 32, c.data(), 32);  // empty
  ProductTotals totals = product_totals();
  EXPECT_EQ(totals.calls, 3u);
  EXPECT_EQ(totals.flops, 2.0 * (64 * 32 * 48 + 32 * 32 * 64 + 8 * 2 * 4));
  EXPECT_GE(totals.seconds, 0.0);
  count_products(false);
  gemm(false, false, 64, 32, 48, a.data(), 48, b.data(), 32, c.data(), 32);
  EXPECT_EQ(product_totals().calls, 3u);
  count_products(true);
  EXPECT_EQ(product_totals().calls, 0u);
  EXPECT_EQ(product_totals().flops, 0.0);
  count_products(false);
}

// count_products(true, true): each form with the library that ran it (where a library refused, the one
// that took over), its calls and time, longest first, the times adding up to the totals; by shape only
// while asked for, and cleared when counting starts again.
TEST(Gemm, CountsEachProductFormWithTheLibraryThatRanIt) {
  std::vector<float> a(64 * 48, 0.5f), b(48 * 32, 0.25f), c(64 * 32);
  std::vector<double> ad(8 * 4, 1.0), bd(4 * 2, 1.0), cd(8 * 2);
  count_products(true, true);
  for (int i = 0; i < 2; ++i) gemm_with(FloatProducts::onednn, false, false, 64, 32, 48, a.data(), 48, b.data(), 32, c.data(), 32);
  gemm_with(FloatProducts::libxsmm, true, false, 32, 32, 32, a.data(), 32, b.data(), 32, c.data(), 32);
  gemm_with(FloatProducts::libxsmm, false, false, 32, 32, 32, a.data(), 32, b.data(), 32, c.data(), 32, 0.5f);  // to OpenBLAS
  gemm(false, true, 8, 2, 4, ad.data(), 4, bd.data(), 4, cd.data(), 2);
  const ProductTotals totals = product_totals();
  count_products(false);
  const std::vector<ProductShape> shapes = product_totals_by_shape();
  ASSERT_EQ(shapes.size(), 4u);
  const auto find = [&](bool ta, bool tb, std::size_t m, const std::string& library) {
    for (const ProductShape& p : shapes)
      if (p.ta == ta && p.tb == tb && p.m == m && p.library == library) return p;
    ADD_FAILURE() << "no " << ta << tb << " product of " << m << " rows on " << library;
    return ProductShape{};
  };
  const ProductShape nn = find(false, false, 64, "oneDNN");
  EXPECT_EQ(nn.calls, 2u);
  EXPECT_EQ(nn.n, 32u);
  EXPECT_EQ(nn.k, 48u);
  EXPECT_EQ(find(true, false, 32, "libxsmm").calls, 1u);
  EXPECT_EQ(find(false, false, 32, "OpenBLAS").calls, 1u);
  EXPECT_EQ(find(false, true, 8, "OpenBLAS float64").calls, 1u);
  double seconds = 0;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    seconds += shapes[i].seconds;
    if (i) {
      EXPECT_GE(shapes[i - 1].seconds, shapes[i].seconds);
    }
  }
  EXPECT_NEAR(seconds, totals.seconds, 1e-9);
  count_products(true);  // not by shape: the old ones cleared, none added
  gemm(false, false, 64, 32, 48, a.data(), 48, b.data(), 32, c.data(), 32);
  count_products(false);
  EXPECT_TRUE(product_totals_by_shape().empty());
  EXPECT_EQ(product_totals().calls, 1u);
}

}  // namespace
}  // namespace attnlab
