// One interface for every model kind: a forward from a batch to a ModelOutput (the logits, and the
// activations the caller asked to cache), built by one factory from the config's model kind.
//
//   std::shared_ptr<Model> model = make_model(config, data_shape, gen);
//   ModelOutput out = model->forward(batch);                          // training: nothing asked, nothing paid
//   ForwardOptions o;
//   o.hooks.cache = {"blocks.*.attn.hook_pattern"};
//   out = model->forward(batch, o);                                   // out.cache["blocks.0.attn.hook_pattern"]
//
// A model kind is one class deriving from Model that states its name, description, the examples it
// reads and its own options once, and one line registers it (docs/extending.md):
//
//   class MyModel : public Model {
//    public:
//     static constexpr const char* kName = "my_model";
//     static constexpr const char* kDescription = "what it is";
//     static constexpr TaskFormat kFormat = TaskFormat::tagging;  // the layout of examples it learns from
//     static constexpr bool kCausal = false;                       // optional: whether its attention is causal
//     struct Options { PositionalKind positional = PositionalKind::learned; };  // its model.* keys
//     static Schema<Options> options_schema();
//     // The stack as it builds it for data of `shape` (causal, max_len, padding, ALiBi); OptionError
//     // naming its key when its options do not fit the data.
//     static EncoderConfig stack(const Options&, const EncoderConfig& common, const DataShape& shape);
//     // What it holds beyond its blocks and what a step keeps per sequence, for the memory estimate.
//     static ModelSize size(const Options&, const EncoderConfig& stack, const DataShape& shape);
//     MyModel(const ModelConfig& config, const DataShape& shape, Generator& gen);  // options: read_options<MyModel>(config.kind.options)
//     ...
//   };
//   ATTNLAB_REGISTER_MODEL(MyModel);
//
// Optional: `static void check(const Options&, const ConfigNode&)`, and `static std::vector<KernelUse>
// kernels(const Options&, const EncoderConfig& common, const DataShape&)` for a model whose attention
// parts choose their own kernels (seq2seq). Its named activations are those of its blocks
// (models/encoder.hpp, attention/multi_head.hpp) plus "hook_embed", the embedded input [B, T, C] before
// positions are added.
//
// Legend: B batch, T tokens, C model width, V vocabulary, K classes.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "framework/io/component.hpp"
#include "framework/models/encoder.hpp"
#include "framework/nn/hooks.hpp"
#include "framework/tensor/batch.hpp"
#include "framework/tensor/registry.hpp"

