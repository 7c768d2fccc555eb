#include "framework/attention/linear/feature_attention.hpp"

#include <stdexcept>

namespace attnlab {

AttentionResult feature_attention(const Tensor& fq, const Tensor& fk_in, const Tensor& v, const AttentionContext& context,
                                  double eps, const char* kernel_name) {
  using I = std::int64_t;
  const std::size_t batch = fq.size(0), tq = fq.size(2), tk = fk_in.size(2);
  Tensor fk = fk_in;  // [B, H, Tk, F]
  if (context.key_padding_mask.defined()) {
    check_key_padding_mask(context.key_padding_mask, batch, tk);
    const Tensor keep = where(reshape(context.key_padding_mask, {static_cast<I>(batch), 1, static_cast<I>(tk), 1}),
                              zeros({}, fk.dtype()), ones({}, fk.dtype()));
    fk = fk * keep;
  }
  AttentionResult result;
  if (context.causal) {
    if (tq != tk) throw std::invalid_argument(std::string(kernel_name) + " attention: causal mode needs as many queries as keys");
    result.output = causal_linear_attention(fq, fk, v, eps);  // [B, H, T, D]
  } else {
    result.output = linear_attention(fq, fk, v, eps);  // [B, H, Tq, D]
  }
  if (context.need_pattern) {
    NoGradGuard no_grad;
    Tensor a = matmul(fq, fk, false, true);  // [B, H, Tq, Tk]
    if (context.causal) a = masked_fill(a, attention_mask(1, tq, tk, AttentionContext{true, Tensor(), false}), 0.0);
    const Tensor total = sum(a, -1, true);  // [B, H, Tq, 1]; 0 only when every visible key is padding
    result.pattern = a / where(total.to(DType::boolean), total, ones({}, total.dtype()));
  }
  return result;
}

}  // namespace attnlab
