// The attention kernel: the extension point of attnlab. A kernel mixes values by attention weights; the
// multi-head module around it owns the projections and the head split.
//
// A kernel receives q [B, H, Tq, D], k [B, H, Tk, D], v [B, H, Tk, D] and an AttentionContext, and returns
// the mixed values [B, H, Tq, D] and, when asked, the pattern [B, H, Tq, Tk]: the effective token-to-token
// mixing weights, each row summing to one (all zeros for a query whose keys are all masked).
//
// Adding a kernel is one file: a class deriving from AttentionKernel, and at the bottom a registration
//   ATTNLAB_REGISTER_KERNEL(my_kernel, (KernelInfo{"my_kernel", "what it does", capabilities, options, factory}));
// plus one line in framework/CMakeLists.txt. The registry-driven test suite then checks it by itself.
//
// Legend: B batch, H heads, Tq query tokens, Tk key tokens, D head dim.
#pragma once

#include <yaml-cpp/yaml.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "framework/nn/module.hpp"
#include "framework/ops/ops.hpp"

namespace attnlab {

struct AttentionContext {
  bool causal = false;       // query i sees keys j <= i + (Tk - Tq) only
  Tensor key_padding_mask;   // [B, Tk] bool, true where the key is padding; undefined: no padding
  bool need_pattern = false; // also return the pattern (probes; not the training hot path)
};

struct AttentionResult {
  Tensor output;   // [B, H, Tq, D]
  Tensor pattern;  // [B, H, Tq, Tk] when asked, else undefined
};

// What a kernel can do; the multi-head module and config validation branch on these flags.
struct KernelCapabilities {
  bool causal = true;           // supports causal masking
  bool bidirectional = true;    // supports unmasked (encoder) attention
  bool padding_mask = true;     // honours key padding masks
  bool cross_attention = true;  // Tq != Tk, keys from another sequence
  bool fixed_max_length = false;// sequences must not exceed the kernel's max_len
  bool pattern = true;          // can return its pattern
};

// What the model tells a kernel when building it.
struct KernelSpec {
  std::size_t n_heads = 1;
  std::size_t head_dim = 1;
  std::size_t max_len = 0;  // the model's longest sequence (block size)
  bool causal = false;      // how the model will call it
};

// An option of a kernel, documented for `attnlab list` and docs.
struct KernelOption {
  std::string name, type, default_value, description;
};

class AttentionKernel;
// Builds a kernel from its spec and its own options node (validated: unknown keys and bad values throw
// ConfigError with file:line:column). `file` names the config file for messages.
using KernelFactory = std::function<std::shared_ptr<AttentionKernel>(const KernelSpec& spec, const YAML::Node& options,
                                                                     const std::string& file, Generator& gen)>;

struct KernelInfo {
  std::string name;
  std::string description;
  KernelCapabilities capabilities;
  std::vector<KernelOption> options;
  KernelFactory factory;
};

class AttentionKernel : public Module {
 public:
  virtual AttentionResult forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionContext& context) = 0;
  virtual std::string name() const = 0;
  virtual KernelCapabilities capabilities() const = 0;
};

// name -> KernelInfo. A function-local static: no static-initialisation-order trouble.
class KernelRegistry {
 public:
  static KernelRegistry& instance();
  // Adds a kernel; a duplicate name is an error (thrown at start-up).
  bool add(KernelInfo info);
  // The kernel called `name`, or an error "'X' is not among [a, b, c]".
  const KernelInfo& find(const std::string& name) const;
  bool contains(const std::string& name) const;
  std::vector<std::string> names() const;  // sorted

 private:
  std::vector<KernelInfo> kernels_;
};

// Checks the spec (and whether a padding mask will be used) against the kernel's capabilities and
// builds it. Errors say what is wrong and which kernels would do.
std::shared_ptr<AttentionKernel> make_kernel(const std::string& name, const KernelSpec& spec, const YAML::Node& options,
                                             Generator& gen, bool uses_padding_mask = false,
                                             const std::string& file = "");
// The same checks without building (config validation).
void check_kernel_capabilities(const std::string& name, const KernelSpec& spec, bool uses_padding_mask);

// Shared helpers for kernels: the boolean mask [B or 1, 1, Tq, Tk] combining causality and key padding
// (true = masked), or undefined when nothing is masked.
Tensor attention_mask(std::size_t batch, std::size_t tq, std::size_t tk, const AttentionContext& context);

}  // namespace attnlab

#define ATTNLAB_KERNEL_CONCAT_(a, b) a##b
#define ATTNLAB_KERNEL_CONCAT(a, b) ATTNLAB_KERNEL_CONCAT_(a, b)
// One line at the bottom of a kernel's file registers it.
#define ATTNLAB_REGISTER_KERNEL(id, info) \
  static const bool ATTNLAB_KERNEL_CONCAT(attnlab_kernel_registered_, id) = ::attnlab::KernelRegistry::instance().add info
