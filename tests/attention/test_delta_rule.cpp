// The chunked gated delta rule against its definition, the token-by-token recurrence (composed from
// autograd ops here), in float64: values and gradients of all five inputs, across chunk boundaries, with
// and without the delta correction and the decay. And the recurrent kernels' own facts: RetNet's fixed
// decays, beta in (0, 1) from the layer input, a signed pattern.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "framework/attention/kernel.hpp"
#include "framework/attention/recurrent/delta_rule.hpp"
#include "framework/autograd/gradcheck.hpp"
#include "tests/test_util.hpp"

namespace attnlab {
namespace {

using I = std::int64_t;
constexpr std::size_t kB = 2, kH = 2, kT = 11, kDk = 3, kDv = 4;

// S_t = alpha_t S_{t-1} + k_t u_t^T, u_t = beta_t (v_t - alpha_t S_{t-1}^T k_t) (u_t = v_t without beta),
// o_t = S_t^T q_t, one token at a time.
Tensor recurrence(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& beta, const Tensor& log_alpha) {
  const I b = static_cast<I>(q.size(0)), h = static_cast<I>(q.size(1));
  Tensor state = zeros({q.size(0), q.size(1), q.size(3), v.size(3)}, DType::float64);
  std::vector<Tensor> outputs;
  for (I t = 0; t < static_cast<I>(q.size(2)); ++t) {
    const Tensor qt = slice(q, 2, t, t + 1), kt = slice(k, 2, t, t + 1), vt = slice(v, 2, t, t + 1);  // [B, H, 1, D]
    const Tensor decayed = log_alpha.defined() ? state * reshape(exp(slice(log_alpha, 2, t, t + 1)), {b, h, 1, 1}) : state;
    Tensor u = vt;
    if (beta.defined()) u = (vt - matmul(kt, decayed)) * reshape(slice(beta, 2, t, t + 1), {b, h, 1, 1});
    state = decayed + matmul(kt, u, true, false);  // k_t u_t^T
    outputs.push_back(matmul(qt, state));
  }
  return concat(outputs, 2);
}

struct Case {
  bool delta, gated;
  std::size_t chunk;
};

// The gradients of sum(out * weights) (a loss that weighs every output differently) with respect to each
// input, and their comparison with a reference's to 1e-12 in every element.
std::vector<std::vector<double>> weighted_grads(const Tensor& out, const Tensor& weights, std::vector<Tensor>& inputs) {
  for (Tensor& x : inputs) x.zero_grad();
  sum(out * weights).backward();
  std::vector<std::vector<double>> grads;
  for (const Tensor& x : inputs) grads.push_back(x.grad().to_vector());
  return grads;
}
void expect_same_grads(const Tensor& got, const Tensor& want, const Tensor& weights, std::vector<Tensor>& inputs, const std::string& where) {
  const auto g = weighted_grads(got, weights, inputs), w = weighted_grads(want, weights, inputs);
  for (std::size_t i = 0; i < g.size(); ++i)
    for (std::size_t j = 0; j < g[i].size(); ++j) EXPECT_NEAR(g[i][j], w[i][j], 1e-12) << where << "input " << i << ", element " << j;
}

class DeltaRule : public ::testing::TestWithParam<Case> {};

TEST_P(DeltaRule, ChunkedEqualsTheTokenByTokenRecurrenceInValuesAndGradients) {
  const Case c = GetParam();
  const Tensor q = testing::param({kB, kH, kT, kDk}, 1, 0.5), k = testing::param({kB, kH, kT, kDk}, 2, 0.5),
               v = testing::param({kB, kH, kT, kDv}, 3);
  const Tensor beta = c.delta ? testing::param_uniform({kB, kH, kT}, 4, 0.05, 0.95) : Tensor();
  const Tensor log_alpha = c.gated ? testing::param_uniform({kB, kH, kT}, 5, -0.7, -0.01) : Tensor();
  std::vector<Tensor> inputs{q, k, v};
  if (c.delta) inputs.push_back(beta);
  if (c.gated) inputs.push_back(log_alpha);
  const Tensor weights = testing::param({kB, kH, kT, kDv}, 6);  // a loss that weighs every output differently
  const Tensor chunked = gated_delta_rule(q, k, v, beta, log_alpha, c.chunk);
  const Tensor reference = recurrence(q, k, v, beta, log_alpha);
  testing::expect_values(chunked, reference.to_vector(), 1e-12);
  expect_same_grads(chunked, reference, weights, inputs, "");
}

TEST_P(DeltaRule, Gradcheck) {
  const Case c = GetParam();
  std::vector<Tensor> inputs{testing::param({1, kH, kT, kDk}, 7, 0.5), testing::param({1, kH, kT, kDk}, 8, 0.5),
                             testing::param({1, kH, kT, kDv}, 9)};
  if (c.delta) inputs.push_back(testing::param_uniform({1, kH, kT}, 10, 0.05, 0.95));
  if (c.gated) inputs.push_back(testing::param_uniform({1, kH, kT}, 11, -0.7, -0.01));
  EXPECT_TRUE(testing::gradcheck_passes(
      [&](const std::vector<Tensor>& in) {
        return gated_delta_rule(in[0], in[1], in[2], c.delta ? in[3] : Tensor(), c.gated ? in[c.delta ? 4 : 3] : Tensor(), c.chunk);
      },
      inputs));
}

// Chunks of 4 and 3 over 11 tokens (a short last chunk), one chunk of all of them, and single tokens.
INSTANTIATE_TEST_SUITE_P(Modes, DeltaRule,
                         ::testing::Values(Case{true, true, 4}, Case{true, false, 3}, Case{false, true, 4}, Case{false, false, 3},
                                           Case{true, true, 64}, Case{true, true, 1}),
                         [](const ::testing::TestParamInfo<Case>& p) {
                           return std::string(p.param.delta ? "delta" : "plain") + (p.param.gated ? "_gated" : "") + "_chunk" +
                                  std::to_string(p.param.chunk);
                         });

// The chunk's own triangular solves keep 8 rows of the solution in registers and take its columns one
// 64-byte vector at a time (8 doubles, 16 floats): head dims wider than a vector and not a multiple of it
// (a full tile and a partial one), chunks of several row blocks with a partial last block, and a short
// last chunk, in float64 against the recurrence, values and gradients.
TEST(DeltaRule, WideHeadsAndLongChunksEqualTheRecurrence) {
  struct Shape3 {
    std::size_t dk, dv, t, chunk;
  };
  for (const Shape3 c : {Shape3{9, 11, 37, 16}, Shape3{17, 8, 30, 30}, Shape3{8, 19, 21, 64}}) {
    const Tensor q = testing::param({1, 2, c.t, c.dk}, 51, 0.3), k = testing::param({1, 2, c.t, c.dk}, 52, 0.3),
                 v = testing::param({1, 2, c.t, c.dv}, 53);
    const Tensor beta = testing::param_uniform({1, 2, c.t}, 54, 0.05, 0.95), la = testing::param_uniform({1, 2, c.t}, 55, -0.5, -0.01);
    const Tensor weights = testing::param({1, 2, c.t, c.dv}, 56);
    std::vector<Tensor> inputs{q, k, v, beta, la};
    const Tensor chunked = gated_delta_rule(q, k, v, beta, la, c.chunk), reference = recurrence(q, k, v, beta, la);
    testing::expect_values(chunked, reference.to_vector(), 1e-12);
    expect_same_grads(chunked, reference, weights, inputs,
                      "dk " + std::to_string(c.dk) + ", dv " + std::to_string(c.dv) + ", chunk " + std::to_string(c.chunk) + ": ");
  }
}

// normalise_qk: the op L2-normalises q and k as it loads each chunk; values and gradients equal the
// recurrence over q and k normalised beforehand (composed ops), across chunk edges, and gradcheck passes.
TEST(DeltaRule, NormalisingInsideEqualsNormalisingBefore) {
  const auto normalised = [](const Tensor& x) { return x / sqrt(add(sum(x * x, -1, true), kQkNormEps)); };
  for (const std::size_t chunk : {4, 64}) {
    for (const bool gated : {true, false}) {
      const Tensor q = testing::param({kB, kH, kT, kDk}, 61), k = testing::param({kB, kH, kT, kDk}, 62), v = testing::param({kB, kH, kT, kDv}, 63);
      const Tensor beta = testing::param_uniform({kB, kH, kT}, 64, 0.05, 0.95);
      const Tensor la = gated ? testing::param_uniform({kB, kH, kT}, 65, -0.7, -0.01) : Tensor();
      const Tensor weights = testing::param({kB, kH, kT, kDv}, 66);
      std::vector<Tensor> inputs{q, k, v, beta};
      if (gated) inputs.push_back(la);
      const Tensor inside = gated_delta_rule(q, k, v, beta, la, chunk, true);
      const Tensor before = recurrence(normalised(q), normalised(k), v, beta, la);
      testing::expect_values(inside, before.to_vector(), 1e-12);
      expect_same_grads(inside, before, weights, inputs, "chunk " + std::to_string(chunk) + (gated ? ", gated" : "") + ": ");
      EXPECT_TRUE(testing::gradcheck_passes(
          [&](const std::vector<Tensor>& in) { return gated_delta_rule(in[0], in[1], in[2], in[3], gated ? in[4] : Tensor(), chunk, true); },
          inputs));
    }
  }
}

// normalise_output: each output row divided by its root mean square as the chunk is made; values, the
// factors and the gradients equal the recurrence followed by the composed norm, across chunk edges.
TEST(DeltaRule, NormalisingTheOutputInsideEqualsNormalisingAfter) {
  const auto rms_factors = [](const Tensor& x) {
    return div(ones({}, x.dtype()), sqrt(add(sum(x * x, -1, true) / static_cast<double>(x.size(-1)), kQkNormEps)));
  };
  for (const std::size_t chunk : {3, 64}) {
    const Tensor q = testing::param({kB, kH, kT, kDk}, 71), k = testing::param({kB, kH, kT, kDk}, 72), v = testing::param({kB, kH, kT, kDv}, 73);
    const Tensor beta = testing::param_uniform({kB, kH, kT}, 74, 0.05, 0.95), la = testing::param_uniform({kB, kH, kT}, 75, -0.7, -0.01);
    const Tensor weights = testing::param({kB, kH, kT, kDv}, 76);
    std::vector<Tensor> inputs{q, k, v, beta, la};
    DeltaRuleOptions options;
    options.chunk = chunk, options.normalise_qk = true, options.normalise_output = true;
    Tensor factors;
    const Tensor inside = gated_delta_rule(q, k, v, beta, la, options, &factors);
    const auto unit = [](const Tensor& x) { return x / sqrt(add(sum(x * x, -1, true), kQkNormEps)); };
    const Tensor raw = recurrence(unit(q), unit(k), v, beta, la), after = raw * rms_factors(raw);
    testing::expect_values(inside, after.to_vector(), 1e-12);
    testing::expect_values(factors, rms_factors(raw).to_vector(), 1e-12);
    expect_same_grads(inside, after, weights, inputs, "chunk " + std::to_string(chunk) + ": ");
    EXPECT_TRUE(testing::gradcheck_passes([&](const std::vector<Tensor>& in) { return gated_delta_rule(in[0], in[1], in[2], in[3], in[4], options); },
                                          inputs));
  }
}

// Decays strong enough that g_i = alpha_1 ... alpha_i underflows within a chunk take the exp path for
// Gamma (log g below -600 in double); the values still equal the recurrence.
TEST(DeltaRule, StrongDecaysEqualTheRecurrence) {
  const Tensor q = testing::param({1, 2, 9, 3}, 17), k = testing::param({1, 2, 9, 3}, 18), v = testing::param({1, 2, 9, 4}, 19);
  const Tensor beta = testing::param_uniform({1, 2, 9}, 20, 0.1, 0.9), la = testing::param_uniform({1, 2, 9}, 21, -120.0, -80.0);
  testing::expect_values(gated_delta_rule(q, k, v, beta, la, 9), recurrence(q, k, v, beta, la).to_vector(), 1e-12);
  testing::expect_values(gated_delta_rule(q, k, v, Tensor(), la, 9), recurrence(q, k, v, Tensor(), la).to_vector(), 1e-12);
}

// Head dims 8 (less than one float vector of the solves) and 20 (one and a part).
TEST(DeltaRule, FloatMatchesDouble) {
  for (const std::size_t d : {8, 20}) {
    const Tensor q = testing::param({1, 2, 150, d}, 12, 0.3), k = testing::param({1, 2, 150, d}, 13, 0.3), v = testing::param({1, 2, 150, d}, 14);
    const Tensor beta = testing::param_uniform({1, 2, 150}, 15, 0.1, 0.9), la = testing::param_uniform({1, 2, 150}, 16, -0.2, -0.01);
    const Tensor exact = gated_delta_rule(q, k, v, beta, la, 64);
    const Tensor single = gated_delta_rule(q.to(DType::float32), k.to(DType::float32), v.to(DType::float32), beta.to(DType::float32),
                                           la.to(DType::float32), 64);
    testing::expect_values(single, exact.to_vector(), 1e-4);
  }
}

// float32 gradients as accurate at any chunk size as token by token (chunk 1), against float64, for
// mild to very strong decays, with and without the delta correction: the chunked form's cumulative log
// decays and the sums that make their gradient are taken in double, so its rounding does not grow with
// the chunk. (Summed in float, the error at T = 200 grew to 2e-6 at chunk 200 for mild decays and 3e-5
// from chunk 100 on for strong ones, against 2e-7 at chunk 1.)
TEST(DeltaRule, FloatGradientsStayAtTheFloorForEveryChunk) {
  const std::size_t b = 1, h = 4, t = 200, d = 16;
  const auto unit_rows = [](const Tensor& x) { return x / sqrt(sum(x * x, -1, true)); };
  const Tensor q = unit_rows(testing::param({b, h, t, d}, 31)), k = unit_rows(testing::param({b, h, t, d}, 32));
  const Tensor v = testing::param({b, h, t, d}, 33), beta = testing::param_uniform({b, h, t}, 34, 0.05, 0.95);
  const Tensor weights = testing::param({b, h, t, d}, 35);
  for (const bool delta : {true, false}) {
    for (const double strength : {0.4, 1.6, 16.0}) {  // log alpha uniform in [-strength, -0.001]
      const Tensor la = testing::param_uniform({b, h, t}, 36, -strength, -0.001);
      const auto grads = [&](DType dtype, std::size_t chunk) {
        std::vector<Tensor> in{q.detach().to(dtype), k.detach().to(dtype), v.detach().to(dtype), beta.detach().to(dtype), la.detach().to(dtype)};
        for (Tensor& x : in) x.set_requires_grad(true);
        sum(gated_delta_rule(in[0], in[1], in[2], delta ? in[3] : Tensor(), in[4], chunk) * weights.to(dtype)).backward();
        std::vector<std::vector<double>> out;
        for (const Tensor& x : in) out.push_back(x.grad().defined() ? x.grad().to_vector() : std::vector<double>());
        return out;
      };
      const auto exact = grads(DType::float64, 1);
      for (const std::size_t chunk : {1, 16, 64, 100, 200}) {
        const auto single = grads(DType::float32, chunk);
        for (std::size_t i = 0; i < exact.size(); ++i) {
          if (exact[i].empty()) continue;  // beta without the delta correction
          double error = 0, scale = 0;
          for (std::size_t j = 0; j < exact[i].size(); ++j)
            error = std::max(error, std::abs(single[i][j] - exact[i][j])), scale = std::max(scale, std::abs(exact[i][j]));
          EXPECT_LT(error, 1e-6 * scale) << (delta ? "delta" : "plain") << ", log alpha down to -" << strength << ", chunk " << chunk
                                         << ": the gradient of input " << i << " (q, k, v, beta, log_alpha) is off by " << error / scale;
        }
      }
    }
  }
}

TEST(DeltaRule, BadShapesAreNamed) {
  const Tensor q = zeros({1, 2, 5, 4}, DType::float64);
  try {
    gated_delta_rule(q, q, q, zeros({1, 2, 4}, DType::float64), Tensor());
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("beta and log_alpha must be [B, H, T]"), std::string::npos) << e.what();
  }
}

// The decay kernel without output norm mixes v_j into o_i with (q_i . k_j / sqrt(D)) gamma_h^(i - j),
// RetNet's gamma_h = 1 - 2^(-5 - h).
TEST(RecurrentKernels, FixedDecayIsRetNetsGammaPerHead) {
  Generator gen(0);
  constexpr std::size_t h = 3, t = 6, d = 4;
  auto kernel = make_kernel("decay", KernelSpec{h, d, t, true}, YAML::Load("{output_norm: false}"), gen);
  kernel->to(DType::float64);
  const Tensor q = testing::param({1, h, t, d}, 1), k = testing::param({1, h, t, d}, 2), v = testing::param({1, h, t, d}, 3);
  AttentionContext context{true, Tensor(), true};
  context.input = testing::param({1, t, h * d}, 4);
  const Tensor pattern = kernel->forward(q, k, v, context).pattern;
  const Tensor scores = matmul(q, k, false, true);
  for (std::size_t head = 0; head < h; ++head) {
    const double gamma = 1.0 - std::pow(2.0, -5.0 - static_cast<double>(head));
    for (std::size_t i = 0; i < t; ++i)
      for (std::size_t j = 0; j < t; ++j) {
        const double want = j > i ? 0.0 : scores.at({0, head, i, j}) / std::sqrt(double(d)) * std::pow(gamma, double(i - j));
        EXPECT_NEAR(pattern.at({0, head, i, j}), want, 1e-12) << "head " << head << ", " << i << " <- " << j;
      }
  }
}

// DeltaNet's pattern is signed: the delta rule subtracts what a key already retrieves.
TEST(RecurrentKernels, DeltaPatternsAreSignedAndCausal) {
  Generator gen(1);
  auto kernel = make_kernel("delta", KernelSpec{2, 4, 8, true}, YAML::Node(), gen);
  kernel->to(DType::float64);
  const Tensor q = testing::param({1, 2, 8, 4}, 5), k = testing::param({1, 2, 8, 4}, 6), v = testing::param({1, 2, 8, 4}, 7);
  AttentionContext context{true, Tensor(), true};
  context.input = testing::param({1, 8, 8}, 8);
  const Tensor pattern = kernel->forward(q, k, v, context).pattern;
  bool negative = false;
  for (std::size_t h = 0; h < 2; ++h)
    for (std::size_t i = 0; i < 8; ++i)
      for (std::size_t j = 0; j < 8; ++j) {
        if (j > i) {
          EXPECT_EQ(pattern.at({0, h, i, j}), 0.0);
        }
        negative = negative || pattern.at({0, h, i, j}) < 0;
      }
  EXPECT_TRUE(negative);
  EXPECT_FALSE(kernel->capabilities().normalised_pattern);
}

// "Padded keys write nothing and decay nothing": with padding at the start and in the middle, every real
// position's output equals that of the same sequence with the padded positions taken out, for every
// recurrent kernel and gate (their decays and writes read the layer input, so a padded token that wrote or
// decayed would change every later output).
TEST(RecurrentKernels, PaddedKeysWriteNothingAndDecayNothing) {
  constexpr std::size_t h = 2, t = 9, d = 4;
  const std::vector<bool> padded = {true, false, false, true, true, false, false, false, true};
  const auto real = [&](const Tensor& x, std::int64_t axis) {  // x without its padded positions along `axis`
    std::vector<Tensor> kept;
    for (std::size_t i = 0; i < t; ++i)
      if (!padded[i]) kept.push_back(slice(x, axis, static_cast<I>(i), static_cast<I>(i) + 1));
    return concat(kept, axis);
  };
  std::vector<double> mask(t);
  for (std::size_t i = 0; i < t; ++i) mask[i] = padded[i] ? 1.0 : 0.0;
  for (const auto& [name, options] : std::vector<std::pair<std::string, std::string>>{
           {"delta", "{chunk: 4}"}, {"gated_delta", "{chunk: 4}"}, {"decay", "{chunk: 4}"}, {"decay", "{chunk: 4, gate: data}"}}) {
    Generator gen(3);
    auto kernel = make_kernel(name, KernelSpec{h, d, t, true, true}, YAML::Load(options), gen);
    kernel->to(DType::float64);
    const Tensor q = testing::param({1, h, t, d}, 41), k = testing::param({1, h, t, d}, 42), v = testing::param({1, h, t, d}, 43);
    const Tensor x = testing::param({1, t, h * d}, 44);
    AttentionContext with_padding{true, from_vector(mask, {1, t}, DType::boolean)};
    with_padding.input = x;
    AttentionContext without{true};
    without.input = real(x, 1);
    const Tensor padded_out = kernel->forward(q, k, v, with_padding).output;
    const Tensor compact_out = kernel->forward(real(q, 2), real(k, 2), real(v, 2), without).output;
    testing::expect_values(real(padded_out, 2), compact_out.to_vector(), 1e-12);
  }
}

// The gates the kernels take from the layer input (one fused op, head_gates) are their formulas, composed
// here from autograd ops: beta = sigmoid(w . x + b), log alpha = -exp(a) softplus(w . x + dt); gated_delta
// takes both from one product. And their gradients, parameters included, for the data-gated decay too
// (the registry's gradcheck builds every kernel with its default options, where decay's gate is fixed).
TEST(RecurrentKernels, GatesFromTheInputAreTheirFormulasAndGradcheck) {
  constexpr std::size_t h = 2, t = 7, d = 4;
  const auto softplus = [](const Tensor& z) { return relu(z) + log(add(exp(z - relu(z) - relu(z)), 1.0)); };  // exp(-|z|) inside
  const auto heads_first = [](const Tensor& x) { return permute(x, {0, 2, 1}); };
  for (const auto& [name, options] : std::vector<std::pair<std::string, std::string>>{
           {"delta", "{chunk: 3}"}, {"gated_delta", "{chunk: 3}"}, {"decay", "{chunk: 3, gate: data}"}}) {
    Generator gen(5);
    auto kernel = make_kernel(name, KernelSpec{h, d, t, true, false}, YAML::Load(options), gen);
    kernel->to(DType::float64);
    std::map<std::string, Tensor> p;
    for (const auto& named : kernel->named_parameters()) p[named.name] = named.tensor;
    const Tensor q = testing::param({2, h, t, d}, 51), k = testing::param({2, h, t, d}, 52), v = testing::param({2, h, t, d}, 53);
    const Tensor x = testing::param({2, t, h * d}, 54);
    Tensor beta, la;
    if (p.count("beta.proj.weight")) beta = heads_first(sigmoid(linear(x, p["beta.proj.weight"], p["beta.proj.bias"])));
    if (p.count("decay.a_log"))
      la = heads_first(neg(exp(p["decay.a_log"])) * softplus(linear(x, p["decay.proj.weight"], p["decay.dt_bias"])));
    ASSERT_EQ(beta.defined(), name != "decay") << name;
    ASSERT_EQ(la.defined(), name != "delta") << name;
    DeltaRuleOptions rule;
    rule.chunk = 3, rule.normalise_qk = name != "decay", rule.normalise_output = true;
    const Tensor want = gated_delta_rule(name == "decay" ? q * (1.0 / std::sqrt(static_cast<double>(d))) : q, k, v, beta, la, rule);
    AttentionContext context{true};
    context.input = x;
    testing::expect_values(kernel->forward(q, k, v, context).output, want.to_vector(), 1e-12);

    std::vector<Tensor> inputs{q.detach().set_requires_grad(true), x.detach().set_requires_grad(true)};
    for (const auto& named : kernel->named_parameters()) inputs.push_back(named.tensor);
    const GradcheckResult check = gradcheck(
        [&](const std::vector<Tensor>& in) {
          AttentionContext c{true};
          c.input = in[1];
          return kernel->forward(in[0], k, v, c).output;
        },
        inputs);
    EXPECT_TRUE(check.ok) << name << ":\n" << check.report();
  }
}

TEST(RecurrentKernels, RefuseBidirectionalAndMissingInput) {
  Generator gen(2);
  EXPECT_THROW(make_kernel("delta", KernelSpec{2, 4, 8, false}, YAML::Node(), gen), std::invalid_argument);
  auto kernel = make_kernel("gated_delta", KernelSpec{2, 4, 8, true}, YAML::Node(), gen);
  const Tensor x = zeros({1, 2, 8, 4});
  try {
    kernel->forward(x, x, x, AttentionContext{true});
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("gated_delta: needs the layer input [B, T, C]"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace attnlab
