// Recurrent kernels with a data-dependent write or forget, all through the chunked gated delta rule
// (recurrent/delta_rule.hpp), causal only:
//   delta        DeltaNet (Yang et al. 2024): S_t = S_{t-1} + beta_t k_t (v_t - S_{t-1}^T k_t)^T, o_t = S_t^T q_t,
//                q and k L2-normalised, beta_t = sigmoid(w_h . x_t + b_h) from the layer input.
//   gated_delta  Gated DeltaNet (Yang et al. 2025): the same (q, k L2-normalised, beta_t as delta's) with a decay
//                alpha_t applied to the state before the write, Mamba-2's gate alpha_t = exp(-exp(a_h)
//                softplus(w_h . x_t + dt_h)).
//   decay        linear attention with a decaying state, S_t = alpha S_{t-1} + k_t v_t^T, q scaled by
//                1/sqrt(D): fixed per head as RetNet's retention (gamma_h = 1 - 2^(-5-h), Sun et al. 2023) or
//                from the input with Mamba-2's scalar gate above (Dao and Gu 2024). GLA's gate (Yang et al.
//                2023: sigmoid(W x_t)^(1/16), one per key dimension) is not implemented.
// Each normalises its output per head by its root mean square, x / sqrt(mean(x^2) + eps), eps 1e-6 (option
// output_norm, on by default, as flash-linear-attention's o_norm, whose eps is 1e-5, and RetNet's group
// norm), without a gain: one per dimension would be absorbed by the output projection. Padded keys write
// nothing and decay nothing (tested). Decoding runs the recurrence token by token from S (gated_delta_step):
// O(D^2) per head and new token, whatever the length so far.
//
// Their pattern is the effective mixing o_i = sum_j A_ij v_j, signed and unnormalised (rows do not sum
// to one): the output is linear in v for given q, k and gates, so A is the op applied to v = I (columns of
// padded keys zero), its rows scaled as the output norm scales them.
//
// Legend: B batch, H heads, T tokens, C layer width, D head dim.
#include <algorithm>
#include <cmath>
#include <vector>

#include "framework/attention/kernel.hpp"
#include "framework/attention/recurrent/delta_rule.hpp"
#include "framework/nn/layers.hpp"
#include "framework/ops/row_kernels.hpp"
#include "framework/ops/simd.hpp"

