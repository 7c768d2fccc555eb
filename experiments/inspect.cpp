#include "experiments/inspect.hpp"

#include <cstdio>
#include <stdexcept>

#include "framework/attention/kernel.hpp"
#include "framework/attention/kernel_check.hpp"

namespace attnlab {

int list_kernels() {
  std::printf("attention kernels (model.attention.name):\n");
  for (const auto& name : KernelRegistry::instance().names()) {
    const KernelInfo& k = KernelRegistry::instance().find(name);
    const KernelCapabilities& c = k.capabilities;
    std::printf("\n  %s\n    %s\n    causal: %s  bidirectional: %s  padding mask: %s  cross-attention: %s  fixed max length: %s\n",
                name.c_str(), k.description.c_str(), c.causal ? "yes" : "no", c.bidirectional ? "yes" : "no",
                c.padding_mask ? "yes" : "no", c.cross_attention ? "yes" : "no", c.fixed_max_length ? "yes" : "no");
    if (k.options.empty()) std::printf("    options: none\n");
    for (const auto& o : k.options)
      std::printf("    %-16s %-22s default %-10s %s\n", o.name.c_str(), o.type.c_str(), o.default_value.c_str(),
                  o.description.c_str());
  }
  return 0;
}

int gradcheck_kernels(const std::string& name) {
  std::vector<std::string> names;
  if (name == "all") {
    names = KernelRegistry::instance().names();
  } else {
    try {
      KernelRegistry::instance().find(name);
    } catch (const std::invalid_argument& e) {
      std::fprintf(stderr, "attnlab gradcheck: %s\n", e.what());
      return 2;
    }
    names.push_back(name);
  }
  std::size_t passed = 0, failed = 0;
  for (const auto& kernel : names) {
    for (const auto& check : check_kernel_gradients(kernel)) {
      std::printf("%s\n", check.describe().c_str());
      ++(check.result.ok ? passed : failed);
    }
  }
  std::printf("%zu passed, %zu failed\n", passed, failed);
  return failed ? 1 : 0;
}

}  // namespace attnlab
