// The differentiable ops. Each records a node when grad mode is on and an input requires grad; each
// backward lives right below its forward in the op's .cpp file. Floating ops accept float32 and float64
// (both operands of a binary op must share the dtype); indices are int64; masks are bool.
//
// Broadcasting follows numpy: shapes are aligned on the right, and an axis of size 1 stretches.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "framework/autograd/node.hpp"
#include "framework/tensor/random.hpp"
#include "framework/tensor/tensor.hpp"

namespace attnlab {

// ---- elementwise (ops/elementwise.cpp) ----
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, double b);
Tensor mul(const Tensor& a, double b);
Tensor neg(const Tensor& x);
Tensor pow(const Tensor& x, double exponent);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);   // gradient at exactly 0 is 0
// GELU, its backward and its fusion with a following Linear (ops/gelu.cpp).
Tensor gelu(const Tensor& x);   // exact form: x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2))
// grad * gelu'(x), the backward of gelu (for fused ops that recompute it).
Tensor gelu_backward(const Tensor& x, const Tensor& grad);
// gelu(x + x_bias) W^T + b (a Linear after a GELU): the activation and GELU's slope come from one pass
// and are held for the backward, which makes no GELU pass. x [..., in], weight [out, in], bias [out] or
// undefined, x_bias [in] or undefined: the bias of the Linear before the GELU (the feed-forward's fc1,
// left out of fc1's product), added and its gradient summed in gelu_linear's own passes; the same bits
// as gelu_linear(x + x_bias, weight, bias).
Tensor gelu_linear(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& x_bias = Tensor());
Tensor elu(const Tensor& x, double alpha = 1.0);
// condition ? a : b elementwise, all three broadcast together; condition is a bool tensor.
Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b);
// x with `value` where mask is true (mask broadcasts to x's shape); value may be -infinity.
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);
// x repeated along broadcast axes to `shape` (backward: sum_to).
Tensor broadcast_to(const Tensor& x, const Shape& shape);
// Sum of `grad` over the axes along which a tensor of `shape` was broadcast: the reverse of broadcasting.
Tensor sum_to(const Tensor& grad, const Shape& shape);

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, double b);
Tensor operator+(double a, const Tensor& b);
Tensor operator-(const Tensor& a, double b);
Tensor operator-(double a, const Tensor& b);
Tensor operator*(const Tensor& a, double b);
Tensor operator*(double a, const Tensor& b);
Tensor operator/(const Tensor& a, double b);
Tensor operator/(double a, const Tensor& b);
Tensor operator-(const Tensor& x);

// ---- reductions (ops/reduce.cpp) ----
// Over all elements (a 0-d result), or over one axis (negative counts from the end).
Tensor sum(const Tensor& x);
Tensor sum(const Tensor& x, std::int64_t axis, bool keepdim = false);
Tensor mean(const Tensor& x);
Tensor mean(const Tensor& x, std::int64_t axis, bool keepdim = false);
// Ties: the whole gradient goes to the first maximal element in row-major order (as argmax picks it).
Tensor max(const Tensor& x);
Tensor max(const Tensor& x, std::int64_t axis, bool keepdim = false);
// Variance over an axis; unbiased divides by n - 1, otherwise by n.
Tensor var(const Tensor& x, std::int64_t axis, bool keepdim = false, bool unbiased = false);
// Index of the first maximum along an axis (int64; not differentiable).
Tensor argmax(const Tensor& x, std::int64_t axis, bool keepdim = false);

// ---- matmul (ops/matmul.cpp) ----
// a [..., M, K] times b [..., K, N] -> [..., M, N], batch axes broadcast; transpose_a / transpose_b read
// the last two axes of an operand transposed (passed to BLAS as flags, no copy). Both operands rank >= 2.
Tensor matmul(const Tensor& a, const Tensor& b, bool transpose_a = false, bool transpose_b = false);
// A Linear layer's product: x [..., in] W^T + b, W [out, in], b [out] or undefined. The bias is added
// to each block of output rows right after its product, while they are in cache (matmul.cpp says why
// not as the product's starting value); the backward gives dx = g W, dW = g^T x, db = sum g.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias);
// A Linear's gradients from its output gradient g [..., out] and its input x [..., in] (W [out, in]):
// dx = g W [..., in], dW = g^T x [out, in] and its bias's db = the sum of g's rows [out], each undefined
// unless wanted; then then_x(dx), when set and dx wanted: what the caller does next with dx. dx and dW
// wanted together run side by side on the threads, db and then_x on dx's thread after it (matmul.cpp
// says why); linear, layer_norm_linear and gelu_linear take theirs here. then_x may run on a worker
// thread, with the caller's grad mode and parallel regions inside it run serially. Not recorded for
// autograd (backward closures run without it).
struct LinearGrads {
  Tensor x, weight, bias;
};
LinearGrads linear_grads(const Tensor& g, const Tensor& x, const Tensor& weight, bool want_x, bool want_weight, bool want_bias = false,
                         const std::function<void(Tensor&)>& then_x = {});