namespace attnlab {
namespace {

using I = std::int64_t;

enum class DecayGate { fixed, data };

// Options the three kernels share.
struct RecurrentOptions {
  // Tokens per chunk of the chunked form. 32 measured clearly faster than 64 at head dims 16, 32 and 64
  // (4096 tokens, forward + backward, one thread; delta, gated_delta and decay alike) and about as fast as
  // 16 (within the noise of a shared machine; slower at head dim 64): the [C, C] blocks cost C D per
  // token, the state's products D^2, and each chunk its BLAS calls.
  std::size_t chunk = 32;
  bool output_norm = true;  // RMS-normalise each head's output
  DecayGate gate = DecayGate::fixed;  // decay only
};

constexpr double kNormEps = kQkNormEps;  // of the output (RMS) norm, made inside the op as the L2 norm of q and k

Tensor identity(std::size_t n, DType dtype) {
  std::vector<double> values(n * n, 0.0);
  for (std::size_t i = 0; i < n; ++i) values[i * n + i] = 1.0;
  return from_vector(values, {n, n}, dtype);
}

// The keep mask [B, 1, T, 1] (1 for real keys) or undefined without padding.
Tensor keep_mask(const AttentionContext& context, std::size_t batch, std::size_t t, DType dtype) {
  if (!context.key_padding_mask.defined()) return Tensor();
  check_key_padding_mask(context.key_padding_mask, batch, t);
  return where(reshape(context.key_padding_mask, {static_cast<I>(batch), 1, static_cast<I>(t), 1}), zeros({}, dtype), ones({}, dtype));
}

// The per-head gates, from the layer's projections z [B, T, G H] (G gates side by side, H heads each),
// each into [B, H, T] as the recurrence reads them, in one pass over z each way (they were a chain of
// eight elementwise ops and a permute, each with its node, allocation and pass):
//   write  beta = sigmoid(z)
//   decay  log alpha = -exp(a_h) softplus(z), Mamba-2's gate (softplus(z) = relu(z) + log(1 + e^-|z|))
// Each element in double whatever the dtype, through xsimd's exp and log1p (scalar std::exp and log1p
// were 2% of a gated_delta step at 4096 tokens).
enum class GateKind { write, decay };

using Doubles = xsimd::batch<double>;
Doubles sigmoid(Doubles x) { return Doubles(1.0) / (Doubles(1.0) + xsimd::exp(-x)); }

// Each gate's and head's rate, at g H + h: exp(a_h) for a decay, 0 for a write gate.
template <class T>
std::vector<double> decay_rates(const std::vector<GateKind>& kinds, const Tensor& a_log, std::size_t heads) {
  std::vector<double> rates(kinds.size() * heads, 0.0);
  for (std::size_t g = 0; g < kinds.size(); ++g)
    if (kinds[g] == GateKind::decay)
      for (std::size_t h = 0; h < heads; ++h) rates[g * heads + h] = std::exp(static_cast<double>(a_log.data<T>()[h]));
  return rates;
}

// head_gates' backward: dz from each gate's slope (sigmoid's s (1 - s) from the gate s itself; for the
// decay, softplus' slope, the sigmoid of z, times -e^a), and da from the decay gates' values (d/da of
// -e^a softplus is the gate itself).
std::vector<Tensor> head_gates_backward(const Tensor& z, const Tensor& a_log, const std::vector<GateKind>& kinds, const std::vector<Tensor>& kept,
                                        const std::vector<Tensor>& grads) {
  const std::size_t batch = z.size(0), t = z.size(1), count = kinds.size(), heads = z.size(2) / count, width = count * heads;
  Tensor dz = empty(z.shape(), z.dtype()), da = a_log.defined() ? zeros(a_log.shape(), z.dtype()) : Tensor();
  dispatch_floating(z.dtype(), "head_gates backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    std::vector<T> rows(width * t), drows(width * t);
    std::vector<double> slope(t), d_rate(width, 0.0);
    const std::vector<double> rates = decay_rates<T>(kinds, a_log, heads);
    for (std::size_t b = 0; b < batch; ++b) {
      simd::transpose(z.data<T>() + b * t * width, t, width, rows.data(), t);
      for (std::size_t g = 0; g < count; ++g)
        for (std::size_t h = 0; h < heads; ++h) {
          T* dr = drows.data() + (g * heads + h) * t;
          if (!grads[g].defined()) {
            std::fill(dr, dr + t, T(0));
            continue;
          }
          const std::size_t first = (b * heads + h) * t;  // the row's first gate
          const T *go = grads[g].data<T>() + first, *value = kept[g].data<T>() + first;
          if (kinds[g] == GateKind::write) {
            for (std::size_t i = 0; i < t; ++i) slope[i] = static_cast<double>(value[i]) * (1.0 - static_cast<double>(value[i]));
          } else {
            const T* zr = rows.data() + (g * heads + h) * t;
            std::transform(zr, zr + t, slope.begin(), [](T x) { return static_cast<double>(x); });
            const double rate = rates[g * heads + h];
            rowops::map_row(slope.data(), slope.data(), t, [rate](Doubles x) { return -rate * sigmoid(x); });
            for (std::size_t i = 0; i < t; ++i) d_rate[g * heads + h] += static_cast<double>(go[i]) * static_cast<double>(value[i]);
          }
          for (std::size_t i = 0; i < t; ++i) dr[i] = static_cast<T>(static_cast<double>(go[i]) * slope[i]);
        }
      simd::transpose(drows.data(), width, t, dz.data<T>() + b * t * width, width);
    }
    for (std::size_t g = 0; g < count; ++g)
      if (kinds[g] == GateKind::decay && grads[g].defined())
        for (std::size_t h = 0; h < heads; ++h) da.data<T>()[h] += static_cast<T>(d_rate[g * heads + h]);
  });
  return {dz, da};
}

// One sequence's projections z [T, G H] as rows [G H, T] (a row per gate and head, as the gates are
// laid out), and back: transposed through registers rather than gathered column by column.
std::vector<Tensor> head_gates(const Tensor& z, const std::vector<GateKind>& kinds, const Tensor& a_log) {
  const std::size_t batch = z.size(0), t = z.size(1), count = kinds.size(), heads = z.size(2) / count, width = count * heads;
  std::vector<Tensor> gates;
  for (std::size_t i = 0; i < count; ++i) gates.push_back(empty({batch, heads, t}, z.dtype()));
  dispatch_floating(z.dtype(), "head_gates", [&](auto tag) {
    using T = typename decltype(tag)::type;
    std::vector<T> rows(width * t);
    std::vector<double> row(t);
    const std::vector<double> rates = decay_rates<T>(kinds, a_log, heads);
    for (std::size_t b = 0; b < batch; ++b) {
      simd::transpose(z.data<T>() + b * t * width, t, width, rows.data(), t);
      for (std::size_t g = 0; g < count; ++g)
        for (std::size_t h = 0; h < heads; ++h) {
          const T* zr = rows.data() + (g * heads + h) * t;
          std::transform(zr, zr + t, row.begin(), [](T x) { return static_cast<double>(x); });
          if (kinds[g] == GateKind::write) {
            rowops::map_row(row.data(), row.data(), t, sigmoid);
          } else {
            const double rate = rates[g * heads + h];
            rowops::map_row(row.data(), row.data(), t, [rate](Doubles x) { return -rate * (xsimd::max(x, Doubles(0.0)) + xsimd::log1p(xsimd::exp(-xsimd::abs(x)))); });
          }
          std::transform(row.begin(), row.end(), gates[g].data<T>() + (b * heads + h) * t, [](double x) { return static_cast<T>(x); });
        }
    }
  });
  if (!needs_grad({&z, &a_log})) return gates;
  std::vector<Tensor> kept;  // the gates' values (d log alpha / d a_h = log alpha)
  for (const Tensor& gate : gates) kept.push_back(gate.detach());
  record(gates, "head_gates", {z, a_log}, [z = z.detach(), a_log = a_log.defined() ? a_log.detach() : Tensor(), kinds, kept](const std::vector<Tensor>& grads) {
    return head_gates_backward(z, a_log, kinds, kept, grads);
  });
  return gates;
}

// What a gate module multiplies the layer input by (z = x W^T + b) and which gate z becomes.
struct GateInput {
  Tensor weight, bias;
  GateKind kind;
};

// The gates of one or more modules from the layer input x [B, T, C], each [B, H, T]: their projections
// as one product (x read once each way however many gates), then head_gates. a_log: the decay's rates.
std::vector<Tensor> gates_from(const Tensor& x, const std::vector<GateInput>& inputs, const Tensor& a_log) {
  std::vector<Tensor> weights, biases;
  std::vector<GateKind> kinds;
  for (const GateInput& in : inputs) weights.push_back(in.weight), biases.push_back(in.bias), kinds.push_back(in.kind);
  const Tensor z = inputs.size() == 1 ? linear(x, weights[0], biases[0]) : linear(x, concat(weights, 0), concat(biases, 0));
  return head_gates(z, kinds, a_log);
}

// Mamba-2's decay gate: log alpha_t = -exp(a_h) softplus(w_h . x_t + dt_h), per head. Init as Mamba-2:
// exp(a_h) uniform in [1, 16], softplus(dt_h) log-uniform in [0.001, 0.1].
class DecayGateModule : public Module {
 public:
  DecayGateModule(std::size_t width, std::size_t heads, Generator& gen) {
    proj = register_module("proj", std::make_shared<Linear>(width, heads, false, gen));
    NoGradGuard no_grad;
    std::vector<double> a(heads), dt(heads);
    for (std::size_t h = 0; h < heads; ++h) {
      a[h] = std::log(1.0 + 15.0 * gen.next_double());
      const double step = std::exp(std::log(0.001) + (std::log(0.1) - std::log(0.001)) * gen.next_double());
      dt[h] = step + std::log(-std::expm1(-step));  // softplus^-1(step)
    }
    a_log = register_parameter("a_log", from_vector(a, {heads}), ParamKind::bias);
    dt_bias = register_parameter("dt_bias", from_vector(dt, {heads}), ParamKind::bias);
  }
  GateInput input() const { return {proj->weight, dt_bias, GateKind::decay}; }  // dt_bias is the projection's bias
  // x [B, T, C] -> log alpha [B, H, T]
  Tensor forward(const Tensor& x) const { return gates_from(x, {input()}, a_log)[0]; }
  std::shared_ptr<Linear> proj;
  Tensor a_log, dt_bias;
};

// What the three kernels share: the recurrence's call, padding, output norm and pattern.
class RecurrentKernel : public AttentionKernel {
 public:
  static KernelCapabilities declared_capabilities() {
    KernelCapabilities c;
    c.bidirectional = false;
    c.cross_attention = false;
    c.normalised_pattern = false;
    c.reads_input = true;
    c.incremental = true;  // S, a D x D matrix per head (gated_delta_step)
    return c;
  }
  // The options every one of them reads (decay adds its gate).
  using Options = RecurrentOptions;
  static Schema<Options> options_schema() {
    Schema<Options> s;
    s.field("chunk", &Options::chunk, "tokens per chunk of the chunked (WY) form; changes speed, and values only by float rounding (any chunk up to T)", Range::at_least(1));
    s.field("output_norm", &Options::output_norm,
            "normalise each head's output by its root mean square, x / sqrt(mean(x^2) + " + schema_detail::number(kNormEps) + "), without a gain");
    return s;
  }
  static StateSize state_size(const KernelSpec& spec, const RecurrentOptions&) {
    const double d = static_cast<double>(spec.head_dim);
    return {static_cast<double>(spec.n_heads) * d * d, 0, "S, a D x D state per head"};
  }

