#include <algorithm>
#include <stdexcept>

#include "framework/attention/kernel.hpp"
#include "framework/io/config_node.hpp"

namespace attnlab {
namespace {

std::string join(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

// Names of the kernels that have the capability `has`.
template <class F>
std::string kernels_with(F has) {
  std::vector<std::string> names;
  for (const auto& name : KernelRegistry::instance().names())
    if (has(KernelRegistry::instance().find(name).capabilities)) names.push_back(name);
  return join(names);
}

}  // namespace

template <>
KernelRegistry& KernelRegistry::instance() {
  static KernelRegistry registry("attention kernel");
  return registry;
}

void check_kernel_capabilities(const std::string& name, const KernelSpec& spec) {
  const KernelInfo& info = KernelRegistry::instance().find(name);
  const KernelCapabilities& c = info.capabilities;
  if (spec.cross && spec.causal) {
    throw std::invalid_argument(name + ": a cross-attention spec cannot be causal (its keys come from another sequence, which "
                                       "no query position orders); set causal = false for cross-attention");
  }
  if (spec.cross && !c.cross_attention) {
    throw std::invalid_argument(name + " does not support cross-attention (queries and keys from different sequences); use one of [" +
                                kernels_with([](const KernelCapabilities& k) { return k.cross_attention; }) + "]");
  }
  if (spec.causal && !c.causal) {
    throw std::invalid_argument(name + " does not support causal attention; use one of [" +
                                kernels_with([](const KernelCapabilities& k) { return k.causal; }) + "]");
  }
  if (!spec.causal && !c.bidirectional) {
    throw std::invalid_argument(name + " supports causal attention only; use one of [" +
                                kernels_with([](const KernelCapabilities& k) { return k.bidirectional; }) + "]");
  }
  if (spec.padding_mask && !c.padding_mask) {
    throw std::invalid_argument(name + " does not support key padding masks, and this task pads its sequences; use one of [" +
                                kernels_with([](const KernelCapabilities& k) { return k.padding_mask; }) + "]");
  }
  if (spec.alibi && !c.alibi) {
    throw std::invalid_argument(name + " cannot add ALiBi's distance bias to its scores (model.positional: alibi); use one of [" +
                                kernels_with([](const KernelCapabilities& k) { return k.alibi; }) +
                                "], or another model.positional");
  }
  if (spec.n_heads == 0 || spec.head_dim == 0) throw std::invalid_argument(name + ": n_heads and head_dim must be positive");
}

std::shared_ptr<AttentionKernel> make_kernel(const std::string& name, const KernelSpec& spec, const ComponentOptions& options,
                                             Generator& gen) {
  check_kernel_capabilities(name, spec);
  return KernelRegistry::instance().find(name).build(spec, options, gen);
}

double check_kernel(const std::string& name, const KernelSpec& spec, const ComponentOptions& options, std::size_t batch) {
  check_kernel_capabilities(name, spec);
  return KernelRegistry::instance().find(name).check(spec, options, batch);
}


void check_key_padding_mask(const Tensor& m, std::size_t batch, std::size_t tk) {
  if (m.dtype() != DType::boolean || m.dim() != 2 || m.size(0) != batch || m.size(1) != tk) {
    throw std::invalid_argument("attention: key_padding_mask must be a bool tensor [" + std::to_string(batch) + ", " +
                                std::to_string(tk) + "], got " + shape_str(m.shape()) + " " + dtype_name(m.dtype()));
  }
}

Tensor attention_mask(std::size_t batch, std::size_t tq, std::size_t tk, const AttentionContext& context) {
  const bool padded = context.key_padding_mask.defined();
  if (!context.causal && !padded) return Tensor();
  if (padded) check_key_padding_mask(context.key_padding_mask, batch, tk);
  const std::size_t rows = padded ? batch : 1;
  Tensor mask = zeros({rows, 1, tq, tk}, DType::boolean);
  bool* p = mask.data<bool>();
  const bool* pad = padded ? context.key_padding_mask.data<bool>() : nullptr;
  // Causal: query i is the token at position i + (Tk - Tq) of the key sequence (it sees keys up to there).
  const auto shift = static_cast<std::int64_t>(tk) - static_cast<std::int64_t>(tq);
  for (std::size_t b = 0; b < rows; ++b)
    for (std::size_t i = 0; i < tq; ++i)
      for (std::size_t j = 0; j < tk; ++j)
        p[(b * tq + i) * tk + j] = (context.causal && static_cast<std::int64_t>(j) > static_cast<std::int64_t>(i) + shift) ||
                                   (pad && pad[b * tk + j]);
  return mask;
}

}  // namespace attnlab