// ---- shape ops (ops/shape_ops.cpp) ----
// Same elements, new shape (one entry may be -1: inferred). Shares storage with x.
Tensor reshape(const Tensor& x, const std::vector<std::int64_t>& shape);
Tensor flatten(const Tensor& x, std::int64_t start_axis = 0, std::int64_t end_axis = -1);
Tensor unsqueeze(const Tensor& x, std::int64_t axis);
Tensor squeeze(const Tensor& x, std::int64_t axis);
Tensor transpose(const Tensor& x, std::int64_t axis0, std::int64_t axis1);
// Output axis i is input axis dims[i].
Tensor permute(const Tensor& x, const std::vector<std::int64_t>& dims);
// Elements start, start+step, ... below end along one axis (end clamped to the size; negative start/end
// count from the end).
Tensor slice(const Tensor& x, std::int64_t axis, std::int64_t start, std::int64_t end, std::int64_t step = 1);
Tensor concat(const std::vector<Tensor>& tensors, std::int64_t axis);
// Multi-head attention's head split: x [B, T, parts * heads * D] -> `parts` tensors [B, heads, T, D]
// (q, k, v), in one pass; one op with `parts` outputs, whose backward writes every part's gradient into
// one [B, T, parts * heads * D] tensor (zeros for a part that got none).
std::vector<Tensor> split_heads(const Tensor& x, std::size_t parts, std::size_t heads);
// Differentiable dtype conversion is Tensor::to (ops/shape_ops.cpp).

// ---- indexing (ops/index_ops.cpp) ----
// Rows of x along `axis` picked by a 1-D int64 index (repeats allowed; backward scatter-adds).
Tensor index_select(const Tensor& x, std::int64_t axis, const Tensor& index);
// weight [V, C] looked up at int64 ids of any shape -> ids.shape + [C] (backward scatter-adds into rows).
Tensor embedding(const Tensor& weight, const Tensor& ids);
// out[i][j][k] = x[i][index[i][j][k]][k] for axis 1 (numpy take_along_axis); index has x's rank.
Tensor gather(const Tensor& x, std::int64_t axis, const Tensor& index);
// ids of any shape -> ids.shape + [classes], 1 at each id (not differentiable).
Tensor one_hot(const Tensor& ids, std::size_t classes, DType dtype = DType::float32);

// ---- fused, numerically stable pairs (ops/softmax.cpp, layer_norm.cpp, cross_entropy.cpp, dropout.cpp) ----
// Over the last axis. A row that is entirely -infinity (fully masked) gives zeros and zero gradient.
Tensor softmax(const Tensor& x);
Tensor log_softmax(const Tensor& x);
// Softmax over the last axis of scale * x with masked entries excluded, fused (one [.., Tq, Tk] result):
// `mask` (bool, optional) broadcasts to x and is true where an entry is masked; `causal` also masks
// column j of row i when j > i + (Tk - Tq), i counted along the second-to-last axis. Rows with every
// entry masked give zeros and zero gradient. The attention kernels' softmax.
Tensor scaled_masked_softmax(const Tensor& x, double scale, const Tensor& mask, bool causal);
// The backward of softmax over the last axis from its output y and the output's gradient g:
// scale * y * (g - sum(g * y)) per row (scale 1 for softmax; a scaled softmax's scale; masked entries have
// y = 0 and get 0). For fused ops that recompute their weights.
Tensor softmax_backward(const Tensor& y, const Tensor& g, double scale = 1.0);
// Normalises over the last axis, then weight * x_hat + bias (weight and bias [C], either may be undefined).
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5);
// layer_norm followed by a Linear (weight [out, in], bias [out] or undefined) in one op, one node of the
// graph whose backward runs the Linear's two gradients side by side and the norm's right after: training
// keeps what the composed ops keep (x, each row's mean and 1/std, and the norm's output for the weight
// gradient). The pre-norm blocks' LN -> qkv and LN -> fc1.
Tensor layer_norm_linear(const Tensor& x, const Tensor& norm_weight, const Tensor& norm_bias, double eps,
                         const Tensor& weight, const Tensor& bias);
// logits [..., C] against int64 targets [...]; mean over targets that are not ignore_index (0 when every
// target is ignored). Targets outside [0, C) other than ignore_index are an error. With label_smoothing
// eps in [0, 1) each scored row's loss is PyTorch's (1 - eps) (-log p[target]) + eps mean_c(-log p[c]):
// the target's one-hot mixed with the uniform distribution; eps = 0 is the plain loss, bit for bit.
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, std::int64_t ignore_index = -100,
                     double label_smoothing = 0.0);
// Zeroes each element with probability p and scales the rest by 1/(1-p) when training; identity otherwise.
Tensor dropout(const Tensor& x, double p, bool training, Generator& gen);
// Data-parallel training (rank >= 0; -1, the default, is a single process): each dropout call draws one
// number from `gen` and its mask from a generator seeded by that number and the rank. Every rank's
// generators then advance alike (so rank 0's checkpoint resumes every rank) while the ranks' masks differ,
// as masks for different rows of one batch do in a single process. The masks are not the ones a single
// process would draw: with dropout, an N-process run follows the 1-process run in distribution, not bit
// for bit.
void set_dropout_rank(int rank);

}  // namespace attnlab