 protected:
  RecurrentKernel(const KernelSpec& spec, const RecurrentOptions& options) : options_(options), heads_(spec.n_heads), dim_(spec.head_dim) {}
  // q, k as the recurrence reads them, beta [B, H, T] (undefined: no delta correction), log alpha
  // [B, H, T] (undefined: no decay), from the layer input x [B, T, C].
  struct Inputs {
    Tensor q, k, beta, log_alpha;
    bool normalise_qk = false;  // the op L2-normalises q and k as it loads them (delta, gated_delta)
  };
  virtual Inputs prepare(const Tensor& q, const Tensor& k, const Tensor& x) const = 0;

  // What the recurrence reads for q, k, v [B, H, T, D] and the context: prepare's inputs, with padded keys
  // writing nothing and decaying nothing (k, v and log alpha zero there), the values, and the keep mask.
  struct Recurrence {
    Inputs in;
    Tensor values, keep;
  };
  Recurrence recurrence(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionContext& context) const {
    const std::size_t batch = q.size(0), t = q.size(2);
    if (!context.causal || k.size(2) != t || v.size(2) != t) {
      throw std::invalid_argument(name() + ": a causal recurrence over one sequence (self-attention, causal mask)");
    }
    if (!context.input.defined() || context.input.dim() != 3 || context.input.size(0) != batch || context.input.size(1) != t) {
      throw std::invalid_argument(name() + ": needs the layer input [B, T, C] in the attention context, got " +
                                  (context.input.defined() ? shape_str(context.input.shape()) : std::string("none")));
    }
    Recurrence r{prepare(q, k, context.input), v, keep_mask(context, batch, t, q.dtype())};
    if (r.keep.defined()) {
      r.in.k = r.in.k * r.keep;
      r.values = r.values * r.keep;
      if (r.in.log_alpha.defined()) r.in.log_alpha = r.in.log_alpha * reshape(r.keep, {static_cast<I>(batch), 1, static_cast<I>(t)});
    }
    return r;
  }
  DeltaRuleOptions rule_options(const Inputs& in) const {
    DeltaRuleOptions rule;
    rule.chunk = options_.chunk, rule.normalise_qk = in.normalise_qk, rule.normalise_output = options_.output_norm;
    return rule;
  }

