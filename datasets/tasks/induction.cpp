// The induction task: a random segment, then the same segment again (induction heads, Olsson et al. 2022).
#include <algorithm>

#include "datasets/toy_tasks.hpp"

namespace attnlab::data {

// Induction heads: a random segment, then the same segment again; every token of the repeat but the
// first can be predicted by finding the earlier occurrence of the current token and copying its successor.
// With gap > 0 the first segment sits at a random offset among `gap` pad tokens, so the distance between
// the two occurrences varies and a fixed positional offset cannot stand in for matching content; its
// symbols are then distinct, so that every token's successor is unambiguous.
class InductionTask : public SequenceTask, public ToyTaskRegistration<InductionTask> {
 public:
  static constexpr const char* kName = "induction";
  static constexpr const char* kDescription = "a segment of symbols, then the same again (induction heads)";
  struct Options : ToyOptions {
    std::size_t length = 8;  // the segment's tokens
    std::size_t gap = 0;     // pad positions around the first segment, which sits at a random offset among them
  };
  static Schema<Options> options_schema() {
    Schema<Options> s;
    s.field("length", &Options::length, "tokens in the repeated segment (at least 2: the second copy's first token cannot be "
                                        "predicted, so a segment of 1 would score nothing)", Range::at_least(2));
    s.field("gap", &Options::gap,
            "pad positions around the first segment, which sits at a random offset among them, so the distance between the "
            "occurrences varies (the segment's symbols are then distinct; needs symbols >= length)");
    toy_fields(s);
    return s;
  }
  static void check(const Options& o, const ConfigNode& node) {
    if (o.gap > 0 && o.symbols < o.length) {
      node.fail("gap", "task.gap > 0 draws the segment's " + std::to_string(o.length) + " symbols without repeats: task.symbols (" +
                           std::to_string(o.symbols) + ") must be at least task.length; raise task.symbols or set task.gap: 0");
    }
  }

  explicit InductionTask(const Options& o) : SequenceTask(o.held_out_fraction), o_(o) {}
  std::string name() const override { return kName; }
  std::size_t vocab_size() const override { return static_cast<std::size_t>(kFirstSymbol) + o_.symbols; }
  std::vector<TaskFormat> formats() const override { return {TaskFormat::causal_lm}; }
  Problem problem(Generator& gen) const override {
    if (o_.gap == 0) return placed(random_symbols(o_.length, o_.symbols, gen), 0);
    std::vector<std::int64_t> segment = distinct_segment(gen);
    return placed(std::move(segment), gen.next_below(o_.gap + 1));
  }

 protected:
  // The first copy replaced by its own symbols in another order: the repeat reads as before, but what
  // follows the middle token of the repeat in the first copy (its induction answer) has changed. Only
  // segments where that token occurs once qualify (with gap 0 symbols may repeat), so that the clean and
  // the corrupted answer are each the one successor of its one earlier occurrence.
  bool corrupt(const Problem& clean, Generator& gen, Corruption& out) const override {
    const std::size_t k = o_.length / 2;  // answer index: predicted after reading answer[k - 1]
    if (k < 1 || o_.length < 3) return false;
    if (std::count(clean.answer.begin(), clean.answer.end(), clean.answer[k - 1]) != 1) return false;
    const std::size_t offset = offset_of(clean);
    for (int attempt = 0; attempt < 100; ++attempt) {
      std::vector<std::int64_t> shuffled(clean.answer);
      for (std::size_t i = shuffled.size(); i > 1; --i) std::swap(shuffled[i - 1], shuffled[gen.next_below(i)]);
      const auto at = std::find(shuffled.begin(), shuffled.end(), clean.answer[k - 1]);
      if (at + 1 >= shuffled.end() || *(at + 1) == clean.answer[k]) continue;
      out.problem = clean;
      std::copy(shuffled.begin(), shuffled.end(), out.problem.source.begin() + static_cast<std::ptrdiff_t>(offset));
      out.problem.read = clean.answer;    // the repeat reads as before
      out.problem.answer[k] = *(at + 1);  // what an induction head reads from the corrupted first copy
      out.index = k;
      out.description = "the first copy of the segment replaced by its symbols in another order";
      return true;
    }
    return false;
  }
  std::size_t source_length() const override { return o_.length + o_.gap; }
  std::size_t answer_length() const override { return o_.length; }
  // A patching set has one offset of the first copy, so that the copies line up.
  Problem problem_like(const Problem& first, Generator& gen) const override {
    if (o_.gap == 0) return problem(gen);
    return placed(distinct_segment(gen), offset_of(first));
  }

 private:
  // o_.length distinct symbols in random order.
  std::vector<std::int64_t> distinct_segment(Generator& gen) const {
    std::vector<std::int64_t> symbols(o_.symbols);
    for (std::size_t i = 0; i < o_.symbols; ++i) symbols[i] = kFirstSymbol + static_cast<std::int64_t>(i);
    for (std::size_t i = 0; i < o_.length; ++i) std::swap(symbols[i], symbols[i + gen.next_below(o_.symbols - i)]);
    symbols.resize(o_.length);
    return symbols;
  }
  // The segment at `offset` among the gap's pads, then its repeat.
  Problem placed(std::vector<std::int64_t> segment, std::size_t offset) const {
    Problem p;
    p.answer = std::move(segment);
    p.source.assign(o_.length + o_.gap, kPad);
    std::copy(p.answer.begin(), p.answer.end(), p.source.begin() + static_cast<std::ptrdiff_t>(offset));
    p.scored.assign(o_.length, true);
    p.scored[0] = false;  // nothing earlier says what follows the separator
    return p;
  }
  static std::size_t offset_of(const Problem& p) {
    const auto first = std::find_if(p.source.begin(), p.source.end(), [](std::int64_t t) { return t != kPad; });
    return static_cast<std::size_t>(first - p.source.begin());
  }
  Options o_;
};
ATTNLAB_REGISTER_TASK(InductionTask);

}  // namespace attnlab::data
