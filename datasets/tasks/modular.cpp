// The modular arithmetic task of the grokking papers (Power et al. 2022; Nanda et al. 2023, "Progress
// measures for grokking via mechanistic interpretability"): (a op b) mod p for every pair a, b in [0, p),
// each written "a b =" and answered at "=" (a causal LM's logits at the last position). The p^2 pairs are
// split once, by a seeded shuffle, into a training share and the held-out rest; a batch at least as
// large as the training split is the whole of it, in order (full-batch training).
#include <algorithm>
#include <cstdint>
#include <numeric>

#include "datasets/source.hpp"
#include "framework/tensor/random.hpp"

namespace attnlab::data {
namespace {

enum class ModularOp { add, sub, mul };

const EnumNames<ModularOp>& modular_op_names() {
  static const EnumNames<ModularOp> names{{"add", ModularOp::add}, {"sub", ModularOp::sub}, {"mul", ModularOp::mul}};
  return names;
}

// The numbers 0 .. p-1, then "=" (id p); three tokens per example.
DataShape modular_shape(std::size_t p) {
  DataShape s;
  s.vocab_size = s.num_classes = p + 1;
  s.max_len = 3;
  return s;
}

class ModularSource : public DataSource {
 public:
  ModularSource(std::size_t p, ModularOp op, double train_fraction, std::uint64_t split_seed) : p_(p), op_(op) {
    std::vector<std::uint32_t> pairs(p * p);
    std::iota(pairs.begin(), pairs.end(), 0u);
    Generator gen(split_seed);
    for (std::size_t i = pairs.size() - 1; i > 0; --i) std::swap(pairs[i], pairs[gen.next_below(i + 1)]);  // Fisher-Yates
    const std::size_t train = std::clamp<std::size_t>(static_cast<std::size_t>(std::llround(train_fraction * static_cast<double>(pairs.size()))), 1,
                                                      pairs.size() - 1);
    train_.assign(pairs.begin(), pairs.begin() + static_cast<std::ptrdiff_t>(train));
    held_out_.assign(pairs.begin() + static_cast<std::ptrdiff_t>(train), pairs.end());
    std::sort(train_.begin(), train_.end());  // the order of (a, b): a batch of the whole split is the same whatever the seed drew
    std::sort(held_out_.begin(), held_out_.end());
  }
  DataShape shape() const override { return modular_shape(p_); }
  Batch sample(TaskSplit split, std::size_t size, Generator& gen) const override {
    const std::vector<std::uint32_t>& pool = split == TaskSplit::train ? train_ : held_out_;
    if (size >= pool.size()) return batch(pool, 0, pool.size());  // full batch: each example once
    std::vector<std::uint32_t> drawn;
    for (std::size_t i = 0; i < size; ++i) drawn.push_back(pool[gen.next_below(pool.size())]);
    return batch(drawn, 0, drawn.size());
  }
  std::size_t held_out_batches(std::size_t size) const override { return (held_out_.size() + size - 1) / size; }
  Batch held_out_batch(std::size_t index, std::size_t size) const override {
    const std::size_t first = index * size;
    return batch(held_out_, first, std::min(held_out_.size(), first + size));
  }
  std::string token_label(std::int64_t id, std::size_t) const override { return static_cast<std::size_t>(id) == p_ ? "=" : std::to_string(id); }
  Modular modular() const override { return {p_, op_ == ModularOp::add ? 1 : op_ == ModularOp::sub ? -1 : 0}; }

  // The answer to (a, b).
  std::int64_t answer(std::size_t a, std::size_t b) const {
    switch (op_) {
      case ModularOp::add: return static_cast<std::int64_t>((a + b) % p_);
      case ModularOp::sub: return static_cast<std::int64_t>((a + p_ - b) % p_);
      case ModularOp::mul: return static_cast<std::int64_t>((a * b) % p_);
    }
    return 0;
  }

 private:
  // Pairs [first, last) of `pairs` (a * p + b each) as inputs "a b =" and targets scored at "=" only.
  Batch batch(const std::vector<std::uint32_t>& pairs, std::size_t first, std::size_t last) const {
    std::vector<std::int64_t> input, target;
    for (std::size_t i = first; i < last; ++i) {
      const std::size_t a = pairs[i] / p_, b = pairs[i] % p_;
      input.insert(input.end(), {static_cast<std::int64_t>(a), static_cast<std::int64_t>(b), static_cast<std::int64_t>(p_)});
      target.insert(target.end(), {kIgnore, kIgnore, answer(a, b)});
    }
    const std::size_t rows = last - first;
    return Batch{from_indices(input, {rows, 3}), from_indices(target, {rows, 3}), {}, {}, {}};
  }

  std::size_t p_;
  ModularOp op_;
  std::vector<std::uint32_t> train_, held_out_;
};

class ModularTask {
 public:
  static constexpr const char* kName = "modular";
  static constexpr const char* kDescription = "(a op b) mod p for every pair, written \"a b =\" (grokking: Power et al. 2022, Nanda et al. 2023)";
  static constexpr bool kHeldOutSplit = true;
  struct Options {
    std::size_t p = 113;
    ModularOp op = ModularOp::add;
    double train_fraction = 0.3;
    std::size_t split_seed = 0;
  };
  static Schema<Options> options_schema() {
    Schema<Options> s;
    s.field("p", &Options::p, "the modulus; the numbers 0 .. p-1 are tokens, then \"=\" (its p^2 examples are kept in memory)", Range::closed(2, 4096));
    s.choice("op", &Options::op, modular_op_names(), "the operation: add, sub or mul, modulo p");
    s.field("train_fraction", &Options::train_fraction, "the share of the p^2 pairs that trains; the rest is held out", Range::open(0.0, 1.0));
    s.field("split_seed", &Options::split_seed, "the seed of the shuffle that splits the pairs (the same seed, the same split)");
    return s;
  }
  static std::vector<TaskFormat> layouts(const Options&) { return {TaskFormat::causal_lm}; }
  static DataShape data_shape(const Options& o, TaskFormat) { return modular_shape(o.p); }
  static std::unique_ptr<DataSource> source(const Options& o, TaskFormat) {
    return std::make_unique<ModularSource>(o.p, o.op, o.train_fraction, o.split_seed);
  }
};
ATTNLAB_REGISTER_TASK(ModularTask);

}  // namespace

}  // namespace attnlab::data