 public:
  // Decoding: the recurrence token by token from S, one D x D matrix per head, with the chunked op's norms.
  std::unique_ptr<DecodeState> start_decoding(std::size_t batch) const override {
    return std::make_unique<MatrixState>(batch, heads_, dim_, dim_);
  }
  Tensor decode(DecodeState& state, const Tensor& q, const Tensor& k, const Tensor& v, const AttentionContext& context) override {
    const Recurrence r = recurrence(q, k, v, context);
    return gated_delta_step(state_as<MatrixState>(state, name()), r.in.q, r.in.k, r.values, r.in.beta, r.in.log_alpha, rule_options(r.in));
  }

  AttentionResult forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionContext& context) override {
    const std::size_t batch = q.size(0), t = q.size(2);
    const Recurrence r = recurrence(q, k, v, context);
    const Inputs& in = r.in;
    const Tensor& keep = r.keep;
    AttentionResult result;
    Tensor factors;  // the output norm's factor per row [B, H, T, 1]
    result.output = gated_delta_rule(in.q, in.k, r.values, in.beta, in.log_alpha, rule_options(in), &factors);  // [B, H, T, D]
    if (context.need_pattern) {
      NoGradGuard no_grad;
      Tensor unit = broadcast_to(identity(t, q.dtype()), {batch, q.size(1), t, t});
      if (keep.defined()) unit = unit * reshape(keep, {static_cast<I>(batch), 1, 1, static_cast<I>(t)});
      const Tensor mixing = gated_delta_rule(in.q.detach(), in.k.detach(), unit, in.beta.defined() ? in.beta.detach() : Tensor(),
                                             in.log_alpha.defined() ? in.log_alpha.detach() : Tensor(), options_.chunk, in.normalise_qk);
      result.pattern = options_.output_norm ? mixing * factors : mixing;
    }
    return result;
  }

