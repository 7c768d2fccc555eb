#include "framework/nn/layers.hpp"

#include <cmath>
#include <stdexcept>

namespace attnlab {

Linear::Linear(std::size_t in_features, std::size_t out_features, bool with_bias, Generator& gen) {
  if (in_features == 0 || out_features == 0) {
    throw std::invalid_argument("Linear: in_features and out_features must be positive, got " +
                                std::to_string(in_features) + " and " + std::to_string(out_features));
  }
  NoGradGuard no_grad;
  const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
  weight = register_parameter("weight", uniform({out_features, in_features}, gen, -bound, bound), ParamKind::weight);
  if (with_bias) bias = register_parameter("bias", uniform({out_features}, gen, -bound, bound), ParamKind::bias);
}

Linear::Linear(const Tensor& shared_weight, bool with_bias, Generator& gen) {
  if (!shared_weight.defined() || shared_weight.dim() != 2 || shared_weight.numel() == 0) {
    throw std::invalid_argument("Linear: a shared weight must be a non-empty [out, in] tensor, got " +
                                (shared_weight.defined() ? shape_str(shared_weight.shape()) : std::string("undefined")));
  }
  NoGradGuard no_grad;
  weight = register_parameter("weight", shared_weight, ParamKind::weight);
  const double bound = 1.0 / std::sqrt(static_cast<double>(in_features()));
  if (with_bias) {
    bias = register_parameter("bias", uniform({out_features()}, gen, -bound, bound, shared_weight.dtype()), ParamKind::bias);
  }
}

Tensor Linear::forward(const Tensor& x, bool with_bias) const {
  if (x.dim() == 0 || x.size(-1) != in_features()) {
    throw std::invalid_argument("Linear: expected input [..., " + std::to_string(in_features()) + "], got " +
                                shape_str(x.shape()));
  }
  const Tensor b = with_bias ? bias : Tensor();
  return x.dim() == 1 ? reshape(linear(unsqueeze(x, 0), weight, b), {-1}) : linear(x, weight, b);  // [..., out]
}

Embedding::Embedding(std::size_t num_embeddings, std::size_t dim, Generator& gen) {
  NoGradGuard no_grad;
  weight = register_parameter("weight", randn({num_embeddings, dim}, gen), ParamKind::embedding);
}

Tensor Embedding::forward(const Tensor& ids) const { return embedding(weight, ids); }

LayerNorm::LayerNorm(std::size_t dim, double eps_, bool affine, bool with_bias) : eps(eps_) {
  if (!(eps_ > 0)) throw std::invalid_argument("LayerNorm: eps must be > 0");
  if (affine) {
    weight = register_parameter("weight", ones({dim}), ParamKind::norm);
    if (with_bias) bias = register_parameter("bias", zeros({dim}), ParamKind::norm);
  }
}

Tensor LayerNorm::forward(const Tensor& x) const { return layer_norm(x, weight, bias, eps); }

Tensor LayerNorm::forward_into(const Tensor& x, const Linear& next, bool with_bias) const {
  if (x.dim() == 0 || x.size(-1) != next.in_features()) {
    throw std::invalid_argument("LayerNorm -> Linear: expected input [..., " + std::to_string(next.in_features()) + "], got " +
                                shape_str(x.shape()));
  }
  return layer_norm_linear(x, weight, bias, eps, next.weight, with_bias ? next.bias : Tensor());
}

Dropout::Dropout(double p, Generator& gen) : p_(p), gen_(gen.split()) {
  if (!(p >= 0.0 && p < 1.0)) throw std::invalid_argument("Dropout: p must be in [0, 1), got " + std::to_string(p));
  register_generator("rng", &gen_);
}

Tensor Dropout::forward(const Tensor& x) { return dropout(x, p_, is_training(), gen_); }

const EnumNames<Activation>& activation_names() {
  static const EnumNames<Activation> names{{"gelu", Activation::gelu}, {"relu", Activation::relu}};
  return names;
}

Activation parse_activation(const std::string& name) { return parse_enum(activation_names(), name, "activation"); }

const char* activation_name(Activation activation) { return enum_name(activation_names(), activation); }

Tensor activate(const Tensor& x, Activation activation) {
  return activation == Activation::gelu ? gelu(x) : relu(x);
}

FeedForward::FeedForward(std::size_t dim, std::size_t hidden, Activation activation_, double p, Generator& gen, bool bias,
                         std::shared_ptr<LayerNorm> input_norm)
    : activation(activation_), input_norm_(std::move(input_norm)) {
  fc1 = register_module("fc1", std::make_shared<Linear>(dim, hidden, bias, gen));
  fc2 = register_module("fc2", std::make_shared<Linear>(hidden, dim, bias, gen));
  drop = register_module("drop", std::make_shared<Dropout>(p, gen));
}

Tensor FeedForward::forward(const Tensor& x) {
  // With GELU, fc1's bias is added, and its gradient summed, in gelu_linear's own passes (ops.hpp), not
  // in fc1's product: hidden is x W1^T alone.
  const bool gelu = activation == Activation::gelu;
  const Tensor hidden = input_norm_ ? input_norm_->forward_into(x, *fc1, !gelu) : fc1->forward(x, !gelu);
  // GELU and fc2 as one op, which keeps the activation and GELU's slope for the backward.
  const Tensor out = gelu ? gelu_linear(hidden, fc2->weight, fc2->bias, fc1->bias) : fc2->forward(activate(hidden, activation));
  return drop->forward(out);
}

}  // namespace attnlab
