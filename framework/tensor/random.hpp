// Generator: an explicit, seeded random source (xoshiro256** seeded through splitmix64). The same seed
// gives the same numbers on every machine: no std:: distributions (their output is implementation-defined).
#pragma once

#include <cstdint>
#include <vector>

namespace attnlab {

class Generator {
 public:
  explicit Generator(std::uint64_t seed = 0);

  std::uint64_t seed() const { return seed_; }
  std::uint64_t next_u64();
  // Uniform in [0, 1) with 53 random bits.
  double next_double();
  // Uniform integer in [0, n), without modulo bias; n > 0.
  std::uint64_t next_below(std::uint64_t n);
  // Standard normal (Box-Muller; the second value of each pair is kept for the next call).
  double next_normal();
  // An independent generator derived from this one's stream (for dropout, data shuffling, ...).
  Generator split();
  // The whole state as 7 integers (for checkpoints), and back; set_state checks the count.
  std::vector<std::int64_t> state() const;
  void set_state(const std::vector<std::int64_t>& state);

 private:
  std::uint64_t seed_;
  std::uint64_t s_[4];
  bool has_spare_normal_ = false;
  double spare_normal_ = 0.0;
};

}  // namespace attnlab
