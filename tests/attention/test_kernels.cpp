// The registry-driven kernel suite: every registered attention kernel is checked here by name, so a new
// kernel is tested as soon as it registers. Properties: shapes, the output is the pattern times the
// values, rows of the pattern sum to one (kernels that declare a normalised pattern), no leak from future
// tokens under causal masking, padded keys ignored, float64 gradcheck over q, k, v, the layer input
// (kernels that read it) and the kernel's own parameters, causal and not, with and without padding and
// ALiBi; and for kernels that declare cross-attention, the same with queries and keys of different
// lengths (and a clear error for those that do not).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "framework/attention/kernel.hpp"
#include "framework/attention/kernel_check.hpp"
#include "tests/test_util.hpp"

namespace attnlab {
namespace {

constexpr std::size_t kB = 2, kH = 2, kT = 6, kD = 4;

std::shared_ptr<AttentionKernel> build(const std::string& name, bool causal) {
  Generator gen(7);
  return make_kernel(name, KernelSpec{kH, kD, kT, causal}, YAML::Node(), gen);
}

// Cross-attention: queries from one sequence, keys and values from another, never causal. Fewer and
// more queries than keys; the keys stay within the spec's max_len (kT), which a cross spec gives for
// the key sequence.
struct CrossShape {
  std::size_t tq, tk;
};
constexpr CrossShape kCrossShapes[] = {{4, 6}, {7, 5}};

std::shared_ptr<AttentionKernel> build_cross(const std::string& name, bool padded) {
  Generator gen(7);
  return make_kernel(name, KernelSpec{kH, kD, kT, /*causal=*/false, padded, /*cross=*/true}, YAML::Node(), gen);
}

using I = std::int64_t;

class KernelSuite : public ::testing::TestWithParam<std::string> {
 protected:
  const KernelInfo& info() const { return KernelRegistry::instance().find(GetParam()); }
  std::vector<bool> causal_modes() const {
    std::vector<bool> modes;
    if (info().capabilities.bidirectional) modes.push_back(false);
    if (info().capabilities.causal) modes.push_back(true);
    return modes;
  }
  // The context of a call: the layer input [B, tq, H D] (the same for every call) for kernels that read it.
  AttentionContext context(bool causal, const Tensor& padding, bool pattern, std::size_t tq = kT, DType dtype = DType::float32) const {
    AttentionContext c{causal, padding, pattern};
    if (info().capabilities.reads_input) {
      Generator gen(11);
      c.input = randn({kB, tq, kH * kD}, gen, dtype);
    }
    return c;
  }
  // Cross-attention is unmasked attention across two sequences: it needs both capabilities.
  bool supports_cross() const { return info().capabilities.cross_attention && info().capabilities.bidirectional; }
};

TEST_P(KernelSuite, ShapesAndPatternRowsSumToOne) {
  for (bool causal : causal_modes()) {
    auto kernel = build(GetParam(), causal);
    Generator gen(1);
    const Tensor q = randn({kB, kH, kT, kD}, gen), k = randn({kB, kH, kT, kD}, gen), v = randn({kB, kH, kT, kD}, gen);
    const AttentionResult r = kernel->forward(q, k, v, context(causal, Tensor(), info().capabilities.pattern));
    EXPECT_EQ(r.output.shape(), (Shape{kB, kH, kT, kD}));
    if (!info().capabilities.pattern) continue;
    ASSERT_EQ(r.pattern.shape(), (Shape{kB, kH, kT, kT}));
    if (info().capabilities.normalised_pattern) {
      for (double s : sum(r.pattern, -1).to_vector()) EXPECT_NEAR(s, 1.0, 1e-5) << "causal " << causal;
    }
    if (causal) {
      for (std::size_t i = 0; i < kT; ++i)
        for (std::size_t j = i + 1; j < kT; ++j) EXPECT_EQ(r.pattern.at({0, 1, i, j}), 0.0);
    }
  }
}

TEST_P(KernelSuite, OutputIsThePatternTimesTheValues) {
  // The contract's meaning of "pattern": the effective mixing, output = pattern x values (float64, eval).
  if (!info().capabilities.pattern) GTEST_SKIP() << GetParam() << " returns no pattern";
  for (bool causal : causal_modes()) {
    auto kernel = build(GetParam(), causal);
    kernel->to(DType::float64);
    kernel->eval();
    Generator gen(9);
    const Tensor q = randn({kB, kH, kT, kD}, gen, DType::float64), k = randn({kB, kH, kT, kD}, gen, DType::float64),
                 v = randn({kB, kH, kT, kD}, gen, DType::float64);
    const AttentionResult r = kernel->forward(q, k, v, context(causal, Tensor(), true, kT, DType::float64));
    testing::expect_values(matmul(r.pattern, v), r.output.to_vector(), 1e-4);
  }
}

TEST_P(KernelSuite, CausalOutputsDoNotSeeTheFuture) {
  if (!info().capabilities.causal) GTEST_SKIP() << GetParam() << " is not causal";
  auto kernel = build(GetParam(), true);
  Generator gen(2);
  const Tensor q = randn({kB, kH, kT, kD}, gen, DType::float64), k = randn({kB, kH, kT, kD}, gen, DType::float64),
               v = randn({kB, kH, kT, kD}, gen, DType::float64);
  kernel->to(DType::float64);
  const Tensor before = kernel->forward(q, k, v, context(true, Tensor(), false, kT, DType::float64)).output;
  Tensor k2 = k.clone(), v2 = v.clone(), q2 = q.clone();
  for (std::size_t c = 0; c < kD; ++c)
    for (Tensor* t : {&k2, &v2, &q2}) t->data<double>()[(kT - 2) * kD + c] += 5.0;  // batch 0, head 0, token T-2
  const Tensor after = kernel->forward(q2, k2, v2, context(true, Tensor(), false, kT, DType::float64)).output;
  for (std::size_t t = 0; t + 2 < kT; ++t)
    for (std::size_t c = 0; c < kD; ++c) EXPECT_EQ(before.at({0, 0, t, c}), after.at({0, 0, t, c})) << "token " << t;
}

TEST_P(KernelSuite, PaddedKeysAreIgnored) {
  if (!info().capabilities.padding_mask) GTEST_SKIP() << GetParam() << " does not support padding masks";
  for (bool causal : causal_modes()) {
    auto kernel = build(GetParam(), causal);
    kernel->to(DType::float64);
    Generator gen(3);
    const Tensor q = randn({kB, kH, kT, kD}, gen, DType::float64), k = randn({kB, kH, kT, kD}, gen, DType::float64),
                 v = randn({kB, kH, kT, kD}, gen, DType::float64);
    std::vector<bool> pad(kB * kT, false);
    pad[1] = pad[kT - 1] = true;  // batch 0: keys 1 and T-1
    const Tensor padding = from_mask(pad, {kB, kT});
    const AttentionResult r = kernel->forward(q, k, v, context(causal, padding, info().capabilities.pattern, kT, DType::float64));
    // Changing padded keys and values changes nothing.
    Tensor k2 = k.clone(), v2 = v.clone();
    for (std::size_t h = 0; h < kH; ++h)
      for (std::size_t c = 0; c < kD; ++c)
        for (std::size_t t : {std::size_t{1}, kT - 1}) {
          k2.data<double>()[(h * kT + t) * kD + c] += 3.0;
          v2.data<double>()[(h * kT + t) * kD + c] -= 3.0;
        }
    const Tensor r2 = kernel->forward(q, k2, v2, context(causal, padding, false, kT, DType::float64)).output;
    const auto a = r.output.to_vector(), b = r2.to_vector();
    for (std::size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-12);
    if (info().capabilities.pattern) {
      for (std::size_t i = 0; i < kT; ++i) EXPECT_EQ(r.pattern.at({0, 0, i, 1}), 0.0);
    }
  }
}

TEST_P(KernelSuite, CrossAttentionShapesAndPatternRowsSumToOne) {
  if (!supports_cross()) GTEST_SKIP() << GetParam() << " does not support cross-attention";
  auto kernel = build_cross(GetParam(), false);
  for (const auto& [tq, tk] : kCrossShapes) {
    Generator gen(4);
    const Tensor q = randn({kB, kH, tq, kD}, gen), k = randn({kB, kH, tk, kD}, gen), v = randn({kB, kH, tk, kD}, gen);
    const AttentionResult r = kernel->forward(q, k, v, context(false, Tensor(), info().capabilities.pattern, tq));
    EXPECT_EQ(r.output.shape(), (Shape{kB, kH, tq, kD})) << "Tq " << tq << ", Tk " << tk;
    if (!info().capabilities.pattern) continue;
    ASSERT_EQ(r.pattern.shape(), (Shape{kB, kH, tq, tk})) << "Tq " << tq << ", Tk " << tk;
    if (!info().capabilities.normalised_pattern) continue;
    for (double s : sum(r.pattern, -1).to_vector()) EXPECT_NEAR(s, 1.0, 1e-5) << "Tq " << tq << ", Tk " << tk;
  }
}

TEST_P(KernelSuite, CrossAttentionRowsEqualTheSquareCall) {
  // Unmasked, a query's output depends on its own q and on the keys and values only; so a call with
  // Tq != Tk gives the rows that a call with Tq == Tk (the self-attention shape) gives for the same
  // queries. Queries q[0 .. max(Tq, Tk)); each call takes the leading ones it needs.
  if (!supports_cross()) GTEST_SKIP() << GetParam() << " does not support cross-attention";
  auto kernel = build_cross(GetParam(), false);
  kernel->to(DType::float64);
  kernel->eval();
  for (const auto& [tq, tk] : kCrossShapes) {
    Generator gen(5);
    const Tensor queries = randn({kB, kH, std::max(tq, tk), kD}, gen, DType::float64);
    const Tensor k = randn({kB, kH, tk, kD}, gen, DType::float64), v = randn({kB, kH, tk, kD}, gen, DType::float64);
    const Tensor cross = kernel->forward(slice(queries, 2, 0, static_cast<I>(tq)), k, v, context(false, Tensor(), false, tq, DType::float64)).output;
    const Tensor square = kernel->forward(slice(queries, 2, 0, static_cast<I>(tk)), k, v, context(false, Tensor(), false, tk, DType::float64)).output;
    for (std::size_t b = 0; b < kB; ++b)
      for (std::size_t h = 0; h < kH; ++h)
        for (std::size_t i = 0; i < std::min(tq, tk); ++i)
          for (std::size_t c = 0; c < kD; ++c)
            EXPECT_NEAR(cross.at({b, h, i, c}), square.at({b, h, i, c}), 1e-12) << "Tq " << tq << ", Tk " << tk << ", query " << i;
  }
}

TEST_P(KernelSuite, CrossAttentionIgnoresPaddedKeys) {
  if (!supports_cross()) GTEST_SKIP() << GetParam() << " does not support cross-attention";
  if (!info().capabilities.padding_mask) GTEST_SKIP() << GetParam() << " does not support padding masks";
  auto kernel = build_cross(GetParam(), true);
  kernel->to(DType::float64);
  for (const auto& [tq, tk] : kCrossShapes) {
    Generator gen(6);
    const Tensor q = randn({kB, kH, tq, kD}, gen, DType::float64), k = randn({kB, kH, tk, kD}, gen, DType::float64),
                 v = randn({kB, kH, tk, kD}, gen, DType::float64);
    const std::vector<std::size_t> padded_keys{1, tk - 1, tk};  // batch 0: keys 1 and Tk-1; batch 1: key 0
    std::vector<bool> pad(kB * tk, false);
    for (std::size_t key : padded_keys) pad[key] = true;
    const Tensor padding = from_mask(pad, {kB, tk});
    const AttentionResult r = kernel->forward(q, k, v, context(false, padding, info().capabilities.pattern, tq, DType::float64));
    // Changing padded keys and values changes nothing.
    Tensor k2 = k.clone(), v2 = v.clone();
    for (std::size_t key : padded_keys) {
      const std::size_t b = key / tk, t = key % tk;
      for (std::size_t h = 0; h < kH; ++h)
        for (std::size_t c = 0; c < kD; ++c) {
          k2.data<double>()[((b * kH + h) * tk + t) * kD + c] += 3.0;
          v2.data<double>()[((b * kH + h) * tk + t) * kD + c] -= 3.0;
        }
    }
    const Tensor r2 = kernel->forward(q, k2, v2, context(false, padding, false, tq, DType::float64)).output;
    const auto a = r.output.to_vector(), b = r2.to_vector();
    ASSERT_EQ(a.size(), b.size());
    for (std::size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-12) << "Tq " << tq << ", Tk " << tk;
    if (!info().capabilities.pattern) continue;
    for (std::size_t key : padded_keys)
      for (std::size_t h = 0; h < kH; ++h)
        for (std::size_t i = 0; i < tq; ++i)
          EXPECT_EQ(r.pattern.at({key / tk, h, i, key % tk}), 0.0) << "Tq " << tq << ", Tk " << tk << ", key " << key;
  }
}

TEST_P(KernelSuite, CrossSpecWithoutTheCapabilityIsRejected) {
  if (info().capabilities.cross_attention) GTEST_SKIP() << GetParam() << " supports cross-attention";
  const KernelSpec cross{kH, kD, kT, /*causal=*/false, /*padding_mask=*/false, /*cross=*/true};
  Generator gen(0);
  try {
    make_kernel(GetParam(), cross, YAML::Node(), gen);
    FAIL() << GetParam() << " was built for cross-attention";
  } catch (const std::invalid_argument& e) {
    const std::string m = e.what();
    const std::string head =
        GetParam() + " does not support cross-attention (queries and keys from different sequences); use one of [";
    ASSERT_EQ(m.rfind(head, 0), 0u) << m;
    // The alternatives offered are exactly the kernels that declare cross-attention.
    const std::size_t close = m.find(']', head.size());
    ASSERT_NE(close, std::string::npos) << m;
    std::vector<std::string> offered, expected;
    for (std::size_t at = head.size(); at < close;) {
      const std::size_t end = std::min(m.find(", ", at), close);
      offered.push_back(m.substr(at, end - at));
      at = end == close ? close : end + 2;
    }
    for (const auto& name : KernelRegistry::instance().names())
      if (KernelRegistry::instance().find(name).capabilities.cross_attention) expected.push_back(name);
    EXPECT_FALSE(expected.empty());
    EXPECT_EQ(offered, expected) << m;
  }
  EXPECT_THROW(check_kernel(GetParam(), cross, YAML::Node()), std::invalid_argument);  // config validation says the same
}

TEST_P(KernelSuite, GradcheckInputsAndParameters) {
  // The same check `attnlab gradcheck --kernel NAME` runs, in every mode the kernel supports.
  const auto checks = check_kernel_gradients(GetParam());
  EXPECT_FALSE(checks.empty());
  for (const auto& check : checks) EXPECT_TRUE(check.result.ok) << check.describe();
  // Cross-attention is checked exactly when the kernel declares it, and said so.
  const auto cross = std::find_if(checks.begin(), checks.end(), [](const KernelCheck& c) { return c.cross; });
  EXPECT_EQ(cross != checks.end(), supports_cross());
  if (cross != checks.end()) {
    EXPECT_FALSE(cross->causal);
    EXPECT_EQ(cross->describe().rfind(GetParam() + " cross", 0), 0u) << cross->describe();
  }
}

std::vector<std::string> registered_kernels() { return KernelRegistry::instance().names(); }

INSTANTIATE_TEST_SUITE_P(Registry, KernelSuite, ::testing::ValuesIn(registered_kernels()),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

TEST(KernelRegistry, HoldsEveryBuiltInKernel) {
  for (const char* name : {"softmax", "linear", "sparse", "performer", "linformer", "cosine", "sliding_window", "delta", "gated_delta", "decay"})
    EXPECT_TRUE(KernelRegistry::instance().contains(name)) << name;
}

TEST(KernelRegistry, UnknownNameListsWhatExists) {
  try {
    KernelRegistry::instance().find("sofmax");
    FAIL();
  } catch (const std::invalid_argument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("'sofmax' is not among ["), std::string::npos) << m;
    EXPECT_NE(m.find("softmax"), std::string::npos) << m;
    EXPECT_NE(m.find("did you mean 'softmax'"), std::string::npos) << m;
  }
}

TEST(KernelRegistry, DuplicateNamesAreRejected) {
  KernelInfo copy = KernelRegistry::instance().find("softmax");
  EXPECT_THROW(KernelRegistry::instance().add(copy), std::logic_error);
}

// A bidirectional-only kernel registered by this test file, the way an extension would: uniform
// attention over the unmasked keys. It exercises the capability checks and the suite's skips.
class MeanKernel : public AttentionKernel {
 public:
  static constexpr const char* kName = "test_mean";
  static constexpr const char* kDescription = "uniform attention (test)";
  static KernelCapabilities declared_capabilities() {
    KernelCapabilities c;
    c.causal = false;
    return c;
  }
  struct Options {};
  static Schema<Options> options_schema() { return {}; }
  static StateSize state_size(const KernelSpec& spec, const Options&) {
    return {0, static_cast<double>(spec.n_heads * spec.head_dim), "values so far"};
  }
  MeanKernel(const KernelSpec&, const Options&, Generator&) {}
  AttentionResult forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionContext& context) override {
    Tensor padding;
    if (context.key_padding_mask.defined())
      padding = reshape(context.key_padding_mask, {static_cast<std::int64_t>(k.size(0)), 1, 1, static_cast<std::int64_t>(k.size(2))});
    const Tensor scores = mul(matmul(q, k, false, true), 0.0);  // all equal
    const Tensor weights = scaled_masked_softmax(scores, 1.0, padding, false);
    AttentionResult r;
    r.output = matmul(weights, v);
    if (context.need_pattern) r.pattern = weights.detach();
    return r;
  }
};

ATTNLAB_REGISTER_KERNEL(MeanKernel);

TEST(KernelRegistry, CapabilitiesAreCheckedBeforeBuilding) {
  Generator gen(0);
  try {
    make_kernel("test_mean", KernelSpec{1, 4, 8, /*causal=*/true}, YAML::Node(), gen);
    FAIL();
  } catch (const std::invalid_argument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("test_mean does not support causal attention; use one of ["), std::string::npos) << m;
    EXPECT_NE(m.find("softmax"), std::string::npos) << m;
    EXPECT_EQ(m.find("test_mean]"), std::string::npos) << m;  // not offered as its own alternative
  }
  EXPECT_NO_THROW(make_kernel("test_mean", KernelSpec{1, 4, 8, false, /*padding_mask=*/true}, YAML::Node(), gen));
  EXPECT_EQ(make_kernel("test_mean", KernelSpec{1, 4, 8, false}, YAML::Node(), gen)->name(), "test_mean");
}

TEST(KernelRegistry, CrossSpecCannotBeCausal) {
  // Keys from another sequence have no position relative to the queries: a causal cross spec is a
  // mistake in the caller, whatever the kernel.
  const KernelSpec causal_cross{1, 4, 8, /*causal=*/true, /*padding_mask=*/false, /*cross=*/true};
  Generator gen(0);
  for (const char* name : {"softmax", "linear"}) {
    try {
      make_kernel(name, causal_cross, YAML::Node(), gen);
      ADD_FAILURE() << name << " was built for causal cross-attention";
    } catch (const std::invalid_argument& e) {
      const std::string m = e.what();
      EXPECT_EQ(m.rfind(std::string(name) + ": a cross-attention spec cannot be causal", 0), 0u) << m;
      EXPECT_NE(m.find("set causal = false"), std::string::npos) << m;
    }
    EXPECT_THROW(check_kernel(name, causal_cross, YAML::Node()), std::invalid_argument);
  }
}

}  // namespace
}  // namespace attnlab
