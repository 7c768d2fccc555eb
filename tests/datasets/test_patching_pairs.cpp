// Clean/corrupted pairs for activation patching: the corrupted answer differs from the clean one at the
// scored position, each batch says so in its targets, and every example of a set shares one layout.
#include <gtest/gtest.h>

#include "datasets/source.hpp"

namespace attnlab::data {
namespace {

struct Case {
  std::string name;
  TaskFormat format;
  ToyTaskOptions options;
};

std::vector<Case> cases() {
  ToyTaskOptions induction;
  induction.name = "induction", induction.length = 8, induction.symbols = 16, induction.gap = 4;
  ToyTaskOptions mqar;
  mqar.name = "mqar", mqar.pairs = 4, mqar.symbols = 16;
  ToyTaskOptions zoology = mqar;
  zoology.sequence_length = 32, zoology.random_filler = false;
  ToyTaskOptions sort;
  sort.name = "sort", sort.length = 6, sort.min_length = 3, sort.symbols = 8;
  ToyTaskOptions reverse = sort;
  reverse.name = "reverse";
  return {{"induction", TaskFormat::causal_lm, induction}, {"mqar", TaskFormat::causal_lm, mqar},
          {"mqar_zoology", TaskFormat::causal_lm, zoology}, {"mqar_zoology_tagging", TaskFormat::tagging, zoology},
          {"sort", TaskFormat::causal_lm, sort},           {"reverse_seq2seq", TaskFormat::seq2seq, reverse},
          {"reverse_tagging", TaskFormat::tagging, reverse}};
}

std::vector<std::int64_t> values(const Tensor& t) { return std::vector<std::int64_t>(t.data<std::int64_t>(), t.data<std::int64_t>() + t.numel()); }

TEST(PatchingPairs, TheAnswerChangesAtTheScoredPositionAndNowhereElseInTheLayout) {
  for (const Case& c : cases()) {
    TaskConfig config;
    config.name = c.options.name;
    config.toy = c.options;
    const auto source = make_data_source(config, c.format);
    Generator gen(5);
    const PatchingPairs pairs = source->patching_pairs(16, gen);
    ASSERT_EQ(pairs.size(), 16u) << c.name;
    EXPECT_FALSE(pairs.corruption.empty());
    ASSERT_EQ(pairs.clean.input.shape(), pairs.corrupted.input.shape()) << c.name;
    const std::vector<std::int64_t> clean = values(pairs.clean.input), corrupted = values(pairs.corrupted.input);
    const std::vector<std::int64_t> clean_target = values(pairs.clean.target), corrupted_target = values(pairs.corrupted.target);
    const std::size_t t = pairs.clean.target.size(1), width = pairs.clean.input.size(1);
    std::size_t differing_inputs = 0;
    for (std::size_t i = 0; i < pairs.size(); ++i) {
      EXPECT_NE(pairs.clean_answer[i], pairs.corrupted_answer[i]) << c.name;
      EXPECT_EQ(clean_target[i * t + pairs.position[i]], pairs.clean_answer[i]) << c.name << " example " << i;
      EXPECT_EQ(corrupted_target[i * t + pairs.position[i]], pairs.corrupted_answer[i]) << c.name << " example " << i;
      for (std::size_t j = 0; j < width; ++j) {
        differing_inputs += clean[i * width + j] != corrupted[i * width + j];
        // One layout: pads (and the separator) sit where the first example has them.
        const bool special = clean[i * width + j] <= kSep, first_special = clean[j] <= kSep;
        if (c.options.name != "mqar" || c.options.sequence_length == 0) EXPECT_EQ(special, first_special) << c.name << " example " << i << " position " << j;
      }
    }
    EXPECT_GT(differing_inputs, 0u) << c.name;
  }
}

TEST(PatchingPairs, TasksWithoutAKnownCorruptionHaveNone) {
  TaskConfig config;
  config.name = "majority";
  config.toy.name = "majority";
  Generator gen(1);
  EXPECT_EQ(make_data_source(config, TaskFormat::classification)->patching_pairs(8, gen).size(), 0u);
}

}  // namespace
}  // namespace attnlab::data