 protected:
  RecurrentOptions options_;
  std::size_t heads_, dim_;
};

// beta_t = sigmoid(w_h . x_t + b_h): [B, H, T]
class WriteStrength : public Module {
 public:
  WriteStrength(std::size_t width, std::size_t heads, Generator& gen) {
    proj = register_module("proj", std::make_shared<Linear>(width, heads, true, gen));
  }
  GateInput input() const { return {proj->weight, proj->bias, GateKind::write}; }
  Tensor forward(const Tensor& x) const { return gates_from(x, {input()}, Tensor())[0]; }
  std::shared_ptr<Linear> proj;
};

class DeltaKernel : public RecurrentKernel {
 public:
  static constexpr const char* kName = "delta";
  static constexpr const char* kDescription =
      "DeltaNet's delta rule S_t = S_{t-1} + beta_t k_t (v_t - S_{t-1}^T k_t)^T, L2-normalised q, k, beta from the input "
      "(Yang et al. 2024); chunked, O(n (C + d) d) time, O(n d) memory; causal";
  DeltaKernel(const KernelSpec& spec, const Options& options, Generator& gen) : RecurrentKernel(spec, options) {
    beta = register_module("beta", std::make_shared<WriteStrength>(spec.width(), spec.n_heads, gen));
  }
  std::shared_ptr<WriteStrength> beta;

