// The basic layers: Linear, Embedding, LayerNorm, Dropout, FeedForward. Initialisation follows PyTorch's
// defaults (models that follow GPT-2 re-initialise, see framework/models), drawn under the no-grad guard
// from the generator passed in.
//
// Legend: B batch, T tokens, C channels (in_features / d_model), V vocabulary.
#pragma once

#include <memory>
#include <string>

#include "framework/nn/module.hpp"
#include "framework/ops/ops.hpp"

namespace attnlab {

// y = x W^T + b with W [out, in] (PyTorch's layout: checkpoints and parameter counts match).
// Init: W, b ~ U(-1/sqrt(in), 1/sqrt(in)).
class Linear : public Module {
 public:
  Linear(std::size_t in_features, std::size_t out_features, bool bias, Generator& gen);
  // Over an existing weight [out, in], registered as this layer's own: tied weights, as GPT-2's output
  // layer reading the token embedding. A module holding both lists the tensor once, under its first name.
  Linear(const Tensor& shared_weight, bool bias, Generator& gen);
  // [..., in] -> [..., out]; with_bias false leaves b out, for a next op that adds it itself (gelu_linear).
  Tensor forward(const Tensor& x, bool with_bias = true) const;
  std::size_t in_features() const { return weight.size(1); }
  std::size_t out_features() const { return weight.size(0); }

  Tensor weight;  // [out, in]
  Tensor bias;    // [out], undefined without bias
};

// Rows of weight [V, C] looked up by int64 ids. Init: N(0, 1).
class Embedding : public Module {
 public:
  Embedding(std::size_t num_embeddings, std::size_t dim, Generator& gen);
  Tensor forward(const Tensor& ids) const;  // ids [...] -> [..., C]

  Tensor weight;  // [V, C]
};

// Normalises over the last axis; gain 1 and shift 0 at init. affine false: neither gain nor shift;
// bias false: a gain without a shift (nanoGPT's bias=False).
class LayerNorm : public Module {
 public:
  explicit LayerNorm(std::size_t dim, double eps = 1e-5, bool affine = true, bool bias = true);
  Tensor forward(const Tensor& x) const;
  // next.forward(forward(x), with_bias) as one op (ops.hpp: layer_norm_linear).
  Tensor forward_into(const Tensor& x, const Linear& next, bool with_bias = true) const;

  Tensor weight, bias;  // [C] each; weight undefined without affine, bias without affine or bias
  double eps;
};

// Inverted dropout, active only in training mode, with its own generator split from the one given.
class Dropout : public Module {
 public:
  Dropout(double p, Generator& gen);
  Tensor forward(const Tensor& x);
  double p() const { return p_; }

 private:
  double p_;
  Generator gen_;
};

enum class Activation { gelu, relu };
const EnumNames<Activation>& activation_names();
Activation parse_activation(const std::string& name);  // "gelu" | "relu", else an error listing both
const char* activation_name(Activation activation);
Tensor activate(const Tensor& x, Activation activation);

// Linear -> activation -> Linear -> dropout, the transformer's position-wise MLP; `bias` gives both
// Linear layers their biases. With an `input_norm` (a pre-norm block's LayerNorm, which the block owns
// and registers), forward normalises x first, fused into fc1 (layer_norm_linear).
class FeedForward : public Module {
 public:
  FeedForward(std::size_t dim, std::size_t hidden, Activation activation, double dropout, Generator& gen, bool bias = true,
              std::shared_ptr<LayerNorm> input_norm = nullptr);
  Tensor forward(const Tensor& x);  // [..., C] -> [..., C]

  std::shared_ptr<Linear> fc1, fc2;
  std::shared_ptr<Dropout> drop;
  Activation activation;

 private:
  std::shared_ptr<LayerNorm> input_norm_;
};

}  // namespace attnlab
