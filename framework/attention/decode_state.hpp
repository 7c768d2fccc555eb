// States for continuing causal sequences token by token (kernel.hpp's DecodeState), for kernels to use:
//   RecomputeState  the default: every q, k, v, layer input and key padding so far, for a forward over all
//                   of them at each step (its cost grows with the sequence; any kernel's outputs)
//   MatrixState     a matrix per sequence and head, summed in double: linear attention's [F, D + 1]
//                   (S and z side by side), the delta rules' and decay's [D, D]
//   KeyValueCache   the keys and values so far (the last `window` only, when given) with their padding:
//                   a kernel that attends over earlier keys calls its own forward with the new queries
//                   against them (the contract's causal rule puts query i at key position i + Tk - Tq),
//                   or reads them through raw pointers in a loop of its own (softmax's one-token step).
//                   Each head's keys and values are stored by dimension, [D, capacity] (a dimension's
//                   values over the tokens contiguous), as such a loop reads them: the scores gather D rows
//                   of keys in vectors across tokens, the output is D dot products over tokens.
// Inference only: they hold no graph.
//
// Legend: B batch, H heads, T tokens so far, n new tokens, D head dim, C layer width.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "framework/attention/kernel.hpp"

namespace attnlab {

// Rows `rows` of t along its first axis, in that order (any dtype).
Tensor select_batch_rows(const Tensor& t, const std::vector<std::size_t>& rows);

// The state a kernel's decode receives, as the type its start_decoding made (a logic_error otherwise).
template <class S>
S& state_as(DecodeState& state, const std::string& kernel) {
  auto* s = dynamic_cast<S*>(&state);
  if (!s) throw std::logic_error(kernel + ": decode was given a state this kernel did not make");
  return *s;
}

class RecomputeState : public DecodeState {
 public:
  explicit RecomputeState(std::size_t batch) : batch_(batch) {}
  // Appends the new tokens (as AttentionKernel::decode receives them) and returns the context of a causal
  // forward over every token so far: the padding of all keys, the layer input of all tokens, the slopes.
  AttentionContext append(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionContext& step);
  const Tensor& q() const { return q_; }  // [B, H, T, D]
  const Tensor& k() const { return k_; }
  const Tensor& v() const { return v_; }
  void select_rows(const std::vector<std::size_t>& rows) override;
  std::size_t tokens() const override { return q_.defined() ? q_.size(2) : 0; }
  double numbers_per_sequence() const override;
  bool recomputes() const override { return true; }

 private:
  std::size_t batch_;
  Tensor q_, k_, v_, input_;  // [B, H, T, D] and [B, T, C]
  Tensor padding_;            // bool [B, T]
  bool any_padding_ = false;
};

class MatrixState : public DecodeState {
 public:
  // Zero matrices [rows, cols] for each of `heads` heads of `batch` sequences.
  MatrixState(std::size_t batch, std::size_t heads, std::size_t rows, std::size_t cols)
      : batch_(batch), heads_(heads), rows_(rows), cols_(cols), values_(batch * heads * rows * cols, 0.0) {}
  double* matrix(std::size_t b, std::size_t h) { return values_.data() + (b * heads_ + h) * rows_ * cols_; }
  std::size_t batch() const { return batch_; }
  std::size_t heads() const { return heads_; }
  std::size_t rows() const { return rows_; }
  std::size_t cols() const { return cols_; }
  // Counts n more tokens (the kernel's decode has folded them into the matrices).
  void advance(std::size_t n) { tokens_ += n; }

  void select_rows(const std::vector<std::size_t>& rows) override;
  std::size_t tokens() const override { return tokens_; }
  double numbers_per_sequence() const override { return static_cast<double>(heads_ * rows_ * cols_); }

 private:
  std::size_t batch_, heads_, rows_, cols_, tokens_ = 0;
  std::vector<double> values_;  // [B, H, rows, cols]
};

class KeyValueCache : public DecodeState {
 public:
  // window 0 keeps every key; otherwise trim() forgets all but the last `window`.
  explicit KeyValueCache(std::size_t batch, std::size_t window = 0) : batch_(batch), window_(window) {}
  // Appends the new tokens' keys and values [B, H, n, D] and their padding [B, n] (undefined: none).
  void append(const Tensor& k, const Tensor& v, const Tensor& key_padding_mask);
  // Forgets all but the last `window` keys (call it once the step's queries have read them).
  void trim();
  // Copies of the kept keys and values [B, H, T', D], and their padding [B, T'] (undefined when none of
  // them is padded).
  Tensor keys() const { return kept_rows(k_); }
  Tensor values() const { return kept_rows(v_); }
  Tensor key_padding_mask() const;
  // The context of a forward of the new queries over the kept keys: causal, their padding, the step's
  // slopes and input.
  AttentionContext context(const AttentionContext& step) const;

  // Raw access for decode loops: (b, h)'s kept keys and values by dimension, [D, capacity()] each (row d
  // holds dimension d of tokens 0 .. kept() - 1, oldest first); the padding flags of sequence b's kept
  // keys (nullptr when none is padded).
  template <class T>
  const T* key_columns(std::size_t b, std::size_t h) const {
    return k_.data<T>() + (b * heads_ + h) * dim_ * capacity_;
  }
  template <class T>
  const T* value_columns(std::size_t b, std::size_t h) const {
    return v_.data<T>() + (b * heads_ + h) * dim_ * capacity_;
  }
  const bool* padding_row(std::size_t b) const { return any_padding_ ? padding_.data<bool>() + b * capacity_ : nullptr; }
  std::size_t capacity() const { return capacity_; }
  std::size_t kept() const { return kept_; }
  std::size_t heads() const { return heads_; }
  std::size_t head_dim() const { return dim_; }
  DType dtype() const { return k_.dtype(); }

  void select_rows(const std::vector<std::size_t>& rows) override;
  std::size_t tokens() const override { return seen_; }
  double numbers_per_sequence() const override { return 2.0 * static_cast<double>(heads_ * dim_ * kept_); }

 private:
  void reserve(std::size_t tokens, DType dtype);
  // Moves columns [from, kept) of every row (and their padding flags) to the start of new buffers of
  // `capacity` columns; kept() becomes kept - from.
  void move_columns(std::size_t capacity, std::size_t from, DType dtype);
  Tensor kept_rows(const Tensor& buffer) const;
  std::size_t batch_, window_, heads_ = 0, dim_ = 0;
  std::size_t capacity_ = 0, kept_ = 0, seen_ = 0;
  Tensor k_, v_;      // [B, H, D, capacity]: columns [0, kept) of each (b, h) hold the kept keys, oldest first
  Tensor padding_;    // bool [B, capacity]
  bool any_padding_ = false;
};

}  // namespace attnlab
