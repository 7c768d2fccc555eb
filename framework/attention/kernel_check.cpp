#include "framework/attention/kernel_check.hpp"

#include "framework/attention/kernel.hpp"
#include "framework/nn/positional.hpp"

namespace attnlab {
namespace {

constexpr std::size_t kB = 2, kH = 2, kT = 6, kD = 4;
constexpr std::size_t kCrossQueries = 4;  // cross mode: 4 queries against kT keys

// One mode's check: a kernel built for it, q [B, H, tq, D] and k, v [B, H, kT, D] from `seed`, keys 2 of
// batch 0 and kT - 1 of batch 1 padded when `padded`, ALiBi's slopes when `alibi`, and the layer input
// [B, tq, H D] (checked too) for kernels that read it.
KernelCheck check_mode(const std::string& name, bool causal, bool padded, bool cross, bool alibi, std::uint64_t seed) {
  const std::size_t tq = cross ? kCrossQueries : kT;
  Generator gen(seed);
  KernelSpec spec{kH, kD, kT, causal, padded, cross};
  spec.alibi = alibi;
  auto kernel = make_kernel(name, spec, YAML::Node(), gen);
  kernel->to(DType::float64);
  kernel->eval();  // no dropout: the function must be deterministic
  std::vector<bool> pad(kB * kT, false);
  pad[2] = pad[2 * kT - 1] = true;
  const Tensor padding = padded ? from_mask(pad, {kB, kT}) : Tensor();
  std::vector<Tensor> inputs;
  inputs.push_back(randn({kB, kH, tq, kD}, gen, DType::float64, 0.0, 0.5).set_requires_grad(true));
  for (double scale : {0.5, 1.0}) inputs.push_back(randn({kB, kH, kT, kD}, gen, DType::float64, 0.0, scale).set_requires_grad(true));
  const bool reads_input = kernel->capabilities().reads_input;
  if (reads_input) inputs.push_back(randn({kB, tq, kH * kD}, gen, DType::float64).set_requires_grad(true));
  for (const auto& p : kernel->parameters()) inputs.push_back(p);
  KernelCheck check;
  check.kernel = name;
  check.causal = causal;
  check.padded = padded;
  check.cross = cross;
  check.alibi = alibi;
  check.result = gradcheck(
      [&](const std::vector<Tensor>& in) {
        AttentionContext context{causal, padding, false};
        if (reads_input) context.input = in[3];
        if (alibi) context.alibi_slopes = alibi_slopes(kH);
        return kernel->forward(in[0], in[1], in[2], context).output;
      },
      inputs);
  return check;
}

}  // namespace

std::string KernelCheck::describe() const {
  std::string line = kernel + (cross ? " cross" : causal ? " causal" : " bidirectional") + (padded ? " padded" : "") +
                     (alibi ? " alibi" : "") + ": " +
                     (result.ok ? "ok" : "FAILED");
  if (!result.ok) line += "\n" + result.report();
  return line;
}

std::vector<KernelCheck> check_kernel_gradients(const std::string& name, std::uint64_t seed) {
  const KernelCapabilities caps = KernelRegistry::instance().find(name).capabilities;
  std::vector<KernelCheck> checks;
  for (bool cross : {false, true}) {
    if (cross && (!caps.cross_attention || !caps.bidirectional)) continue;
    for (bool causal : {false, true}) {
      if ((causal && (cross || !caps.causal)) || (!causal && !caps.bidirectional)) continue;
      for (bool padded : {false, true}) {
        if (padded && !caps.padding_mask) continue;
        for (bool alibi : {false, true}) {
          if (alibi && (cross || !caps.alibi)) continue;
          checks.push_back(check_mode(name, causal, padded, cross, alibi, seed));
        }
      }
    }
  }
  return checks;
}

}  // namespace attnlab
