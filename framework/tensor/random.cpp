#include "framework/tensor/random.hpp"

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

namespace attnlab {
namespace {

std::uint64_t splitmix64(std::uint64_t& x) {
  std::uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

}  // namespace

Generator::Generator(std::uint64_t seed) : seed_(seed) {
  std::uint64_t x = seed;
  for (auto& s : s_) s = splitmix64(x);
}

std::uint64_t Generator::next_u64() {
  const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const std::uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double Generator::next_double() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

std::uint64_t Generator::next_below(std::uint64_t n) {
  // Lemire's rejection on the 128-bit product.
  std::uint64_t x = next_u64();
  __uint128_t m = static_cast<__uint128_t>(x) * n;
  auto low = static_cast<std::uint64_t>(m);
  if (low < n) {
    const std::uint64_t threshold = (0 - n) % n;
    while (low < threshold) {
      x = next_u64();
      m = static_cast<__uint128_t>(x) * n;
      low = static_cast<std::uint64_t>(m);
    }
  }
  return static_cast<std::uint64_t>(m >> 64);
}

double Generator::next_normal() {
  if (has_spare_normal_) {
    has_spare_normal_ = false;
    return spare_normal_;
  }
  double u1 = next_double();
  while (u1 <= 0.0) u1 = next_double();
  const double u2 = next_double();
  const double radius = std::sqrt(-2.0 * std::log(u1));
  const double angle = 2.0 * M_PI * u2;
  spare_normal_ = radius * std::sin(angle);
  has_spare_normal_ = true;
  return radius * std::cos(angle);
}

Generator Generator::split() { return Generator(next_u64()); }

std::vector<std::int64_t> Generator::state() const {
  std::int64_t spare = 0;
  std::memcpy(&spare, &spare_normal_, sizeof spare);
  return {static_cast<std::int64_t>(seed_), static_cast<std::int64_t>(s_[0]), static_cast<std::int64_t>(s_[1]),
          static_cast<std::int64_t>(s_[2]), static_cast<std::int64_t>(s_[3]), has_spare_normal_ ? 1 : 0, spare};
}

void Generator::set_state(const std::vector<std::int64_t>& state) {
  if (state.size() != 7) throw std::invalid_argument("Generator::set_state: expected 7 values, got " + std::to_string(state.size()));
  if (state[1] == 0 && state[2] == 0 && state[3] == 0 && state[4] == 0) {
    throw std::invalid_argument("Generator::set_state: an all-zero state would only ever produce zeros");
  }
  seed_ = static_cast<std::uint64_t>(state[0]);
  for (int i = 0; i < 4; ++i) s_[i] = static_cast<std::uint64_t>(state[1 + i]);
  has_spare_normal_ = state[5] != 0;
  std::memcpy(&spare_normal_, &state[6], sizeof spare_normal_);
}

}  // namespace attnlab
