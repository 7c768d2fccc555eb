// The decoding states of decode_state.hpp, and the kernel contract's default decoding (kernel.hpp):
// recomputing the kernel over every token so far.
#include "framework/attention/decode_state.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <utility>

namespace attnlab {
namespace {

using I = std::int64_t;

std::uint8_t* bytes(Tensor& t) { return static_cast<std::uint8_t*>(t.storage()->data()); }
const std::uint8_t* bytes(const Tensor& t) { return static_cast<const std::uint8_t*>(t.storage()->data()); }

// t joined with `more` along `axis` (t undefined: `more` itself).
Tensor joined(const Tensor& t, const Tensor& more, std::int64_t axis) { return t.defined() ? concat({t, more}, axis) : more; }

void check_step(const Tensor& q, const Tensor& k, const Tensor& v, std::size_t batch) {
  if (q.dim() != 4 || k.dim() != 4 || k.shape() != v.shape() || q.size(0) != batch || k.size(0) != batch || q.size(2) != k.size(2)) {
    throw std::invalid_argument("decode: expected q, k, v [B, H, n, D] for the n new tokens of " + std::to_string(batch) +
                                " sequences, got " + shape_str(q.shape()) + ", " + shape_str(k.shape()) + ", " + shape_str(v.shape()));
  }
}

// The padding of n new keys of `batch` sequences: the given mask, or none padded.
Tensor step_padding(const Tensor& mask, std::size_t batch, std::size_t n) {
  if (!mask.defined()) return zeros({batch, n}, DType::boolean);
  check_key_padding_mask(mask, batch, n);
  return mask;
}

bool any_true(const bool* flags, std::size_t n) { return std::any_of(flags, flags + n, [](bool b) { return b; }); }

}  // namespace

Tensor select_batch_rows(const Tensor& t, const std::vector<std::size_t>& rows) {
  if (!t.defined()) return t;
  const std::size_t width = t.size(0) ? t.numel() / t.size(0) * element_size(t.dtype()) : 0;
  Shape shape = t.shape();
  shape[0] = rows.size();
  Tensor out = empty(shape, t.dtype());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (rows[i] >= t.size(0)) {
      throw std::out_of_range("select_rows: row " + std::to_string(rows[i]) + " of a batch of " + std::to_string(t.size(0)));
    }
    std::memcpy(bytes(out) + i * width, bytes(t) + rows[i] * width, width);
  }
  return out;
}

// ---- the default: recompute ----

AttentionContext RecomputeState::append(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionContext& step) {
  check_step(q, k, v, batch_);
  const Tensor pad = step_padding(step.key_padding_mask, batch_, k.size(2));
  q_ = joined(q_, q, 2);
  k_ = joined(k_, k, 2);
  v_ = joined(v_, v, 2);
  if (step.input.defined()) input_ = joined(input_, step.input, 1);
  any_padding_ = any_padding_ || any_true(pad.data<bool>(), pad.numel());
  padding_ = joined(padding_, pad, 1);
  AttentionContext all{true, any_padding_ ? padding_ : Tensor(), false};
  all.input = input_;
  all.alibi_slopes = step.alibi_slopes;
  return all;
}

void RecomputeState::select_rows(const std::vector<std::size_t>& rows) {
  for (Tensor* t : {&q_, &k_, &v_, &input_, &padding_}) *t = select_batch_rows(*t, rows);
  batch_ = rows.size();
}

double RecomputeState::numbers_per_sequence() const {
  if (!q_.defined()) return 0;
  const double per_row = static_cast<double>(q_.numel() + k_.numel() + v_.numel() + (input_.defined() ? input_.numel() : 0));
  return per_row / static_cast<double>(std::max<std::size_t>(batch_, 1));
}

std::unique_ptr<DecodeState> AttentionKernel::start_decoding(std::size_t batch) const { return std::make_unique<RecomputeState>(batch); }

Tensor AttentionKernel::decode(DecodeState& state, const Tensor& q, const Tensor& k, const Tensor& v, const AttentionContext& context) {
  auto* recompute = dynamic_cast<RecomputeState*>(&state);
  if (!recompute) {
    throw std::logic_error(name() + ": decode was given a state this kernel did not make; a kernel that declares `incremental` "
                                    "overrides start_decoding and decode together");
  }
  const AttentionContext all = recompute->append(q, k, v, context);
  const auto t = static_cast<I>(recompute->tokens()), n = static_cast<I>(q.size(2));
  return slice(forward(recompute->q(), recompute->k(), recompute->v(), all).output, 2, t - n, t);  // the new tokens' rows
}

// ---- a matrix per head ----

void MatrixState::select_rows(const std::vector<std::size_t>& rows) {
  const std::size_t size = heads_ * rows_ * cols_;
  std::vector<double> picked(rows.size() * size);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (rows[i] >= batch_) throw std::out_of_range("select_rows: row " + std::to_string(rows[i]) + " of a batch of " + std::to_string(batch_));
    std::copy(values_.begin() + static_cast<std::ptrdiff_t>(rows[i] * size), values_.begin() + static_cast<std::ptrdiff_t>((rows[i] + 1) * size),
              picked.begin() + static_cast<std::ptrdiff_t>(i * size));
  }
  values_ = std::move(picked);
  batch_ = rows.size();
}

// ---- keys and values ----

void KeyValueCache::reserve(std::size_t tokens, DType dtype) {
  if (k_.defined() && tokens <= capacity_) return;
  move_columns(std::max({tokens, 2 * capacity_, std::size_t{16}}), 0, dtype);
}

