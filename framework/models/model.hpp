// One interface for every model kind: a forward from a batch to a ModelOutput (the logits, and the
// activations the caller asked to cache), built by one factory from the config's model kind.
//
//   std::shared_ptr<Model> model = make_model(config, data_shape, gen);
//   ModelOutput out = model->forward(batch);                          // training: nothing asked, nothing paid
//   ForwardOptions o;
//   o.hooks.cache = {"blocks.*.attn.hook_pattern"};
//   out = model->forward(batch, o);                                   // out.cache["blocks.0.attn.hook_pattern"]
//
// A model kind is one class deriving from Model plus its registration at the bottom of its file, as
// models/vit.cpp registers ViT. The ModelKindInfo (its fields in their order below) sits in a second pair
// of parentheses, or the commas inside its braces would split the macro's argument:
//   ATTNLAB_REGISTER_MODEL((ModelKindInfo{"my_kind", "what it is", TaskFormat::images, {"patch_size"},
//                                         /*causal=*/false, &MyModel::sequence_length,
//                                         [](const ModelConfig& c, const DataShape& s, Generator& g) {
//                                           return std::shared_ptr<Model>(std::make_shared<MyModel>(c, s, g));
//                                         }}));
// `kernels`, the last field, may be left out (models/seq2seq.cpp gives it; models/text_models.cpp fills
// the fields through a helper for its three kinds).
//
// A model's named activations are those of its blocks (models/encoder.hpp, attention/multi_head.hpp) plus
// "hook_embed", the embedded input [B, T, C] before positions are added.
//
// Legend: B batch, T tokens, C model width, V vocabulary, K classes.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "framework/models/encoder.hpp"
#include "framework/nn/hooks.hpp"
#include "framework/tensor/batch.hpp"
#include "framework/tensor/registry.hpp"

namespace attnlab {

enum class Pooling { mean, cls };
const EnumNames<Pooling>& pooling_names();
Pooling parse_pooling(const std::string& name);  // "mean" | "cls"
const char* pooling_name(Pooling pooling);

// The kernel of one attention part of an encoder-decoder (model.encoder_attention, ...): an empty name
// means model.attention's kernel, empty options its options (or the named kernel's defaults).
struct AttentionChoice {
  std::string name;
  YamlTree options;
};

// The model section of a config: the kind, the stack, and the options some kinds read.
struct ModelConfig {
  std::string kind = "token_tagger";
  EncoderConfig encoder;  // sizes, norm, dropout, activation, attention name and options
  PositionalKind positional = PositionalKind::learned;
  Pooling pooling = Pooling::mean;  // sequence_classifier, vit
  std::size_t patch_size = 4;       // vit
  bool tie_embeddings = false;      // causal_lm, seq2seq: the output layer's weight is the (decoder's) token embedding
  std::string init_from;            // a weights folder (attnlab export) to start from (read by the runner)
  // seq2seq
  std::size_t decoder_layers = 0;   // 0: as many as the encoder (n_layers)
  bool share_embeddings = false;    // one token embedding for source and target (a shared vocabulary)
  AttentionChoice encoder_attention, decoder_attention, cross_attention;
};

// One way a model uses an attention kernel, for config checks and the memory estimate: which key chose
// it ("model.attention", "model.cross_attention"), the kernel, how the model calls it, in how many layers.
struct KernelUse {
  std::string key;
  std::string name;
  YamlTree options;
  KernelSpec spec;
  std::size_t layers = 0;
};

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

// A model kind, as the registry knows it.
struct ModelKindInfo {
  std::string name;
  std::string description;
  TaskFormat format;              // the layout of examples it reads
  std::vector<std::string> keys;  // the model.* keys it reads beyond those every kind reads (kind, the stack's sizes,
                                  // norm, activation, dropout, bias, attention, init_from)
  bool causal = false;            // whether its attention is causal
  // The length of the sequences its attention sees for data of `shape`, after checking the kind's own
  // options against it (OptionError naming the model.* key).
  std::function<std::size_t(const ModelConfig&, const DataShape&)> sequence_length;
  std::function<std::shared_ptr<Model>(const ModelConfig&, const DataShape&, Generator&)> make;
  // Its kernels as the config chose them; unset: model.attention in every layer, causal as `causal`,
  // over sequence_length tokens.
  std::function<std::vector<KernelUse>(const ModelConfig&, const DataShape&)> kernels;
};

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
void gpt_init(Module& model, std::size_t n_layers, Generator& gen);

}  // namespace attnlab

#define ATTNLAB_MODEL_CONCAT_(a, b) a##b
#define ATTNLAB_MODEL_CONCAT(a, b) ATTNLAB_MODEL_CONCAT_(a, b)
// One line at the bottom of a model kind's file registers it.
#define ATTNLAB_REGISTER_MODEL(info) \
  static const bool ATTNLAB_MODEL_CONCAT(attnlab_model_registered_, __LINE__) = ::attnlab::ModelRegistry::instance().add(info)
