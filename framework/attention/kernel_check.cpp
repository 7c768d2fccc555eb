#include "framework/attention/kernel_check.hpp"

#include "framework/attention/kernel.hpp"

namespace attnlab {

std::string KernelCheck::describe() const {
  std::string line = kernel + (causal ? " causal" : " bidirectional") + (padded ? " padded" : "") + ": " +
                     (result.ok ? "ok" : "FAILED");
  if (!result.ok) line += "\n" + result.report();
  return line;
}

std::vector<KernelCheck> check_kernel_gradients(const std::string& name, std::uint64_t seed) {
  constexpr std::size_t kB = 2, kH = 2, kT = 6, kD = 4;
  const KernelCapabilities caps = KernelRegistry::instance().find(name).capabilities;
  std::vector<KernelCheck> checks;
  for (bool causal : {false, true}) {
    if ((causal && !caps.causal) || (!causal && !caps.bidirectional)) continue;
    for (bool padded : {false, true}) {
      if (padded && !caps.padding_mask) continue;
      Generator gen(seed);
      auto kernel = make_kernel(name, KernelSpec{kH, kD, kT, causal}, YAML::Node(), gen);
      kernel->to(DType::float64);
      kernel->eval();  // no dropout: the function must be deterministic
      std::vector<bool> pad(kB * kT, false);
      pad[2] = pad[2 * kT - 1] = true;
      const Tensor padding = padded ? from_mask(pad, {kB, kT}) : Tensor();
      std::vector<Tensor> inputs;
      for (double scale : {0.5, 0.5, 1.0})
        inputs.push_back(randn({kB, kH, kT, kD}, gen, DType::float64, 0.0, scale).set_requires_grad(true));
      for (const auto& p : kernel->parameters()) inputs.push_back(p);
      KernelCheck check;
      check.kernel = name;
      check.causal = causal;
      check.padded = padded;
      check.result = gradcheck(
          [&](const std::vector<Tensor>& in) {
            return kernel->forward(in[0], in[1], in[2], AttentionContext{causal, padding, false}).output;
          },
          inputs);
      checks.push_back(std::move(check));
    }
  }
  return checks;
}

}  // namespace attnlab
