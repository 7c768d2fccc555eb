#include "experiments/runner/memory_estimate.hpp"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <optional>
#include <vector>

#include "framework/attention/kernel.hpp"

namespace attnlab {
namespace {

std::string gib(double bytes) {
  char text[64];
  std::snprintf(text, sizeof text, bytes >= 1e12 * 1024 ? "%.2g GiB" : "%.1f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
  return text;
}

// `c` with the dotted `key` back at its default: its resolved config without that key, read again; or
// nullopt when the config is not valid without it (another check reports that).
std::optional<ExperimentConfig> with_default(const ExperimentConfig& c, const std::string& key) {
  YAML::Node root = YAML::Load(config_to_yaml(c)), node = root;
  std::size_t start = 0;
  for (std::size_t dot = key.find('.'); dot != std::string::npos; start = dot + 1, dot = key.find('.', start)) {
    node.reset(node[key.substr(start, dot - start)]);  // reset: move to the child, not assign into it
    if (!node.IsMap()) return std::nullopt;
  }
  node.remove(key.substr(start));
  try {
    YAML::Emitter out;
    out << root;
    return parse_config_unsized(out.c_str(), "(with " + key + " at its default)");
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// The estimate, or infinity when the config is not valid (another check reports it).
double total_or_infinity(const std::optional<ExperimentConfig>& c) {
  if (!c) return INFINITY;
  try {
    return estimate_memory(*c).total();
  } catch (const std::exception&) {
    return INFINITY;
  }
}

}  // namespace

MemoryEstimate estimate_memory(const ExperimentConfig& c) {
  const DataShape shape = data_shape(c);
  const double b = static_cast<double>(c.train.batch_size), heads = static_cast<double>(c.model.encoder.n_heads);
  // The model kind says what it holds and what a step keeps per sequence (framework/models/model.hpp).
  const ModelSize size = ModelRegistry::instance().find(c.model.kind.name).size(c.model, shape);
  MemoryEstimate m;
  m.parameters = 16 * size.parameters;  // float32 weights, gradients and two optimizer moments
  m.activations = 4 * b * size.activations;
  double patterns = 0;  // every layer's [heads, T, T] patterns of each probe, float64 .npy and float32 on the way
  for (const KernelUse& use : kernel_uses(c.model, shape)) {
    m.kernel += static_cast<double>(use.layers) * check_kernel(use.name, use.spec, ComponentOptions(use.options.node()), c.train.batch_size);
    patterns += static_cast<double>(use.layers) * static_cast<double>(use.spec.max_len) * static_cast<double>(use.spec.max_len);
  }
  if (c.log.patterns) m.patterns = 2 * 4 * static_cast<double>(c.log.probes) * heads * patterns;
  const double t = static_cast<double>(shape.max_len), target = static_cast<double>(shape.target_max_len);
  m.data = shape.images() ? 2 * 4 * b * static_cast<double>(shape.channels * shape.height * shape.width) : 3 * 8 * b * (t + 2 * target);
  return m;
}

double state_size(const ExperimentConfig& c) {
  double total = 0;
  for (const KernelUse& use : kernel_uses(c.model, data_shape(c))) {
    const KernelInfo& kernel = KernelRegistry::instance().find(use.name);
    total += static_cast<double>(use.layers) * kernel.state_size(use.spec, ComponentOptions(use.options.node())).at(use.spec.max_len);
    // The short convolution's window over the projected q, k, v (self-attention only).
    if (!use.spec.cross && c.model.encoder.short_conv > 1) {
      total += static_cast<double>(use.layers) * static_cast<double>((c.model.encoder.short_conv - 1) * 3 * c.model.encoder.d_model);
    }
  }
  return total;
}

double physical_memory_bytes() {
  return static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGE_SIZE));
}

std::pair<std::string, std::string> memory_problem(const ExperimentConfig& c, double limit) {
  const MemoryEstimate m = estimate_memory(c);
  if (m.total() <= limit) return {"", ""};
  // The key set away from its default whose default shrinks the estimate most (every key is tried: each
  // component's, the stack's, the task's), named with its value.
  std::string key = "train.batch_size", value;
  double lowest = m.total();
  for (const KeyDifference& d : config_differences(c, ExperimentConfig{}, true)) {
    const double total = total_or_infinity(with_default(c, d.key));
    if (total < lowest) lowest = total, key = d.key, value = " (" + d.first + ")";
  }
  return {key, key + value + " makes this experiment need about " + gib(m.total()) + " (parameters with gradients and optimizer state " +
                   gib(m.parameters) + ", a step's activations " + gib(m.activations) + ", attention kernel " + gib(m.kernel) +
                   ", probe patterns " + gib(m.patterns) + ", data " + gib(m.data) + "), more than this machine's " + gib(limit) +
                   " of memory; lower it"};
}

}  // namespace attnlab
