// The attention kernel: the extension point of attnlab. A kernel mixes values by attention weights; the
// multi-head module around it owns the projections and the head split.
//
// A kernel receives q [B, H, Tq, D], k [B, H, Tk, D], v [B, H, Tk, D] and an AttentionContext, and returns
// the mixed values [B, H, Tq, D] and, when asked, the pattern [B, H, Tq, Tk]: the effective token-to-token
// mixing weights (output = pattern x values, all zeros for a query whose keys are all masked). Kernels that
// declare `normalised_pattern` (softmax, linear, ...) have rows summing to one; recurrent kernels (delta
// rule, decay) mix with signed, unnormalised weights.
//
// Gates from the layer input. A kernel that declares `reads_input` also receives the layer's input x
// [B, Tq, C] (after a pre-norm block's norm, as the projections read it) in context.input, and may own
// parameters that read it (spec.d_model is C): the delta rule's write strength beta_t = sigmoid(w x_t),
// a decay alpha_t. The short causal convolution on q, k and v (model.attention.short_conv) and ALiBi's
// score bias (model.positional: alibi) are the multi-head module's, available to every kernel; a kernel
// that declares `alibi` adds context.alibi_slopes' bias inside its own loops.
//
// A kernel states each fact about itself once, as static members of its class, and one line registers it
// (attention/cosine/cosine_kernel.cpp is a whole one; docs/attention.md walks through it):
//
//   class MyKernel : public AttentionKernel {
//    public:
//     static constexpr const char* kName = "my_kernel";
//     static constexpr const char* kDescription = "what it computes; its cost";
//     static KernelCapabilities declared_capabilities() { return {}; }   // what it can do
//     struct Options { double temperature = 1.0; };                        // its options, with defaults
//     static Schema<Options> options_schema();                             // each option described once
//     static StateSize state_size(const KernelSpec& spec, const Options& options);  // kept per sequence
//     MyKernel(const KernelSpec& spec, const Options& options, Generator& gen);
//     AttentionResult forward(...) override;
//   };
//   ATTNLAB_REGISTER_KERNEL(MyKernel);
//
// state_size is what the kernel must keep per layer and sequence to continue a sequence token by token.
// A kernel that keeps that state declares `incremental` and overrides start_decoding and decode (below):
// generation and beam search then cost what the mechanism promises per token (a KV cache for softmax, a
// D x D matrix for linear attention and the delta rules). Any other kernel is recomputed over the sequence
// so far by the default decode, with the same outputs.
// Optional static members: `static void check(const KernelSpec&, const Options&, const ConfigNode&)` for
// checks across options and the model (fail through the node, at the option's position), and
// `static double working_bytes(const KernelSpec&, const Options&, std::size_t batch)`, the memory its
// parameters, buffers and per-step temporaries take beyond the O(T D) of q, k, v (config validation sums
// it up before anything is allocated). Plus one line in framework/CMakeLists.txt; the registry-driven
// test suite then checks the kernel by itself.
//
// Legend: B batch, H heads, Tq query tokens, Tk key tokens, D head dim.
#pragma once

#include <yaml-cpp/yaml.h>

#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "framework/io/component.hpp"
#include "framework/nn/module.hpp"
#include "framework/ops/ops.hpp"
#include "framework/tensor/registry.hpp"

