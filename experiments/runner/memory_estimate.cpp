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
  const EncoderConfig& e = c.model.encoder;
  const double t = static_cast<double>(attention_length(c)), b = static_cast<double>(c.train.batch_size);
  const double width = static_cast<double>(e.d_model), layers = static_cast<double>(e.n_layers);
  const double hidden = e.feed_forward ? static_cast<double>(e.hidden()) : 0.0, heads = static_cast<double>(e.n_heads);
  const double vocab = static_cast<double>(shape.vocab_size), classes = static_cast<double>(shape.num_classes);
  const double pixels = static_cast<double>(shape.channels * shape.height * shape.width);
  const double patch = static_cast<double>(shape.channels * c.model.patch_size * c.model.patch_size);
  // An encoder-decoder's decoder: target length, layers (self-attention, cross-attention, feed-forward).
  const double target = static_cast<double>(shape.target_max_len);
  const double decoder_layers = target > 0 ? static_cast<double>(c.model.decoder_layers ? c.model.decoder_layers : e.n_layers) : 0.0;
  MemoryEstimate m;
  const double parameters = vocab * width + t * width + layers * (4 * width * width + 2 * width * hidden + 9 * width + hidden) +
                            width * classes + (shape.images() ? patch * width : 0.0) +
                            decoder_layers * (8 * width * width + 2 * width * hidden + 13 * width + hidden) +
                            (target > 0 ? classes * width + target * width : 0.0);
  m.parameters = 16 * parameters;
  const double outputs = target > 0 ? target * classes : t * (shape.images() ? 1.0 : classes);
  m.activations = 4 * b * (t * layers * (14 * width + 3 * hidden) + target * decoder_layers * (20 * width + 3 * hidden) + 2 * outputs);
  for (const KernelUse& use : kernel_uses(c.model, shape)) {
    m.kernel += static_cast<double>(use.layers) * check_kernel(use.name, use.spec, ComponentOptions(use.options.node()), c.train.batch_size);
  }
  if (c.log.patterns) {
    m.patterns = 2 * 4 * static_cast<double>(c.log.probes) * heads * (layers * t * t + decoder_layers * (target * target + target * t));
  }
  m.data = shape.images() ? 2 * 4 * b * pixels : 3 * 8 * b * (t + 2 * target);
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
