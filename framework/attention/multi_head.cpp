#include "framework/attention/multi_head.hpp"

#include <stdexcept>

namespace attnlab {
namespace {

using I = std::int64_t;

// [B, T, k*C] -> k tensors [B, H, T, D] (one copy for all of them).
std::vector<Tensor> split_heads(const Tensor& x, std::size_t parts, std::size_t heads, std::size_t head_dim) {
  const I b = static_cast<I>(x.size(0)), t = static_cast<I>(x.size(1));
  const Tensor split = permute(reshape(x, {b, t, static_cast<I>(parts), static_cast<I>(heads), static_cast<I>(head_dim)}),
                               {2, 0, 3, 1, 4});  // [k, B, H, T, D]
  std::vector<Tensor> out;
  for (std::size_t i = 0; i < parts; ++i)
    out.push_back(reshape(slice(split, 0, static_cast<I>(i), static_cast<I>(i) + 1), {b, static_cast<I>(heads), t, static_cast<I>(head_dim)}));
  return out;
}

// y = x W[rows]^T + b[rows]: part of a fused projection (cross-attention uses the q rows and the kv rows).
Tensor project_rows(const Linear& linear, const Tensor& x, I from, I to) {
  Tensor y = matmul(x, slice(linear.weight, 0, from, to), false, true);
  return linear.bias.defined() ? y + slice(linear.bias, 0, from, to) : y;
}

}  // namespace

void check_heads_divide(std::size_t d_model, std::size_t n_heads) {
  if (n_heads == 0 || d_model % n_heads != 0) {
    throw std::invalid_argument("n_heads (" + std::to_string(n_heads) + ") must divide d_model (" + std::to_string(d_model) + ")");
  }
}

MultiHeadAttention::MultiHeadAttention(std::size_t d_model, std::size_t n_heads, std::shared_ptr<AttentionKernel> kernel_,
                                       bool bias, Generator& gen)
    : d_model_(d_model), n_heads_(n_heads), head_dim_(0) {
  check_heads_divide(d_model, n_heads);
  if (!kernel_) throw std::invalid_argument("MultiHeadAttention: no attention kernel given");
  head_dim_ = d_model / n_heads;
  qkv = register_module("qkv", std::make_shared<Linear>(d_model, 3 * d_model, bias, gen));
  proj = register_module("proj", std::make_shared<Linear>(d_model, d_model, bias, gen));
  kernel = register_module("kernel", std::move(kernel_));
}

AttentionResult MultiHeadAttention::forward(const Tensor& x, const Tensor& context, const AttentionContext& attention,
                                            const PositionalEncoding* rotary, const LayerNorm* norm) {
  if (x.dim() != 3 || x.size(2) != d_model_) {
    throw std::invalid_argument("MultiHeadAttention: expected x [B, T, " + std::to_string(d_model_) + "], got " +
                                shape_str(x.shape()));
  }
  Tensor q, k, v;
  if (!context.defined()) {
    auto heads = split_heads(norm ? norm->forward_into(x, *qkv) : qkv->forward(x), 3, n_heads_, head_dim_);  // 3 x [B, H, T, D]
    q = heads[0], k = heads[1], v = heads[2];
  } else {
    if (context.dim() != 3 || context.size(0) != x.size(0) || context.size(2) != d_model_) {
      throw std::invalid_argument("MultiHeadAttention: expected context [" + std::to_string(x.size(0)) + ", Tk, " +
                                  std::to_string(d_model_) + "], got " + shape_str(context.shape()));
    }
    if (!kernel->capabilities().cross_attention) {
      throw std::invalid_argument("attention kernel '" + kernel->name() + "' does not support cross-attention");
    }
    const I c = static_cast<I>(d_model_);
    q = split_heads(project_rows(*qkv, norm ? norm->forward(x) : x, 0, c), 1, n_heads_, head_dim_)[0];  // [B, H, Tq, D]
    auto kv = split_heads(project_rows(*qkv, context, c, 3 * c), 2, n_heads_, head_dim_);  // 2 x [B, H, Tk, D]
    k = kv[0], v = kv[1];
  }
  if (rotary) {
    q = rotary->rotate(q);
    k = rotary->rotate(k);
  }
  AttentionResult result = kernel->forward(q, k, v, attention);  // output [B, H, Tq, D]
  const I b = static_cast<I>(x.size(0)), tq = static_cast<I>(x.size(1));
  const Tensor merged = reshape(permute(result.output, {0, 2, 1, 3}), {b, tq, static_cast<I>(d_model_)});  // [B, Tq, C]
  result.output = proj->forward(merged);
  return result;
}

}  // namespace attnlab