 protected:
  Inputs prepare(const Tensor& q, const Tensor& k, const Tensor& x) const override {
    return {q, k, beta->forward(x), Tensor(), true};
  }
};

class GatedDeltaKernel : public RecurrentKernel {
 public:
  static constexpr const char* kName = "gated_delta";
  static constexpr const char* kDescription =
      "Gated DeltaNet: the delta rule (L2-normalised q, k; beta = sigmoid(w x + b)) with a decay alpha_t = exp(-e^a softplus(w x + dt)) "
      "of the state (Mamba-2's gate) before each write (Yang et al. 2025); chunked, O(n (C + d) d) time, O(n d) memory; causal";
  GatedDeltaKernel(const KernelSpec& spec, const Options& options, Generator& gen) : RecurrentKernel(spec, options) {
    beta = register_module("beta", std::make_shared<WriteStrength>(spec.width(), spec.n_heads, gen));
    decay = register_module("decay", std::make_shared<DecayGateModule>(spec.width(), spec.n_heads, gen));
  }
  std::shared_ptr<WriteStrength> beta;
  std::shared_ptr<DecayGateModule> decay;

 protected:
  // beta's and the decay's projections as one product, x [B, T, C] read once each way instead of twice
  // (each was a Linear C -> H, memory-bound on x: 4% of a step apiece at 4096 tokens).
  Inputs prepare(const Tensor& q, const Tensor& k, const Tensor& x) const override {
    const std::vector<Tensor> gates = gates_from(x, {beta->input(), decay->input()}, decay->a_log);
    return {q, k, gates[0], gates[1], true};
  }
};

class DecayKernel : public RecurrentKernel {
 public:
  static constexpr const char* kName = "decay";
  static constexpr const char* kDescription =
      "linear attention with a decaying state S_t = alpha S_{t-1} + k_t v_t^T: fixed per head (RetNet) or from the input "
      "(Mamba-2's scalar gate); chunked, O(n (C + d) d) time, O(n d) memory; causal";
  static Schema<Options> options_schema() {
    static const EnumNames<DecayGate> gates{{"fixed", DecayGate::fixed}, {"data", DecayGate::data}};
    Schema<Options> s = RecurrentKernel::options_schema();
    s.choice("gate", &Options::gate, gates,
             "`fixed`: RetNet's gamma_h = 1 - 2^(-5-h); `data`: alpha_t from the layer input (Mamba-2's gate)");
    return s;
  }
  DecayKernel(const KernelSpec& spec, const Options& options, Generator& gen)
      : RecurrentKernel(spec, options), scale_(1.0 / std::sqrt(static_cast<double>(spec.head_dim))) {
    if (options.gate == DecayGate::data) {
      decay = register_module("decay", std::make_shared<DecayGateModule>(spec.width(), spec.n_heads, gen));
    } else {
      log_gamma_.resize(spec.n_heads);  // kept in double: a float32 buffer would round gamma for float64 runs
      for (std::size_t h = 0; h < spec.n_heads; ++h) log_gamma_[h] = std::log1p(-std::pow(2.0, -5.0 - static_cast<double>(h)));
    }
  }
  std::shared_ptr<DecayGateModule> decay;

 protected:
  Inputs prepare(const Tensor& q, const Tensor& k, const Tensor& x) const override {
    Tensor log_alpha;
    if (decay) {
      log_alpha = decay->forward(x);
    } else {
      log_alpha = broadcast_to(from_vector(log_gamma_, {log_gamma_.size(), 1}, q.dtype()), {q.size(0), q.size(1), q.size(2)});
    }
    return {mul(q, scale_), k, Tensor(), log_alpha};
  }

 private:
  double scale_;
  std::vector<double> log_gamma_;  // fixed decay: log gamma_h per head
};

}  // namespace

ATTNLAB_REGISTER_KERNEL(DeltaKernel);
ATTNLAB_REGISTER_KERNEL(GatedDeltaKernel);
ATTNLAB_REGISTER_KERNEL(DecayKernel);

}  // namespace attnlab