void KeyValueCache::move_columns(std::size_t capacity, std::size_t from, DType dtype) {
  const std::size_t element = element_size(dtype), kept = kept_ - from;
  Tensor k = empty({batch_, heads_, dim_, capacity}, dtype), v = empty({batch_, heads_, dim_, capacity}, dtype);
  Tensor padding = zeros({batch_, capacity}, DType::boolean);
  if (k_.defined()) {
    for (std::size_t row = 0; row < batch_ * heads_ * dim_; ++row) {  // (b, h, d)
      std::memcpy(bytes(k) + row * capacity * element, bytes(k_) + (row * capacity_ + from) * element, kept * element);
      std::memcpy(bytes(v) + row * capacity * element, bytes(v_) + (row * capacity_ + from) * element, kept * element);
    }
    for (std::size_t b = 0; b < batch_; ++b) std::memcpy(bytes(padding) + b * capacity, bytes(padding_) + b * capacity_ + from, kept);
  }
  k_ = k, v_ = v, padding_ = padding, capacity_ = capacity, kept_ = kept;
}

void KeyValueCache::append(const Tensor& k, const Tensor& v, const Tensor& key_padding_mask) {
  if (k.dim() != 4 || k.shape() != v.shape() || k.size(0) != batch_ || (k_.defined() && (k.size(1) != heads_ || k.size(3) != dim_ || k.dtype() != k_.dtype()))) {
    throw std::invalid_argument("KeyValueCache: expected keys and values [" + std::to_string(batch_) + ", H, n, D] like those cached, got " +
                                shape_str(k.shape()) + " and " + shape_str(v.shape()));
  }
  heads_ = k.size(1), dim_ = k.size(3);
  const std::size_t n = k.size(2);
  reserve(kept_ + n, k.dtype());
  dispatch_floating(k.dtype(), "KeyValueCache", [&](auto tag) {
    using T = typename decltype(tag)::type;
    for (const auto& [from, to] : {std::pair<const Tensor*, Tensor*>{&k, &k_}, {&v, &v_}}) {
      const T* src = from->template data<T>();
      T* dst = to->template data<T>();
      for (std::size_t bh = 0; bh < batch_ * heads_; ++bh)  // token i's dimension d -> row d, column kept + i
        for (std::size_t i = 0; i < n; ++i)
          for (std::size_t d = 0; d < dim_; ++d) dst[(bh * dim_ + d) * capacity_ + kept_ + i] = src[(bh * n + i) * dim_ + d];
    }
  });
  const Tensor pad = step_padding(key_padding_mask, batch_, n);
  for (std::size_t b = 0; b < batch_; ++b) std::memcpy(bytes(padding_) + b * capacity_ + kept_, bytes(pad) + b * n, n);
  any_padding_ = any_padding_ || any_true(pad.data<bool>(), pad.numel());
  kept_ += n, seen_ += n;
}

void KeyValueCache::trim() {
  if (window_ == 0 || kept_ <= window_) return;
  const std::size_t drop = kept_ - window_, compact = std::max(2 * window_, std::size_t{16});
  if (capacity_ > compact) {
    // A prompt (or a chunk) longer than the window grew the buffers: the window's columns move into buffers
    // sized by the window, so that neither the memory kept nor the stride the decode loops read across
    // (capacity() between a head's dimensions) grows with the prompt.
    move_columns(compact, drop, k_.dtype());
  } else {
    const std::size_t element = element_size(k_.dtype());
    for (std::size_t row = 0; row < batch_ * heads_ * dim_; ++row) {
      for (Tensor* t : {&k_, &v_}) {
        std::uint8_t* columns = bytes(*t) + row * capacity_ * element;
        std::memmove(columns, columns + drop * element, window_ * element);
      }
    }
    for (std::size_t b = 0; b < batch_; ++b) {
      bool* flags = padding_.data<bool>() + b * capacity_;
      std::memmove(flags, flags + drop, window_);
    }
    kept_ = window_;
  }
  any_padding_ = false;
  for (std::size_t b = 0; b < batch_; ++b) any_padding_ = any_padding_ || any_true(padding_.data<bool>() + b * capacity_, window_);
}

Tensor KeyValueCache::kept_rows(const Tensor& buffer) const {
  if (!buffer.defined()) throw std::logic_error("KeyValueCache: nothing appended yet");
  Tensor out = empty({batch_, heads_, kept_, dim_}, buffer.dtype());
  dispatch_floating(buffer.dtype(), "KeyValueCache", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* src = buffer.data<T>();
    T* dst = out.data<T>();
    for (std::size_t bh = 0; bh < batch_ * heads_; ++bh)
      for (std::size_t t = 0; t < kept_; ++t)
        for (std::size_t d = 0; d < dim_; ++d) dst[(bh * kept_ + t) * dim_ + d] = src[(bh * dim_ + d) * capacity_ + t];
  });
  return out;
}

Tensor KeyValueCache::key_padding_mask() const {
  if (!any_padding_) return Tensor();
  Tensor out = empty({batch_, kept_}, DType::boolean);
  for (std::size_t b = 0; b < batch_; ++b) std::memcpy(bytes(out) + b * kept_, bytes(padding_) + b * capacity_, kept_);
  return out;
}

AttentionContext KeyValueCache::context(const AttentionContext& step) const {
  AttentionContext c{true, key_padding_mask(), false};
  c.input = step.input;
  c.alibi_slopes = step.alibi_slopes;
  return c;
}

void KeyValueCache::select_rows(const std::vector<std::size_t>& rows) {
  for (Tensor* t : {&k_, &v_, &padding_}) *t = select_batch_rows(*t, rows);
  batch_ = rows.size();
}

}  // namespace attnlab
