// Toy tasks: each answer is right in each layout, splits never share a source, draws are seeded, and
// the metrics count what they should.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "datasets/toy_tasks.hpp"

namespace attnlab::data {
namespace {

// Task `name` with `length` and `symbols` (mqar: 3 pairs, 4 queries), each key given only to a task that
// reads it.
std::unique_ptr<SequenceTask> task(const std::string& name, std::size_t length = 6, std::size_t symbols = 5) {
  const OptionsSpec& spec = TaskRegistry::instance().find(name).options;
  std::string yaml = "{symbols: " + std::to_string(symbols);
  if (spec.reads("length")) yaml += ", length: " + std::to_string(length);
  if (spec.reads("pairs")) yaml += ", pairs: 3, queries: 4";
  return make_toy_task(name, yaml + "}");
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
  EXPECT_THROW(task("mqar", 0, 2), ConfigError);  // 3 distinct keys from 2 symbols
  EXPECT_THROW(task("mqar")->example(TaskSplit::train, TaskFormat::tagging, gen), std::invalid_argument);
}

std::unique_ptr<SequenceTask> zoology_mqar(std::size_t sequence_length, std::size_t pairs, std::size_t queries,
                                           std::size_t symbols, double held_out_fraction = 0.1) {
  const auto n = [](auto v) { return std::to_string(v); };
  return make_toy_task("mqar", "{sequence_length: " + n(sequence_length) + ", pairs: " + n(pairs) + ", queries: " + n(queries) +
                                   ", symbols: " + n(symbols) + ", held_out_fraction: " + n(held_out_fraction) + "}");
}

// The scored positions of a causal_lm example.
std::vector<std::size_t> scored_positions(const SequenceExample& e) {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < e.target.size(); ++i)
    if (e.target[i] != kIgnore) out.push_back(i);
  return out;
}

TEST(ToyTasks, RecallInZoologysLayoutQueriesEachKeyOnceAndScoresOnlyItsValue) {
  struct Case {
    std::size_t length, pairs, queries, symbols;
  };
  Generator gen(8);
  for (const Case c : {Case{64, 8, 0, 32}, Case{64, 4, 0, 32}, Case{21, 3, 2, 5}}) {
    auto t = zoology_mqar(c.length, c.pairs, c.queries, c.symbols);
    const std::size_t queries = c.queries == 0 ? c.pairs : c.queries, context = 2 * c.pairs;
    const auto first_key = kFirstSymbol, first_value = kFirstSymbol + static_cast<std::int64_t>(c.symbols);
    const auto end = kFirstSymbol + static_cast<std::int64_t>(2 * c.symbols);
    EXPECT_EQ(t->max_length(TaskFormat::causal_lm), c.length);
    std::size_t values_read = 0, queries_seen = 0;
    for (int i = 0; i < 50; ++i) {
      const SequenceExample e = t->example(i % 2 ? TaskSplit::train : TaskSplit::held_out, TaskFormat::causal_lm, gen);
      ASSERT_EQ(e.input.size(), c.length);
      ASSERT_EQ(e.target.size(), c.length);
      // The pairs: distinct keys from the key range, distinct values from the value range.
      std::map<std::int64_t, std::int64_t> value_of;
      std::set<std::int64_t> values;
      for (std::size_t p = 0; p < c.pairs; ++p) {
        const std::int64_t key = e.input[2 * p], value = e.input[2 * p + 1];
        EXPECT_TRUE(key >= first_key && key < first_value) << key;
        EXPECT_TRUE(value >= first_value && value < end) << value;
        value_of[key] = value;
        values.insert(value);
      }
      EXPECT_EQ(value_of.size(), c.pairs);
      EXPECT_EQ(values.size(), c.pairs);
      EXPECT_EQ(e.input[context], kSep);
      // Scored: exactly one position per query, each reading a key of the pairs (a different one each
      // time), an odd number of tokens after the SEP, its target that key's value.
      const std::vector<std::size_t> scored = scored_positions(e);
      ASSERT_EQ(scored.size(), queries);
      std::set<std::int64_t> queried;
      for (std::size_t at : scored) {
        ASSERT_GT(at, context);
        EXPECT_EQ((at - context) % 2, 1u) << at;
        const std::int64_t key = e.input[at];
        ASSERT_EQ(value_of.count(key), 1u) << "position " << at << " reads " << key << ", not a key of the pairs";
        EXPECT_EQ(e.target[at], value_of[key]);
        if (at + 1 < c.length) values_read += e.input[at + 1] == value_of[key];
        ++queries_seen;
        queried.insert(key);
      }
      EXPECT_EQ(queried.size(), queries);
      // Everything after the SEP is a task symbol (filler is random keys and values, never PAD or SEP).
      for (std::size_t j = context + 1; j < c.length; ++j) EXPECT_TRUE(e.input[j] >= first_key && e.input[j] < end) << j;
    }
    // The answers stay unread: what follows a query is random, its value only by chance (1 in 2 * symbols;
    // teacher forcing would read every one).
    EXPECT_LT(values_read, queries_seen / 4) << values_read << " of " << queries_seen << " values were read back";
  }
}

TEST(ToyTasks, RecallInZoologysLayoutPlacesQueriesByAPowerLawInRandomPairOrder) {
  // 8 queries in 24 slots: with p(g) ~ 1/(g+1) the first slot is nearly always taken and the last
  // seldom; uniform slots would take each a third of the time.
  auto t = zoology_mqar(64, 8, 0, 32);
  Generator gen(9);
  // Which pair the earliest query asks must not follow from pair order: each of the 8 about an eighth
  // of the time (handing the slots out in pair order makes it the first pair 27% of the time).
  std::vector<int> taken(24, 0), first_query_asks(8, 0);
  const int n = 400;
  for (int i = 0; i < n; ++i) {
    const SequenceExample e = t->example(TaskSplit::train, TaskFormat::causal_lm, gen);
    const std::vector<std::size_t> scored = scored_positions(e);
    for (std::size_t at : scored) ++taken[(at - 17) / 2];
    for (std::size_t p = 0; p < 8; ++p)
      if (e.input[2 * p] == e.input[scored.front()]) ++first_query_asks[p];
  }
  EXPECT_GT(taken[0], n * 8 / 10);
  EXPECT_LT(taken[23], n / 5);
  EXPECT_GT(taken[23], 0);  // yet every slot can be drawn
  for (std::size_t g = 0; g + 4 < 24; g += 4) EXPECT_GT(taken[g], taken[g + 4]) << g;
  for (std::size_t p = 0; p < 8; ++p) EXPECT_TRUE(first_query_asks[p] > n / 16 && first_query_asks[p] < n * 3 / 16) << p;
}

TEST(ToyTasks, RecallInZoologysLayoutHoldsOutWholeContexts) {
  // 2 pairs over 4 symbols: 12 * 12 contexts, so a split keyed on anything but the pairs (the filler,
  // the query slots) would put the same pairs into both splits.
  auto t = zoology_mqar(12, 2, 0, 4, 0.3);
  Generator gen(10);
  auto context = [](const SequenceExample& e) { return std::vector<std::int64_t>(e.input.begin(), e.input.begin() + 4); };
  std::set<std::vector<std::int64_t>> train, held;
  for (int i = 0; i < 2000; ++i) train.insert(context(t->example(TaskSplit::train, TaskFormat::causal_lm, gen)));
  for (int i = 0; i < 500; ++i) held.insert(context(t->example(TaskSplit::held_out, TaskFormat::causal_lm, gen)));
  for (const auto& s : held) EXPECT_EQ(train.count(s), 0u);
  EXPECT_GT(held.size(), 10u);
  EXPECT_GT(train.size(), 60u);
}

// Zoology's Figure 2 setting: 64 tokens, 8 pairs of 32-symbol ranges, PAD between the queries.
const char* const kZoologyPad = "{sequence_length: 64, pairs: 8, symbols: 32, random_filler: false}";

TEST(ToyTasks, RecallInZoologysLayoutCanFillWithPad) {
  // random_filler off (zoology's random_non_queries=False): after SEP the model reads the query keys
  // and PAD, nothing else, and the scoring is the same.
  auto t = make_toy_task("mqar", kZoologyPad);
  Generator gen(11);
  for (int i = 0; i < 20; ++i) {
    const SequenceExample e = t->example(TaskSplit::train, TaskFormat::causal_lm, gen);
    const std::vector<std::size_t> scored = scored_positions(e);
    ASSERT_EQ(scored.size(), 8u);
    std::size_t pads = 0;
    for (std::size_t j = 17; j < 64; ++j) {
      const bool query = std::find(scored.begin(), scored.end(), j) != scored.end();
      EXPECT_EQ(e.input[j] == kPad, !query) << j;
      pads += e.input[j] == kPad;
    }
    EXPECT_EQ(pads, 64u - 17u - 8u);
    for (std::size_t at : scored) EXPECT_EQ(std::find(e.input.begin(), e.input.begin() + 16, e.input[at]) - e.input.begin() + 1,
                                            std::find(e.input.begin(), e.input.begin() + 16, e.target[at]) - e.input.begin());
  }
}

TEST(ToyTasks, RecallInZoologysLayoutTagsTheCausalLayout) {
  // A bidirectional model (linformer's only kind) can run Zoology's MQAR: it reads the same tokens as
  // the causal model, which never include an answer, and is scored at the same places.
  auto t = make_toy_task("mqar", kZoologyPad);
  EXPECT_EQ(t->max_length(TaskFormat::tagging), 64u);
  Generator a(5), b(5);
  for (int i = 0; i < 20; ++i) {
    const SequenceExample causal = t->example(TaskSplit::train, TaskFormat::causal_lm, a);
    const SequenceExample tagged = t->example(TaskSplit::train, TaskFormat::tagging, b);
    EXPECT_EQ(tagged.input, causal.input);
    EXPECT_EQ(tagged.target, causal.target);
    for (std::size_t at : scored_positions(tagged))
      EXPECT_EQ(std::count(tagged.input.begin(), tagged.input.end(), tagged.target[at]), 1) << "the value appears once, among the pairs";
  }
  // The compact layout reads every value back after its query, so it stays causal only.
  const auto formats = make_toy_task("mqar", "{pairs: 8, symbols: 32}")->formats();
  EXPECT_EQ(std::count(formats.begin(), formats.end(), TaskFormat::tagging), 0);
}

TEST(ToyTasks, RecallInZoologysLayoutRejectsWhatDoesNotFit) {
  try {
    zoology_mqar(31, 8, 8, 32);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("task.sequence_length (31) is too short for 8 pairs and 8 queries"), std::string::npos)
        << e.what();
  }
  EXPECT_NO_THROW(zoology_mqar(32, 8, 8, 32));
  EXPECT_THROW(zoology_mqar(64, 4, 6, 32), ConfigError);  // more queries than keys
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
  auto t = make_toy_task("induction", "{length: 5, symbols: 9, gap: 4}");
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
    for (std::size_t i = 0; i < 9; ++i) {
      if (i < offset || i >= offset + 5) {
        EXPECT_EQ(e.input[i], kPad);
      }
    }
    EXPECT_EQ(e.input[9], kSep);
    for (std::size_t i = 0; i < 10; ++i) EXPECT_EQ(e.target[i], kIgnore);  // the window, and the repeat's first token
    for (std::size_t i = 1; i < 5; ++i) EXPECT_EQ(e.target[9 + i], segment[i]);
  }
  EXPECT_EQ(offsets.size(), 5u) << "every offset 0..gap occurs";
  EXPECT_THROW(make_toy_task("induction", "{length: 5, symbols: 4, gap: 4}"), ConfigError);  // 5 distinct symbols out of 4
}  // gap is induction's alone: the config refuses it for other tasks (test_config.cpp)

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

