// Positional encodings: none, sinusoidal (Vaswani et al. 2017, added to the token embeddings), learned
// (a trained table, added), rotary (RoPE, Su et al. 2021: q and k rotated per head inside attention,
// pairs (i, i + D/2) as in GPT-NeoX and LLaMA), ALiBi (Press et al. 2022: no embedding; the attention
// kernel adds -m_h |i - j| to head h's scores, with the slopes m_h of alibi_slopes).
//
// Legend: B batch, T tokens, C channels, H heads, D head dim.
#pragma once

#include <string>
#include <vector>

#include "framework/nn/module.hpp"
#include "framework/tensor/enum_names.hpp"
#include "framework/ops/ops.hpp"

namespace attnlab {

enum class PositionalKind { none, sinusoidal, learned, rotary, alibi };
const EnumNames<PositionalKind>& positional_kind_names();
// "none" | "sinusoidal" | "learned" | "rotary" | "alibi", else an error listing them.
PositionalKind parse_positional_kind(const std::string& name);
const char* positional_kind_name(PositionalKind kind);

// ALiBi's per-head slopes, the paper's rule: for n heads a power of two, the geometric sequence starting
// at and multiplied by 2^(-8/n) (8 heads: 1/2, 1/4, ..., 1/256); otherwise the slopes of the largest
// power of two m below n, then every other slope of 2m's sequence for the remaining n - m heads.
std::vector<double> alibi_slopes(std::size_t n_heads);

class PositionalEncoding : public Module {
 public:
  // head_dim is used by rotary only (it must be even); learned tables start from N(0, 0.02) as in GPT-2.
  PositionalEncoding(PositionalKind kind, std::size_t max_len, std::size_t dim, std::size_t head_dim, Generator& gen,
                     double rope_base = 10000.0);

  PositionalKind kind() const { return kind_; }
  std::size_t max_len() const { return max_len_; }
  // x [B, T, C] plus the encoding of positions offset .. offset + T - 1 (sinusoidal, learned); x itself
  // for rotary and none. Positions past max_len are an error.
  Tensor add_to(const Tensor& x, std::size_t offset = 0) const;
  // Rotates q or k [B, H, T, D] by their positions (rotary); x itself otherwise.
  Tensor rotate(const Tensor& x, std::size_t offset = 0) const;

  Tensor table;     // [max_len, C]: sinusoidal buffer or learned parameter
  Tensor cos, sin;  // [max_len, D] rotary tables (each angle repeated for both halves)

 private:
  void check_length(std::size_t length, std::size_t offset) const;
  PositionalKind kind_;
  std::size_t max_len_;
};

}  // namespace attnlab
