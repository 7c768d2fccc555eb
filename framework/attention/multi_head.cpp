#include "framework/attention/multi_head.hpp"

#include <stdexcept>

#include "framework/attention/decode_state.hpp"

namespace attnlab {
namespace {

using I = std::int64_t;

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
                                       bool bias, Generator& gen, std::shared_ptr<LayerNorm> input_norm,
                                       std::shared_ptr<const PositionalEncoding> rotary, const AttentionSetup& setup)
    : d_model_(d_model), n_heads_(n_heads), head_dim_(0), input_norm_(std::move(input_norm)), rotary_(std::move(rotary)) {
  check_heads_divide(d_model, n_heads);
  if (!kernel_) throw std::invalid_argument("MultiHeadAttention: no attention kernel given");
  if (setup.alibi && !kernel_->capabilities().alibi) {
    throw std::invalid_argument("attention kernel '" + kernel_->name() + "' cannot add ALiBi's distance bias to its scores");
  }
  head_dim_ = d_model / n_heads;
  qkv = register_module("qkv", std::make_shared<Linear>(d_model, 3 * d_model, bias, gen));
  proj = register_module("proj", std::make_shared<Linear>(d_model, d_model, bias, gen));
  kernel = register_module("kernel", std::move(kernel_));
  if (setup.short_conv) short_conv = register_module("short_conv", std::make_shared<ShortConv>(3 * d_model, setup.short_conv, gen));
  if (setup.alibi) alibi_slopes_ = alibi_slopes(n_heads);
}

AttentionContext MultiHeadAttention::kernel_context(const AttentionContext& context, const Tensor& x) const {
  AttentionContext c = context;
  c.alibi_slopes = alibi_slopes_;
  if (kernel->capabilities().reads_input) c.input = input_norm_ ? input_norm_->forward(x) : x;
  return c;
}

void MultiHeadAttention::check_input(const Tensor& x, const char* name) const {
  if (x.dim() != 3 || x.size(2) != d_model_) {
    throw std::invalid_argument(std::string("MultiHeadAttention: expected ") + name + " [B, T, " + std::to_string(d_model_) +
                                "], got " + shape_str(x.shape()));
  }
}

Tensor MultiHeadAttention::self_attention(const Tensor& x, const AttentionContext& context, const HookScope& hooks) {
  check_input(x, "x");
  Tensor projected = input_norm_ ? input_norm_->forward_into(x, *qkv) : qkv->forward(x);  // [B, T, 3C]
  if (short_conv) projected = short_conv->forward(projected);
  AttentionContext c = kernel_context(context, x);
  if (!rotary_ && !hooks.active()) {  // the training hot path: a kernel may attend to the packed heads in place
    c.need_pattern = false;
    const Tensor z = kernel->forward_packed(projected, n_heads_, c);  // [B, T, C] merged heads, or undefined
    if (z.defined()) return proj->forward(z);
  }
  auto heads = split_heads(projected, 3, n_heads_);  // 3 x [B, H, T, D]
  return attend(heads[0], heads[1], heads[2], c, hooks);
}

Tensor MultiHeadAttention::cross_attention(const Tensor& x, const Tensor& memory, const AttentionContext& context,
                                           const HookScope& hooks) {
  check_input(x, "x");
  check_input(memory, "memory");
  if (memory.size(0) != x.size(0)) {
    throw std::invalid_argument("MultiHeadAttention: x and memory hold different batch sizes (" + std::to_string(x.size(0)) +
                                " and " + std::to_string(memory.size(0)) + ")");
  }
  if (!kernel->capabilities().cross_attention) {
    throw std::invalid_argument("attention kernel '" + kernel->name() + "' does not support cross-attention");
  }
  const I c = static_cast<I>(d_model_);
  const Tensor q = split_heads(project_rows(*qkv, input_norm_ ? input_norm_->forward(x) : x, 0, c), 1, n_heads_)[0];
  auto kv = split_heads(project_rows(*qkv, memory, c, 3 * c), 2, n_heads_);  // 2 x [B, H, Tk, D]
  return attend(q, kv[0], kv[1], kernel_context(context, x), hooks);
}

// ---- decoding ----

void SelfAttentionState::select_rows(const std::vector<std::size_t>& rows) {
  kernel->select_rows(rows);
  conv_tail = select_batch_rows(conv_tail, rows);
}

void CrossAttentionState::select_rows(const std::vector<std::size_t>& rows) {
  for (Tensor* t : {&k, &v, &padding}) *t = select_batch_rows(*t, rows);
}

SelfAttentionState MultiHeadAttention::start_decoding(std::size_t batch) const {
  SelfAttentionState state;
  state.kernel = kernel->start_decoding(batch);
  // The convolution reads zeros before a sequence's first token.
  if (short_conv) state.conv_tail = zeros({batch, short_conv->kernel_size() - 1, 3 * d_model_}, qkv->weight.dtype());
  return state;
}

Tensor MultiHeadAttention::self_attention_step(const Tensor& x, const Tensor& key_padding_mask, SelfAttentionState& state) {
  check_input(x, "x");
  NoGradGuard no_grad;
  Tensor projected = input_norm_ ? input_norm_->forward_into(x, *qkv) : qkv->forward(x);  // [B, n, 3C]
  if (short_conv) {
    const Tensor seen = concat({state.conv_tail, projected}, 1);  // [B, K - 1 + n, 3C]: what the new rows convolve
    const I rows = static_cast<I>(seen.size(1)), n = static_cast<I>(x.size(1));
    projected = slice(short_conv->forward(seen), 1, rows - n, rows);
    state.conv_tail = slice(seen, 1, n, rows);
  }
  auto heads = split_heads(projected, 3, n_heads_);  // 3 x [B, H, n, D]
  if (rotary_) {
    heads[0] = rotary_->rotate(heads[0], state.position);
    heads[1] = rotary_->rotate(heads[1], state.position);
  }
  const AttentionContext context = kernel_context(AttentionContext{true, key_padding_mask, false}, x);
  const Tensor z = kernel->decode(*state.kernel, heads[0], heads[1], heads[2], context);  // [B, H, n, D]
  state.position += x.size(1);
  return project(z);
}

CrossAttentionState MultiHeadAttention::start_cross_attention(const Tensor& memory, const Tensor& memory_padding_mask) const {
  check_input(memory, "memory");
  if (rotary_) throw std::invalid_argument("MultiHeadAttention: decoding cross-attention with rotary positions is not supported");
  NoGradGuard no_grad;
  const I c = static_cast<I>(d_model_);
  auto kv = split_heads(project_rows(*qkv, memory, c, 3 * c), 2, n_heads_);  // 2 x [B, H, S, D]
  return CrossAttentionState{kv[0], kv[1], memory_padding_mask};
}

Tensor MultiHeadAttention::cross_attention_step(const Tensor& x, const CrossAttentionState& state) {
  check_input(x, "x");
  if (x.size(0) != state.k.size(0)) {
    throw std::invalid_argument("MultiHeadAttention: " + std::to_string(x.size(0)) + " sequences against a memory of " +
                                std::to_string(state.k.size(0)));
  }
  NoGradGuard no_grad;
  const Tensor q = split_heads(project_rows(*qkv, input_norm_ ? input_norm_->forward(x) : x, 0, static_cast<I>(d_model_)), 1, n_heads_)[0];
  return project(kernel->forward(q, state.k, state.v, kernel_context(AttentionContext{false, state.padding, false}, x)).output);
}

Tensor MultiHeadAttention::attend(Tensor q, Tensor k, Tensor v, AttentionContext context, const HookScope& hooks) {
  if (rotary_) {
    q = rotary_->rotate(q);
    k = rotary_->rotate(k);
  }
  context.need_pattern = false;
  if (!hooks.active()) return project(kernel->forward(q, k, v, context).output);  // the training hot path
  q = hooks("hook_q", q);
  k = hooks("hook_k", k);
  v = hooks("hook_v", v);
  Tensor z;  // [B, H, Tq, D]
  if (kernel->capabilities().pattern && hooks.wants("hook_pattern")) {
    const Tensor pattern = kernel_pattern(q, k, v, context);
    const Tensor used = hooks("hook_pattern", pattern);
    z = used.same(pattern) ? kernel->forward(q, k, v, context).output : matmul(used, v);  // a replaced pattern mixes the values
  } else {
    z = kernel->forward(q, k, v, context).output;
  }
  z = hooks("hook_z", z);
  if (hooks.wants("hook_result")) {
    const Tensor results = head_results(z);
    const Tensor used = hooks("hook_result", results);
    if (!used.same(results)) {
      const Tensor out = sum(used, 1);  // [B, Tq, C]
      return proj->bias.defined() ? out + proj->bias : out;
    }
  }
  return project(z);
}

Tensor MultiHeadAttention::kernel_pattern(const Tensor& q, const Tensor& k, const Tensor& v, AttentionContext context) {
  // In eval mode and without a graph: the pattern only looks, it draws no dropout mask and advances no
  // kernel state, so a forward that caches it computes the same output as one that does not.
  const EvalScope eval(*kernel);  // writes nothing when the kernel is in eval mode already (Python's models)
  context.need_pattern = true;
  return kernel->forward(q, k, v, context).pattern;
}

Tensor MultiHeadAttention::project(const Tensor& z) const {
  const I b = static_cast<I>(z.size(0)), tq = static_cast<I>(z.size(2));
  return proj->forward(reshape(permute(z, {0, 2, 1, 3}), {b, tq, static_cast<I>(d_model_)}));  // [B, Tq, C] merged heads
}

Tensor MultiHeadAttention::head_results(const Tensor& z) const {
  // proj.weight [C, C] reads the merged heads along its columns: head h owns columns [hD, (h+1)D).
  const Tensor per_head = reshape(transpose(proj->weight, 0, 1),
                                  {static_cast<I>(n_heads_), static_cast<I>(head_dim_), static_cast<I>(d_model_)});  // [H, D, C]
  return matmul(z, per_head);  // [B, H, Tq, D] x [H, D, C] -> [B, H, Tq, C]
}

}  // namespace attnlab