namespace attnlab {

enum class Pooling { mean, cls };
const EnumNames<Pooling>& pooling_names();
Pooling parse_pooling(const std::string& name);  // "mean" | "cls"
const char* pooling_name(Pooling pooling);

// The model section of a config: the kind with its own keys, the stack every kind builds, and its
// starting weights.
struct ModelConfig {
  ModelConfig() { kind.name = "token_tagger"; }
  ComponentChoice kind;   // model.kind, and the kind's own keys beside it (positional, pooling, ...)
  EncoderConfig encoder;  // sizes, norm, dropout, activation, attention name and options
  std::string init_from;  // a weights folder (attnlab export) to start from (read by the runner)
};

// What a model holds beyond its blocks (embeddings, heads, a decoder) and what a training step keeps
// per sequence beyond them, in numbers, for the memory estimate (experiments/runner/memory_estimate.cpp).
struct ModelSize {
  double parameters = 0;
  double activations = 0;
};
// The blocks' own: parameters of `layers` blocks of `e`, and what a step keeps per token of them.
ModelSize blocks_size(const EncoderConfig& e, std::size_t layers, double tokens);

// One way a model uses an attention kernel, for config checks and the memory estimate: which key chose
// it ("model.attention", "model.cross_attention"), the kernel, how the model calls it, in how many layers.
struct KernelUse {
  std::string part;  // "" for a single stack; an encoder-decoder's "encoder", "decoder" or "cross"
  std::string key;
  std::string name;
  YamlTree options;
  KernelSpec spec;
  std::size_t layers = 0;
};

// How generation and decoding get each new token's logits: `cached`, continuing every sequence from the
// state its layers keep (each kernel's DecodeState, attention/kernel.hpp), or `recomputed`, a forward over
// the whole window each time (what generation did before the cache; kept to compare against).
enum class Decoding { cached, recomputed };
// Generation and decoding refuse next-token scores that hold a NaN or an infinity (the outputs of weights
// that diverged), rather than picking token 0 from them: a runtime_error naming `who`.
void check_finite_scores(const std::vector<double>& scores, const std::string& who);

struct ForwardOptions {
  HookRequest hooks;  // named activations to cache or replace (nn/hooks.hpp); empty: none
};

struct ModelOutput {
  Tensor logits;                         // [B, T, V] or [B, T, K] per token, [B, K] per sequence
  std::map<std::string, Tensor> cache;   // the activations asked for, by name
};

class Model : public Module {
 public:
  // The forward pass. Throws when a hook name asked for matches none of the model's points.
  ModelOutput forward(const Batch& batch, const ForwardOptions& options = {});
  // The attention blocks (for patterns and analysis).
  virtual std::size_t n_layers() const = 0;
  virtual bool feed_forward() const = 0;  // the blocks have a feed-forward (model.feed_forward)
  virtual std::size_t n_heads() const = 0;
  // The tokens the model reads for a batch (throughput): its token ids, or a ViT's patches (and CLS).
  virtual std::size_t tokens_read(const Batch& batch) const { return batch.input.numel(); }
  // Its attention patterns as parts (one for single-stack models; encoder, decoder and cross for an
  // encoder-decoder), each naming its layers' pattern hook points and which sequences its queries and
  // keys come from.
  struct AttentionPart {
    std::string name;                        // "" for the single stack; else "encoder", "decoder", "cross"
    std::vector<std::string> pattern_hooks;  // one per layer: "blocks.0.attn.hook_pattern", ...
    bool target_queries = false;             // queries are decoder positions
    bool target_keys = false;                // keys are decoder positions
    bool feed_forward = true;                // its blocks have a feed-forward (model.feed_forward)
  };
  virtual std::vector<AttentionPart> attention_parts() const;
  // How position `i` of what the attention sees reads on a heatmap's axis when the model, not the data,
  // puts it there (a ViT's patches and "cls"); "" to use the data's token labels.
  virtual std::string position_label(std::size_t /*i*/) const { return ""; }
  // Positions the model puts before its input's tokens in the stream its (single stack's) attention sees:
  // a text classifier's CLS token (1), whose label position_label gives. Patterns, detectors and probes
  // pair stream position i + this with token i. (A ViT reads no tokens: position_label labels it whole.)
  virtual std::size_t positions_before_tokens() const { return 0; }
  // Whether its logits at position i predict token i + 1 of its input (a causal language model), as the
  // repeated-random-tokens test needs.
  virtual bool predicts_next_token() const { return false; }
  // How it cuts the images it reads into patches (a ViT), for analyses that map attention back onto an
  // image; nothing for a model of token sequences.
  struct Patches {
    std::size_t size = 0;      // a patch's side in pixels
    bool class_token = false;  // a CLS token precedes the patches in the stream
  };
  virtual std::optional<Patches> patches() const { return std::nullopt; }

  // The readout, for logit attribution and the logit lens. The residual stream the logits are read from
  // is that of the blocks named `readout_blocks()` ("blocks." or an encoder-decoder's "decoder.blocks.");
  // `readout` maps such a stream [B, T, C] to logits as the forward does after its last block: through
  // the final norm when `normalize` (pre-norm models have one; post-norm models have none and ignore
  // it), then the pooling (one label per sequence: the CLS token, or the mean over the batch's real
  // tokens), then the output layer, with its bias when `bias`. Without norm and bias the map is linear.
  virtual std::string readout_blocks() const { return "blocks."; }
  virtual const LayerNorm* final_norm() const = 0;
  Tensor readout(const Tensor& stream, const Batch& batch, bool normalize, bool bias) const;