namespace attnlab {

struct AttentionContext {
  AttentionContext(bool causal = false, Tensor key_padding_mask = Tensor(), bool need_pattern = false)
      : causal(causal), key_padding_mask(std::move(key_padding_mask)), need_pattern(need_pattern) {}
  bool causal = false;       // query i sees keys j <= i + (Tk - Tq) only
  Tensor key_padding_mask;   // [B, Tk] bool, true where the key is padding; undefined: no padding
  bool need_pattern = false; // also return the pattern (probes; not the training hot path)
  Tensor input;              // [B, Tq, C] the layer input, for kernels that declare reads_input; else undefined
  std::vector<double> alibi_slopes;  // per head: add -slope |i - j| to the scores (ALiBi); empty: no bias
};

struct AttentionResult {
  Tensor output;   // [B, H, Tq, D]
  Tensor pattern;  // [B, H, Tq, Tk] when asked, else undefined
};

// What a kernel can do; the multi-head module, config validation, the benchmark and the test suite
// branch on these flags, never on kernel names.
struct KernelCapabilities {
  bool causal = true;           // supports causal masking
  bool bidirectional = true;    // supports unmasked (encoder) attention
  bool padding_mask = true;     // honours key padding masks
  bool cross_attention = true;  // Tq != Tk, keys from another sequence
  bool fixed_max_length = false;// sequences must not exceed the kernel's max_len (it sizes parameters by it)
  bool pattern = true;          // can return its pattern
  bool normalised_pattern = true;  // its pattern's rows sum to one (false: signed, unnormalised mixing)
  bool alibi = false;           // adds ALiBi's per-head distance bias to its scores (model.positional: alibi)
  bool reads_input = false;     // computes gates from the layer input (context.input)
  bool incremental = false;     // continues a causal sequence token by token from a state it keeps (start_decoding,
                                // decode); false: decoding recomputes the kernel over the sequence so far
  bool full_softmax = false;    // softmax(q.k x scale) over every key the masks allow, nothing else: the attention of
                                // GPT-2 and nanoGPT, whose weights models with it exchange (gpt_weights.hpp)
};

// What a kernel keeps per layer and per sequence to continue it token by token (Zoology's "state size"):
// fixed + per_token x T numbers, e.g. softmax's keys and values so far (per_token 2 H D), linear
// attention's H D (D + 1), a sliding window's 2 H w D.
struct StateSize {
  double fixed = 0;
  double per_token = 0;
  std::string what;  // in words: "keys and values of every token so far"
  double at(std::size_t tokens) const { return fixed + per_token * static_cast<double>(tokens); }
};

// What the model tells a kernel when building it.
struct KernelSpec {
  std::size_t n_heads = 1;
  std::size_t head_dim = 1;
  std::size_t max_len = 0;    // the model's longest sequence (block size); with `cross`, the longest key
                              // (source) sequence, which kernels that size parameters by it (linformer) need
  bool causal = false;        // how the model will call it
  bool padding_mask = false;  // whether the model will pass key padding masks
  bool cross = false;         // keys come from another sequence (an encoder's output): Tq != Tk, no causal mask
  bool alibi = false;         // the model passes ALiBi slopes (model.positional: alibi)
  std::size_t d_model = 0;    // the layer input's width C, for kernels that read it; 0: n_heads x head_dim
  std::size_t width() const { return d_model ? d_model : n_heads * head_dim; }
};

class AttentionKernel;

// Everything the registry knows of a kernel, built from its class's declarations by kernel_info<K>().
struct KernelInfo {
  std::string name;
  std::string description;
  KernelCapabilities capabilities;
  std::vector<KeyDoc> options;  // from the kernel's option schema: key, default, values, doc
  // Reads and checks the options (positioned errors) without building anything; returns the memory the
  // kernel needs beyond q, k, v for `batch` sequences (its working_bytes, 0 when it declares none).
  std::function<double(const KernelSpec&, const ComponentOptions&, std::size_t batch)> check;
  std::function<std::shared_ptr<AttentionKernel>(const KernelSpec&, const ComponentOptions&, Generator&)> build;
  std::function<StateSize(const KernelSpec&, const ComponentOptions&)> state_size;
};

// What a kernel keeps to continue a batch of causal sequences token by token (generation, beam search),
// made by AttentionKernel::start_decoding and advanced by AttentionKernel::decode. Inference only: it holds
// no graph. Helpers for kernels: attention/decode_state.hpp.
class DecodeState {
 public:
  virtual ~DecodeState() = default;
  // Keeps the sequences `rows` of the batch, in that order; a row may repeat or go (beam search's
  // reordering of its hypotheses).
  virtual void select_rows(const std::vector<std::size_t>& rows) = 0;
  // Tokens appended so far (every sequence of the batch has as many).
  virtual std::size_t tokens() const = 0;
  // The numbers it holds per sequence: what state_size declares, for a kernel that keeps a state.
  virtual double numbers_per_sequence() const = 0;
  // True for the default state, which keeps q, k and v (and the layer input) and recomputes the kernel.
  virtual bool recomputes() const { return false; }
};

class AttentionKernel : public Module {
 public:
  virtual AttentionResult forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionContext& context) = 0;
  // Optional, a shortcut for the training hot path: self-attention on heads still packed as the module's
  // fused projection writes them, qkv [B, T, 3 H D] (q, k, v in turn; head h's D columns at h D of each),
  // returning the heads merged, [B, T, H D]: forward's output on the split heads, without the copies that
  // split and merge them. context.need_pattern is false. An undefined result (the default) means no such
  // path for this call: the module then splits the heads and calls forward.
  virtual Tensor forward_packed(const Tensor& qkv, std::size_t heads, const AttentionContext& context) {
    (void)qkv, (void)heads, (void)context;
    return Tensor();
  }
  // Continuing causal sequences (inference, under no-grad). start_decoding: the state of `batch` empty
  // sequences. decode: appends the next n tokens of every sequence, q, k, v [B, H, n, D], with
  // context.key_padding_mask [B, n] for the new keys (or undefined), context.input [B, n, C] (kernels that
  // read it) and the ALiBi slopes, and returns their outputs [B, H, n, D]: the rows forward gives over the
  // whole sequence, causal. The defaults (attention/decode_state.cpp) keep every q, k, v and input and
  // recompute forward over them; a kernel that declares `incremental` overrides both with its own state.
  virtual std::unique_ptr<DecodeState> start_decoding(std::size_t batch) const;
  virtual Tensor decode(DecodeState& state, const Tensor& q, const Tensor& k, const Tensor& v, const AttentionContext& context);
  // The registered name and capabilities (set by the registry when it builds the kernel).
  const std::string& name() const { return name_; }
  const KernelCapabilities& capabilities() const { return capabilities_; }

