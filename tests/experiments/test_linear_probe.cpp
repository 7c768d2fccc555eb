// Linear probes: a property written into the features is found on held-out rows; labels with no
// relation to the features stay at chance; groups never straddle the split.
#include <gtest/gtest.h>

#include "experiments/analysis/linear_probe.hpp"
#include "framework/tensor/random.hpp"

namespace attnlab {
namespace {

// 400 rows of 8 features: the label's one-hot (of 4) plus noise, in groups of 4 rows.
struct Rows {
  Tensor features;
  std::vector<std::int64_t> labels, groups;
};

Rows rows(bool related, std::uint64_t seed) {
  Generator gen(seed);
  Rows r;
  std::vector<double> x;
  for (std::size_t i = 0; i < 400; ++i) {
    const std::int64_t label = static_cast<std::int64_t>(gen.next_below(4));
    r.labels.push_back(label);
    r.groups.push_back(static_cast<std::int64_t>(i / 4));
    const std::int64_t written = related ? label : static_cast<std::int64_t>(gen.next_below(4));
    for (std::int64_t c = 0; c < 8; ++c) x.push_back((c == written ? 2.0 : 0.0) + 0.3 * gen.next_normal());
  }
  r.features = from_vector(x, {400, 8}, DType::float32);
  return r;
}

TEST(LinearProbe, FindsAPropertyThatIsThereByConstruction) {
  const Rows r = rows(true, 1);
  const LinearProbeResult p = train_linear_probe(r.features, r.labels, 4, r.groups);
  EXPECT_GT(p.held_out_accuracy, 0.97);
  EXPECT_LT(p.majority_accuracy, 0.45);
  EXPECT_EQ(p.train_rows + p.held_out_rows, 400u);
  EXPECT_EQ(p.held_out_rows % 4, 0u);  // whole groups of 4 on the held-out side
}

TEST(LinearProbe, StaysNearChanceWhenTheFeaturesSayNothing) {
  const Rows r = rows(false, 2);
  const LinearProbeResult p = train_linear_probe(r.features, r.labels, 4, r.groups);
  EXPECT_LT(p.held_out_accuracy, 0.45);
}

TEST(LinearProbe, BadSizesAreErrors) {
  const Rows r = rows(true, 3);
  EXPECT_THROW(train_linear_probe(r.features, {0, 1}, 4, {}), std::invalid_argument);
  EXPECT_THROW(train_linear_probe(r.features, r.labels, 2, r.groups), std::invalid_argument);  // labels up to 3
  EXPECT_THROW(train_linear_probe(r.features, r.labels, 4, std::vector<std::int64_t>(400, 0)), std::invalid_argument);  // one group
}

}  // namespace
}  // namespace attnlab
