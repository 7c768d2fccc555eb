// Toy tasks: each answer is right in each layout, splits never share a source, draws are seeded, and
// the metrics count what they should.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "datasets/toy_tasks.hpp"

namespace attnlab::data {
namespace {

std::unique_ptr<SequenceTask> task(const std::string& name, std::size_t length = 6, std::size_t symbols = 5) {
  ToyTaskOptions o;
  o.name = name;
  o.length = length;
  o.symbols = symbols;
  o.pairs = 3;
  o.queries = 4;
  return make_toy_task(o);
}

TEST(ToyTasks, TaggingAnswersAreTheTransformedSource) {
  Generator gen(1);
  for (const char* name : {"copy", "reverse", "sort"}) {
    auto t = task(name);
    for (int i = 0; i < 20; ++i) {
      const SequenceExample e = t->example(TaskSplit::train, TaskFormat::tagging, gen);
      std::vector<std::int64_t> expected = e.input;
      if (std::string(name) == "reverse") std::reverse(expected.begin(), expected.end());
      if (std::string(name) == "sort") std::sort(expected.begin(), expected.end());
      EXPECT_EQ(e.target, expected) << name;
      for (std::int64_t x : e.input) EXPECT_TRUE(x >= kFirstSymbol && x < static_cast<std::int64_t>(t->vocab_size()));
    }
  }
}

TEST(ToyTasks, CausalLayoutScoresOnlyTheAnswer) {
  Generator gen(2);
  auto t = task("reverse", 4);
  const SequenceExample e = t->example(TaskSplit::train, TaskFormat::causal_lm, gen);
  ASSERT_EQ(e.input.size(), 8u);  // 4 source, SEP, 3 answer tokens fed back
  EXPECT_EQ(e.input[4], kSep);
  for (std::size_t i = 0; i < 4; ++i) EXPECT_EQ(e.target[i], kIgnore);  // source tokens and SEP are not scored
  for (std::size_t i = 0; i < 4; ++i) EXPECT_EQ(e.target[4 + i], e.input[3 - i]);  // the reversed source
  for (std::size_t i = 0; i + 1 < 4; ++i) EXPECT_EQ(e.input[5 + i], e.target[4 + i]);  // teacher forcing
  EXPECT_EQ(t->max_length(TaskFormat::causal_lm), 8u);
}

TEST(ToyTasks, RecallAnswersEachQueryWithItsValue) {
  Generator gen(3);
  auto t = task("mqar", 0, 8);
  for (int i = 0; i < 20; ++i) {
    const SequenceExample e = t->example(TaskSplit::train, TaskFormat::causal_lm, gen);
    ASSERT_EQ(e.input.size(), 6u + 8u);  // 3 pairs, SEP, 4 queries and answers less the last
    std::set<std::int64_t> keys;
    for (std::size_t p = 0; p < 3; ++p) keys.insert(e.input[2 * p]);
    EXPECT_EQ(keys.size(), 3u);  // distinct keys
    for (std::size_t q = 0; q < 4; ++q) {
      const std::size_t at = 6 + 2 * q;  // the position whose next token is query q's key
      EXPECT_EQ(e.target[at], kIgnore);
      const std::int64_t key = e.input[at + 1], value = e.target[at + 1];
      std::int64_t expected = -1;
      for (std::size_t p = 0; p < 3; ++p)
        if (e.input[2 * p] == key) expected = e.input[2 * p + 1];
      EXPECT_EQ(value, expected);
    }
  }
  EXPECT_THROW(task("mqar", 0, 2), std::invalid_argument);  // 3 distinct keys from 2 symbols
  EXPECT_THROW(task("mqar")->example(TaskSplit::train, TaskFormat::tagging, gen), std::invalid_argument);
}

TEST(ToyTasks, InductionRepeatsTheSegmentAndScoresAllButItsFirstToken) {
  Generator gen(4);
  auto t = task("induction", 5, 9);
  const SequenceExample e = t->example(TaskSplit::train, TaskFormat::causal_lm, gen);
  ASSERT_EQ(e.input.size(), 10u);
  for (std::size_t i = 0; i < 6; ++i) EXPECT_EQ(e.target[i], kIgnore);  // the segment, and its first repeat token
  for (std::size_t i = 1; i < 5; ++i) EXPECT_EQ(e.target[5 + i], e.input[i]);
}

TEST(ToyTasks, InductionWithAGapPlacesTheSegmentAtVaryingOffsetsWithDistinctSymbols) {
  ToyTaskOptions o;
  o.name = "induction", o.length = 5, o.symbols = 9, o.gap = 4;
  auto t = make_toy_task(o);
  Generator gen(7);
  std::set<std::size_t> offsets;
  for (int n = 0; n < 200; ++n) {
    const SequenceExample e = t->example(TaskSplit::train, TaskFormat::causal_lm, gen);
    ASSERT_EQ(e.input.size(), 9u + 1u + 4u);  // pad-and-segment window, separator, repeat minus its last token
    std::size_t offset = 0;
    while (e.input[offset] == kPad) ++offset;
    ASSERT_LE(offset, 4u);
    offsets.insert(offset);
    const std::vector<std::int64_t> segment(e.input.begin() + static_cast<std::ptrdiff_t>(offset),
                                            e.input.begin() + static_cast<std::ptrdiff_t>(offset + 5));
    EXPECT_EQ(std::set<std::int64_t>(segment.begin(), segment.end()).size(), 5u) << "symbols repeat in the segment";
    for (std::size_t i = 0; i < 9; ++i)
      if (i < offset || i >= offset + 5) EXPECT_EQ(e.input[i], kPad);
    EXPECT_EQ(e.input[9], kSep);
    for (std::size_t i = 0; i < 10; ++i) EXPECT_EQ(e.target[i], kIgnore);  // the window, and the repeat's first token
    for (std::size_t i = 1; i < 5; ++i) EXPECT_EQ(e.target[9 + i], segment[i]);
  }
  EXPECT_EQ(offsets.size(), 5u) << "every offset 0..gap occurs";
  o.symbols = 4;
  EXPECT_THROW(make_toy_task(o), std::invalid_argument);  // 5 distinct symbols out of 4
  o.name = "copy", o.symbols = 9;
  EXPECT_THROW(make_toy_task(o), std::invalid_argument);  // gap is induction's alone
}

TEST(ToyTasks, MajorityLabelsTheMostFrequentSymbol) {
  Generator gen(5);
  auto t = task("majority", 7, 3);
  EXPECT_EQ(t->num_classes(), 3u);
  for (int i = 0; i < 20; ++i) {
    const SequenceExample e = t->example(TaskSplit::train, TaskFormat::classification, gen);
    std::vector<int> counts(3, 0);
    for (std::int64_t x : e.input) ++counts[static_cast<std::size_t>(x - kFirstSymbol)];
    EXPECT_EQ(e.target[0], std::max_element(counts.begin(), counts.end()) - counts.begin());
  }
}

TEST(ToyTasks, SplitsNeverShareASourceAndDrawsAreSeeded) {
  auto t = task("sort", 5, 4);
  Generator gen(6);
  std::set<std::vector<std::int64_t>> train, held;
  for (int i = 0; i < 400; ++i) train.insert(t->example(TaskSplit::train, TaskFormat::tagging, gen).input);
  for (int i = 0; i < 100; ++i) held.insert(t->example(TaskSplit::held_out, TaskFormat::tagging, gen).input);
  for (const auto& s : held) EXPECT_EQ(train.count(s), 0u);
  EXPECT_GT(held.size(), 10u);
  Generator a(7), b(7);
  EXPECT_EQ(t->batch(TaskSplit::train, TaskFormat::tagging, 8, a).input.to_vector(),
            t->batch(TaskSplit::train, TaskFormat::tagging, 8, b).input.to_vector());
}

TEST(ToyTasks, BadOptionsNameTheFix) {
  try {
    task("revers");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("is not among [copy, induction, majority, mqar, reverse, sort]"), std::string::npos);
  }
  EXPECT_THROW(task("copy", 0), std::invalid_argument);
  EXPECT_THROW(task("copy", 4, 1), std::invalid_argument);
}

TEST(ToyTasks, MetricsCountScoredTokensAndWholeSequences) {
  // Two sequences of three positions over 2 classes; position 0 of each is not scored.
  const Tensor logits = from_vector({9, 0, /**/ 0, 9, /**/ 9, 0, /**/ 0, 9, /**/ 0, 9, /**/ 0, 9}, {2, 3, 2});
  const Tensor target = from_indices({kIgnore, 1, 0, kIgnore, 1, 0}, {2, 3});
  const SequenceMetrics m = sequence_metrics(logits, target);
  EXPECT_EQ(m.scored_tokens, 4u);
  EXPECT_DOUBLE_EQ(m.token_accuracy, 0.75);
  EXPECT_DOUBLE_EQ(m.exact_match, 0.5);
}

}  // namespace
}  // namespace attnlab::data
