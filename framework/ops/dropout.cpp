// Dropout: a mask of 0 and 1/(1-p) drawn from the caller's generator, so that forward and backward are
// one multiply each; in data-parallel training each rank draws its masks from a stream of its own (see
// set_dropout_rank in ops.hpp).
#include <optional>
#include <stdexcept>
#include <string>

#include "framework/ops/ops.hpp"

namespace attnlab {

namespace {
int g_dropout_rank = -1;
}  // namespace

void set_dropout_rank(int rank) { g_dropout_rank = rank; }

Tensor dropout(const Tensor& x, double p, bool training, Generator& shared) {
  if (!(p >= 0.0 && p <= 1.0)) throw std::invalid_argument("dropout: p must be in [0, 1], got " + std::to_string(p));
  if (!training || p == 0.0) return x;
  // A rank's own stream: the golden ratio's multiples keep the ranks' seeds apart (the Generator mixes
  // its seed through splitmix64).
  std::optional<Generator> ranked;
  if (g_dropout_rank >= 0) ranked.emplace(shared.next_u64() + 0x9E3779B97F4A7C15ull * static_cast<std::uint64_t>(g_dropout_rank + 1));
  Generator& gen = ranked ? *ranked : shared;
  // The mask holds 0 or 1/(1-p) per element, so forward and backward are one multiply.
  Tensor mask = empty(x.shape(), x.dtype());
  dispatch_floating(x.dtype(), "dropout", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* pm = mask.data<T>();
    const T keep = p < 1.0 ? static_cast<T>(1.0 / (1.0 - p)) : T(0);
    for (std::size_t i = 0, n = x.numel(); i < n; ++i) pm[i] = gen.next_double() < p ? T(0) : keep;
  });
  Tensor out;
  {
    NoGradGuard no_grad;
    out = mul(x, mask);
  }
  if (needs_grad({&x})) {
    record(out, "dropout", {x}, [mask](const Tensor& g) { return std::vector<Tensor>{mul(g, mask)}; });
  }
  return out;
}

}  // namespace attnlab
