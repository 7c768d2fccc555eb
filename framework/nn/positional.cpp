#include "framework/nn/positional.hpp"

#include <cmath>
#include <stdexcept>

namespace attnlab {

const EnumNames<PositionalKind>& positional_kind_names() {
  static const EnumNames<PositionalKind> names{{"none", PositionalKind::none},
                                               {"sinusoidal", PositionalKind::sinusoidal},
                                               {"learned", PositionalKind::learned},
                                               {"rotary", PositionalKind::rotary},
                                               {"alibi", PositionalKind::alibi}};
  return names;
}

PositionalKind parse_positional_kind(const std::string& name) {
  return parse_enum(positional_kind_names(), name, "positional encoding");
}

const char* positional_kind_name(PositionalKind kind) { return enum_name(positional_kind_names(), kind); }

namespace {
std::vector<double> geometric_slopes(std::size_t n) {
  const double start = std::pow(2.0, -8.0 / static_cast<double>(n));
  std::vector<double> slopes(n);
  for (std::size_t h = 0; h < n; ++h) slopes[h] = std::pow(start, static_cast<double>(h + 1));
  return slopes;
}
}  // namespace

std::vector<double> alibi_slopes(std::size_t n_heads) {
  if (n_heads == 0) return {};
  std::size_t m = 1;
  while (m * 2 <= n_heads) m *= 2;
  std::vector<double> slopes = geometric_slopes(m);
  const std::vector<double> finer = geometric_slopes(2 * m);
  for (std::size_t i = 0; slopes.size() < n_heads; i += 2) slopes.push_back(finer[i]);
  return slopes;
}

PositionalEncoding::PositionalEncoding(PositionalKind kind, std::size_t max_len, std::size_t dim, std::size_t head_dim,
                                       Generator& gen, double rope_base)
    : kind_(kind), max_len_(max_len) {
  NoGradGuard no_grad;
  if (kind == PositionalKind::sinusoidal) {
    // PE[pos, 2i] = sin(pos / base^(2i/C)), PE[pos, 2i+1] = cos(pos / base^(2i/C))
    std::vector<double> values(max_len * dim);
    for (std::size_t pos = 0; pos < max_len; ++pos)
      for (std::size_t i = 0; i < dim; ++i) {
        const double angle = static_cast<double>(pos) / std::pow(10000.0, static_cast<double>(i - i % 2) / static_cast<double>(dim));
        values[pos * dim + i] = i % 2 == 0 ? std::sin(angle) : std::cos(angle);
      }
    table = register_buffer("table", from_vector(values, {max_len, dim}));
  } else if (kind == PositionalKind::learned) {
    table = register_parameter("table", randn({max_len, dim}, gen, {}, 0.0, 0.02), ParamKind::embedding);
  } else if (kind == PositionalKind::rotary) {
    if (head_dim % 2 != 0) {
      throw std::invalid_argument("rotary positional encoding needs an even head dimension, got " + std::to_string(head_dim));
    }
    const std::size_t half = head_dim / 2;
    std::vector<double> c(max_len * head_dim), s(max_len * head_dim);
    for (std::size_t pos = 0; pos < max_len; ++pos)
      for (std::size_t i = 0; i < half; ++i) {
        const double theta = static_cast<double>(pos) * std::pow(rope_base, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
        c[pos * head_dim + i] = c[pos * head_dim + i + half] = std::cos(theta);
        s[pos * head_dim + i] = s[pos * head_dim + i + half] = std::sin(theta);
      }
    cos = register_buffer("cos", from_vector(c, {max_len, head_dim}));
    sin = register_buffer("sin", from_vector(s, {max_len, head_dim}));
  }
}

void PositionalEncoding::check_length(std::size_t length, std::size_t offset) const {
  if (offset + length > max_len_) {
    throw std::invalid_argument("positional encoding: positions up to " + std::to_string(offset + length) +
                                " exceed max_len " + std::to_string(max_len_) + "; raise max_len (block size)");
  }
}

Tensor PositionalEncoding::add_to(const Tensor& x, std::size_t offset) const {
  if (kind_ != PositionalKind::sinusoidal && kind_ != PositionalKind::learned) return x;
  const std::size_t length = x.size(-2);
  check_length(length, offset);
  const auto from = static_cast<std::int64_t>(offset);
  return x + slice(table.to(x.dtype()), 0, from, from + static_cast<std::int64_t>(length));  // [T, C] broadcast
}

Tensor PositionalEncoding::rotate(const Tensor& x, std::size_t offset) const {
  if (kind_ != PositionalKind::rotary) return x;
  const std::size_t length = x.size(-2), d = x.size(-1), half = d / 2;
  check_length(length, offset);
  if (d != cos.size(1)) {
    throw std::invalid_argument("rotary: head dimension " + std::to_string(d) + " differs from the table's " +
                                std::to_string(cos.size(1)));
  }
  const auto from = static_cast<std::int64_t>(offset), to = from + static_cast<std::int64_t>(length);
  const Tensor c = slice(cos.to(x.dtype()), 0, from, to), s = slice(sin.to(x.dtype()), 0, from, to);  // [T, D]
  // rotate_half(x) = [-x2, x1] for x = [x1, x2] split at D/2
  const auto h = static_cast<std::int64_t>(half), full = static_cast<std::int64_t>(d);
  const Tensor rotated = concat({neg(slice(x, -1, h, full)), slice(x, -1, 0, h)}, -1);
  return x * c + rotated * s;
}

}  // namespace attnlab
