// copy, reverse and sort (one file each beside this one): the answer is a function of the source, token
// for token. They share their options (task.length, min_length, symbols, held_out_fraction), layouts and
// corruption; each says only how its answer follows from the source.
#pragma once

#include <algorithm>

#include "datasets/toy_tasks.hpp"

namespace attnlab::data {

struct TransformOptions : ToyOptions {
  std::size_t length = 8;      // source tokens
  std::size_t min_length = 0;  // sources of min_length to length tokens; 0: all of `length`
};

class TransformTask : public SequenceTask {
 public:
  using Options = TransformOptions;
  static Schema<Options> options_schema() {
    Schema<Options> s;
    s.field("length", &Options::length, "source tokens (the longest, with min_length)", Range::at_least(1));
    s.field("min_length", &Options::min_length,
            "sources of min_length to length tokens, drawn uniformly; batches are padded and carry padding masks. 0 means every "
            "source has `length` tokens");
    toy_fields(s);
    return s;
  }
  static void check(const Options& o, const ConfigNode& node) {
    if (o.min_length > o.length) {
      node.fail("min_length", "task.min_length (" + std::to_string(o.min_length) + ") must not exceed task.length (" +
                                  std::to_string(o.length) + "): sources have min_length to length tokens");
    }
  }

  explicit TransformTask(const Options& o) : SequenceTask(o.held_out_fraction), o_(o) {}
  std::size_t vocab_size() const override { return static_cast<std::size_t>(kFirstSymbol) + o_.symbols; }
  std::vector<TaskFormat> formats() const override { return {TaskFormat::tagging, TaskFormat::causal_lm, TaskFormat::seq2seq}; }
  bool variable_length() const override { return o_.min_length != 0 && o_.min_length < o_.length; }
  Problem problem(Generator& gen) const override {
    const std::size_t shortest = variable_length() ? o_.min_length : o_.length;
    return of_source(random_symbols(shortest + gen.next_below(o_.length - shortest + 1), o_.symbols, gen));
  }

 protected:
  // The answer to `source` (copy: itself; reverse: reversed; sort: sorted).
  virtual std::vector<std::int64_t> answer_of(std::vector<std::int64_t> source) const = 0;
  std::size_t source_length() const override { return o_.length; }
  std::size_t answer_length() const override { return o_.length; }
  // A patching set has one length, so that its sources (and the changed token) line up.
  Problem problem_like(const Problem& first, Generator& gen) const override { return of_source(random_symbols(first.source.size(), o_.symbols, gen)); }
  // The middle source token changed to another symbol; scored at the first answer token that changes.
  // The corrupted example reads its own answer (teacher forcing): its inputs differ from the clean ones
  // at that source token and only after the scored position.
  bool corrupt(const Problem& clean, Generator& gen, Corruption& out) const override {
    if (o_.symbols < 2) return false;
    const std::size_t c = clean.source.size() / 2;
    std::vector<std::int64_t> source = clean.source;
    source[c] = kFirstSymbol + (clean.source[c] - kFirstSymbol + 1 + static_cast<std::int64_t>(gen.next_below(o_.symbols - 1))) %
                                   static_cast<std::int64_t>(o_.symbols);
    out.problem = of_source(std::move(source));
    out.index = 0;
    while (out.problem.answer[out.index] == clean.answer[out.index]) ++out.index;
    out.description = "source token " + std::to_string(c) + " changed to another symbol";
    return true;
  }

 private:
  Problem of_source(std::vector<std::int64_t> source) const {
    Problem p;
    p.source = std::move(source);
    p.answer = answer_of(p.source);
    return p;
  }
  Options o_;
};

}  // namespace attnlab::data