TEST(ToyTasks, Seq2SeqReadsSepAndTheAnswerAndPredictsTheAnswerAndEos) {
  Generator gen(11);
  for (const char* name : {"copy", "reverse", "sort"}) {
    auto t = task(name);
    EXPECT_EQ(t->eos(), static_cast<std::int64_t>(t->vocab_size()));  // the id after the symbols
    for (int i = 0; i < 10; ++i) {
      const SequenceExample e = t->example(TaskSplit::train, TaskFormat::seq2seq, gen);
      std::vector<std::int64_t> answer = e.input;
      if (std::string(name) == "reverse") std::reverse(answer.begin(), answer.end());
      if (std::string(name) == "sort") std::sort(answer.begin(), answer.end());
      std::vector<std::int64_t> decoder{kSep}, target = answer;
      decoder.insert(decoder.end(), answer.begin(), answer.end());
      target.push_back(t->eos());
      EXPECT_EQ(e.decoder_input, decoder) << name;
      EXPECT_EQ(e.target, target) << name;
    }
  }
}

TEST(ToyTasks, MinLengthVariesSourcesAndPadsBatches) {
  const auto t = make_toy_task("reverse", "{length: 7, min_length: 3}");
  EXPECT_TRUE(t->variable_length());
  EXPECT_EQ(t->max_length(TaskFormat::seq2seq), 7u);
  EXPECT_EQ(t->max_target_length(), 8u);
  Generator gen(12);
  std::set<std::size_t> lengths;
  for (int i = 0; i < 200; ++i) lengths.insert(t->example(TaskSplit::train, TaskFormat::seq2seq, gen).input.size());
  EXPECT_EQ(lengths, (std::set<std::size_t>{3, 4, 5, 6, 7}));
  const Batch b = t->batch(TaskSplit::train, TaskFormat::seq2seq, 16, gen);
  ASSERT_TRUE(b.key_padding_mask.defined());
  ASSERT_TRUE(b.decoder_padding_mask.defined());
  for (std::size_t r = 0; r < 16; ++r) {
    std::size_t n = 0;  // the source's real length
    while (n < b.input.size(1) && b.key_padding_mask.at({r, n}) == 0) ++n;
    for (std::size_t i = n; i < b.input.size(1); ++i) {
      EXPECT_EQ(b.input.at({r, i}), kPad);
      EXPECT_EQ(b.key_padding_mask.at({r, i}), 1.0);
    }
    for (std::size_t i = 0; i < n; ++i) EXPECT_EQ(b.target.at({r, i}), b.input.at({r, n - 1 - i}));  // reversed
    EXPECT_EQ(b.target.at({r, n}), t->eos());
    for (std::size_t i = n + 1; i < b.target.size(1); ++i) EXPECT_EQ(b.target.at({r, i}), kIgnore);
    for (std::size_t i = 0; i < b.decoder_input.size(1); ++i) EXPECT_EQ(b.decoder_padding_mask.at({r, i}), i > n ? 1.0 : 0.0);
  }
  // Tagging pads too: the padded positions are neither read (mask) nor scored.
  const Batch tagged = t->batch(TaskSplit::train, TaskFormat::tagging, 16, gen);
  ASSERT_TRUE(tagged.key_padding_mask.defined());
  for (std::size_t i = 0; i < tagged.target.numel(); ++i) {
    if (tagged.key_padding_mask.to_vector()[i] != 0) {
      EXPECT_EQ(tagged.target.to_vector()[i], kIgnore);
    }
  }
}

TEST(ToyTasks, FixedLengthBatchesCarryNoMask) {
  Generator gen(13);
  const Batch b = task("copy")->batch(TaskSplit::train, TaskFormat::seq2seq, 4, gen);
  EXPECT_FALSE(b.key_padding_mask.defined());
  EXPECT_FALSE(b.decoder_padding_mask.defined());
  EXPECT_EQ(b.decoder_input.size(1), 7u);
}

TEST(ToyTasks, BadOptionsNameTheFix) {
  try {
    task("revers");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("task 'revers' is not among [char_text, copy, fashion_mnist"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("did you mean 'reverse'?"), std::string::npos) << e.what();
  }
  EXPECT_THROW(task("copy", 0), ConfigError);
  EXPECT_THROW(task("copy", 4, 1), ConfigError);
  try {
    make_toy_task("copy", "{length: 4, min_length: 5}");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("task.min_length (5) must not exceed task.length (4)"), std::string::npos) << e.what();
  }
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
