// The modular arithmetic task: every pair once, split into disjoint training and held-out shares of the
// stated size by a seeded shuffle (the same seed, the same split), each example "a b =" answered at "=".
#include <gtest/gtest.h>

#include <set>

#include "datasets/source.hpp"
#include "framework/tensor/random.hpp"

namespace attnlab::data {
namespace {

std::unique_ptr<DataSource> modular(const std::string& options) {
  ComponentChoice c;
  c.name = "modular";
  c.options = ComponentOptions(YAML::Load(options), "task");
  return make_data_source(c, TaskFormat::causal_lm);
}

// Every (a, b) of a batch, checked against its answer under `op`; returned as a * p + b.
std::vector<std::int64_t> pairs_of(const Batch& b, std::int64_t p, char op) {
  std::vector<std::int64_t> out;
  for (std::size_t r = 0; r < b.input.size(0); ++r) {
    const std::int64_t a = b.input.data<std::int64_t>()[r * 3], x = b.input.data<std::int64_t>()[r * 3 + 1];
    EXPECT_EQ(b.input.data<std::int64_t>()[r * 3 + 2], p);  // "="
    const std::int64_t* t = b.target.data<std::int64_t>() + r * 3;
    EXPECT_EQ(t[0], kIgnore);
    EXPECT_EQ(t[1], kIgnore);
    const std::int64_t want = op == '+' ? (a + x) % p : op == '-' ? ((a - x) % p + p) % p : (a * x) % p;
    EXPECT_EQ(t[2], want) << a << op << x;
    out.push_back(a * p + x);
  }
  return out;
}

std::vector<std::int64_t> whole(const DataSource& d, TaskSplit split, std::int64_t p, char op) {
  Generator gen(0);
  return pairs_of(d.sample(split, 1000000, gen), p, op);  // a batch at least as large as the split: all of it
}

TEST(Modular, SplitsAreDisjointOfTheStatedShareAndFixedBySeed) {
  const auto d = modular("{p: 23, train_fraction: 0.3}");
  const std::vector<std::int64_t> train = whole(*d, TaskSplit::train, 23, '+'), held = whole(*d, TaskSplit::held_out, 23, '+');
  EXPECT_EQ(train.size(), 159u);  // round(0.3 * 529)
  EXPECT_EQ(train.size() + held.size(), 529u);
  std::set<std::int64_t> all(train.begin(), train.end());
  all.insert(held.begin(), held.end());
  EXPECT_EQ(all.size(), 529u);  // every pair exactly once
  EXPECT_EQ(whole(*modular("{p: 23, train_fraction: 0.3}"), TaskSplit::train, 23, '+'), train);
  EXPECT_NE(whole(*modular("{p: 23, train_fraction: 0.3, split_seed: 1}"), TaskSplit::train, 23, '+'), train);
  // The held-out split walked in order is the same pairs as the whole of it.
  std::vector<std::int64_t> walked;
  for (std::size_t i = 0; i < d->held_out_batches(64); ++i) {
    const std::vector<std::int64_t> b = pairs_of(d->held_out_batch(i, 64), 23, '+');
    walked.insert(walked.end(), b.begin(), b.end());
  }
  EXPECT_EQ(walked, held);
  // Smaller batches are draws from the split.
  Generator gen(4);
  for (std::int64_t pair : pairs_of(d->sample(TaskSplit::train, 16, gen), 23, '+')) EXPECT_TRUE(std::count(train.begin(), train.end(), pair));
}

TEST(Modular, EachOperationAnswersAndTheTokensHaveNames) {
  whole(*modular("{p: 7, op: sub}"), TaskSplit::train, 7, '-');
  whole(*modular("{p: 7, op: mul}"), TaskSplit::held_out, 7, '*');
  const auto d = modular("{p: 7}");
  EXPECT_EQ(d->shape().vocab_size, 8u);
  EXPECT_EQ(d->token_ids("3 4 ="), (std::vector<std::int64_t>{3, 4, 7}));
  EXPECT_EQ(d->token_label(7, 2), "=");
}

}  // namespace
}  // namespace attnlab::data