 private:
  template <class K>
  friend KernelInfo kernel_info();
  std::string name_;
  KernelCapabilities capabilities_;
};

// name -> KernelInfo ("attention kernel 'x' is not among [...]").
using KernelRegistry = Registry<KernelInfo>;
template <>
KernelRegistry& KernelRegistry::instance();

// Checks the spec against the kernel's capabilities, reads its options and builds it. Errors say what is
// wrong and which kernels would do (std::invalid_argument), or where an option is bad (ConfigError).
std::shared_ptr<AttentionKernel> make_kernel(const std::string& name, const KernelSpec& spec, const ComponentOptions& options,
                                             Generator& gen);
// The same checks without building (config validation); returns the kernel's working_bytes for `batch`.
double check_kernel(const std::string& name, const KernelSpec& spec, const ComponentOptions& options, std::size_t batch = 1);
// Only the capability checks.
void check_kernel_capabilities(const std::string& name, const KernelSpec& spec);

// Shared helpers for kernels: the boolean mask [B or 1, 1, Tq, Tk] combining causality and key padding
// (true = masked), or undefined when nothing is masked.
Tensor attention_mask(std::size_t batch, std::size_t tq, std::size_t tk, const AttentionContext& context);
// Checks a key padding mask's dtype and shape against [batch, tk] (throws naming both).
void check_key_padding_mask(const Tensor& mask, std::size_t batch, std::size_t tk);

namespace kernel_detail {
template <class K, class = void>
struct has_check : std::false_type {};
template <class K>
struct has_check<K, std::void_t<decltype(K::check(std::declval<const KernelSpec&>(), std::declval<const typename K::Options&>(),
                                                  std::declval<const ConfigNode&>()))>> : std::true_type {};
template <class K, class = void>
struct has_working_bytes : std::false_type {};
template <class K>
struct has_working_bytes<K, std::void_t<decltype(K::working_bytes(std::declval<const KernelSpec&>(),
                                                                  std::declval<const typename K::Options&>(), std::size_t{}))>>
    : std::true_type {};

// K's options read from `options` through its schema, and checked.
template <class K>
typename K::Options read_options(const KernelSpec& spec, const ComponentOptions& options) {
  ConfigNode node = options.config_node();
  typename K::Options o;
  K::options_schema().read(node, o);
  if constexpr (has_check<K>::value) K::check(spec, o, node);
  return o;
}
}  // namespace kernel_detail

// The registry's entry for kernel class K, from its static declarations.
template <class K>
KernelInfo kernel_info() {
  KernelInfo info;
  info.name = K::kName;
  info.description = K::kDescription;
  info.capabilities = K::declared_capabilities();
  info.options = K::options_schema().docs();
  info.check = [](const KernelSpec& spec, const ComponentOptions& options, std::size_t batch) {
    const typename K::Options o = kernel_detail::read_options<K>(spec, options);
    if constexpr (kernel_detail::has_working_bytes<K>::value) {
      return K::working_bytes(spec, o, batch);
    } else {
      return 0.0;
    }
  };
  info.state_size = [](const KernelSpec& spec, const ComponentOptions& options) {
    return K::state_size(spec, kernel_detail::read_options<K>(spec, options));
  };
  info.build = [](const KernelSpec& spec, const ComponentOptions& options, Generator& gen) {
    auto kernel = std::make_shared<K>(spec, kernel_detail::read_options<K>(spec, options), gen);
    kernel->name_ = K::kName;
    kernel->capabilities_ = K::declared_capabilities();
    return std::shared_ptr<AttentionKernel>(kernel);
  };
  return info;
}

}  // namespace attnlab

#define ATTNLAB_KERNEL_CONCAT_(a, b) a##b
#define ATTNLAB_KERNEL_CONCAT(a, b) ATTNLAB_KERNEL_CONCAT_(a, b)
// One line at the bottom of a kernel's file registers it under its kName.
#define ATTNLAB_REGISTER_KERNEL(Kernel)                                        \
  static const bool ATTNLAB_KERNEL_CONCAT(attnlab_kernel_registered_, Kernel) = \
      ::attnlab::KernelRegistry::instance().add(::attnlab::kernel_info<Kernel>())