 protected:
  // The logits for `batch`, passing activations through `hooks`.
  virtual Tensor run(const Batch& batch, const HookScope& hooks) = 0;
  // The readout's parts: the output layer, and the pooling of one-label-per-sequence models (the
  // stream itself for per-token logits).
  virtual const Linear& output_layer() const = 0;
  virtual Tensor pool(const Tensor& stream, const Batch& /*batch*/) const { return stream; }
};

// A model kind, as the registry knows it, built from its class's declarations by model_kind_info<M>().
struct ModelKindInfo {
  std::string name;
  std::string description;
  TaskFormat format;    // the layout of examples it reads
  bool causal = false;  // whether its attention is causal
  OptionsSpec options;  // its model.* keys beyond those every kind reads
  // The stack it builds for data of `shape`, after checking its options against it (OptionError naming
  // the model.* key); its max_len is the longest sequence its attention sees.
  std::function<EncoderConfig(const ModelConfig&, const DataShape&)> stack;
  std::function<ModelSize(const ModelConfig&, const DataShape&)> size;
  std::function<std::shared_ptr<Model>(const ModelConfig&, const DataShape&, Generator&)> make;
  // Its kernels as the config chose them; unset: the stack's kernel in every layer.
  std::function<std::vector<KernelUse>(const ModelConfig&, const DataShape&)> kernels;
};

namespace model_detail {
template <class M, class = void>
struct causal : std::false_type {};
template <class M>
struct causal<M, std::void_t<decltype(M::kCausal)>> : std::bool_constant<M::kCausal> {};
template <class M, class = void>
struct has_kernels : std::false_type {};
template <class M>
struct has_kernels<M, std::void_t<decltype(M::kernels(std::declval<const typename M::Options&>(), std::declval<const EncoderConfig&>(),
                                                      std::declval<const DataShape&>()))>> : std::true_type {};
}  // namespace model_detail

template <class M>
ModelKindInfo model_kind_info() {
  ModelKindInfo info;
  info.name = M::kName;
  info.description = M::kDescription;
  info.format = M::kFormat;
  info.options = options_spec<M>();
  info.stack = [](const ModelConfig& c, const DataShape& s) { return M::stack(read_options<M>(c.kind.options, false), c.encoder, s); };
  info.causal = model_detail::causal<M>::value;
  info.size = [](const ModelConfig& c, const DataShape& s) {
    const typename M::Options o = read_options<M>(c.kind.options, false);
    return M::size(o, M::stack(o, c.encoder, s), s);
  };
  info.make = [](const ModelConfig& c, const DataShape& s, Generator& g) { return std::shared_ptr<Model>(std::make_shared<M>(c, s, g)); };
  if constexpr (model_detail::has_kernels<M>::value) {
    info.kernels = [](const ModelConfig& c, const DataShape& s) { return M::kernels(read_options<M>(c.kind.options, false), c.encoder, s); };
  }
  return info;
}

// name -> ModelKindInfo ("model kind 'x' is not among [...]").
using ModelRegistry = Registry<ModelKindInfo>;
template <>
ModelRegistry& ModelRegistry::instance();

// The model `config.kind` names, for data of `shape`.
std::shared_ptr<Model> make_model(const ModelConfig& config, const DataShape& shape, Generator& gen);
// The kernels the model of `config` uses for data of `shape` (its kind's `kernels`, or the default).
std::vector<KernelUse> kernel_uses(const ModelConfig& config, const DataShape& shape);

// Re-initialises a model as GPT-2 / nanoGPT (and BERT) do; every text model here starts this way: weights
// N(0, 0.02), projections into the residual stream (attention output, second feed-forward layer)
// N(0, 0.02 / sqrt(2 n_layers)), biases 0, embeddings N(0, 0.02), norms 1 and 0. Attention kernels' own
// parameters keep their kernel's initialisation.
void gpt_init(Module& model, std::size_t n_layers, Generator& gen, InitScheme scheme = InitScheme::gpt2);

}  // namespace attnlab

#define ATTNLAB_MODEL_CONCAT_(a, b) a##b
#define ATTNLAB_MODEL_CONCAT(a, b) ATTNLAB_MODEL_CONCAT_(a, b)
// One line at the bottom of a model kind's file registers it under its kName.
#define ATTNLAB_REGISTER_MODEL(Model) \
  static const bool ATTNLAB_MODEL_CONCAT(attnlab_model_registered_, Model) = \
      ::attnlab::ModelRegistry::instance().add(::attnlab::model_kind_info<Model>())
