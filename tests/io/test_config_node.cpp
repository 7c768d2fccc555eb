// ConfigNode: typed reads with defaults and ranges, and errors that give file:line:column and a fix.
#include <gtest/gtest.h>

#include "framework/io/config_node.hpp"

namespace attnlab {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "no error";
}

TEST(ConfigNode, ReadsTypedValuesWithDefaults) {
  const YAML::Node yaml = YAML::Load("rate: 0.25\nsteps: 10\nname: abc\nflag: true\n");
  ConfigNode node(yaml, "train", "x.yaml");
  EXPECT_EQ(node.get("rate", 1.0), 0.25);
  EXPECT_EQ(node.get<std::size_t>("steps", 1), 10u);
  EXPECT_EQ(node.get<std::string>("name", ""), "abc");
  EXPECT_TRUE(node.get("flag", false));
  EXPECT_EQ(node.get<std::int64_t>("missing", 7), 7);
  EXPECT_NO_THROW(node.finish());
}

TEST(ConfigNode, ErrorsCarryPositionAndAdvice) {
  const YAML::Node yaml = YAML::Load("lr: abc\nsteps: -3\nwarmpu: 5\nkind: cosin\n");
  EXPECT_EQ(error_of([&] { ConfigNode(yaml, "train", "x.yaml").get("lr", 1.0); }),
            "x.yaml:1:5: 'train.lr' must be a number, got 'abc'");
  EXPECT_EQ(error_of([&] { ConfigNode(yaml, "train", "x.yaml").get<std::size_t>("steps", 1); }),
            "x.yaml:2:8: 'train.steps' must be >= 0, got -3");
  EXPECT_EQ(error_of([&] { ConfigNode(yaml, "train", "x.yaml").get("lr", 1.0, Range::greater_than(0)); }),
            "x.yaml:1:5: 'train.lr' must be a number, got 'abc'");
  EXPECT_EQ(error_of([&] {
              ConfigNode n(yaml, "train", "x.yaml");
              n.get_choice("kind", "constant", {"constant", "cosine", "linear"});
            }),
            "x.yaml:4:7: 'train.kind' is 'cosin', which is not among [constant, cosine, linear]; did you mean 'cosine'?");
  const std::string unknown = error_of([&] {
    ConfigNode n(yaml, "train", "x.yaml");
    n.allow("lr");
    n.allow("steps");
    n.allow("kind");
    n.allow("warmup");
    n.finish();
  });
  EXPECT_EQ(unknown, "x.yaml:3:1: unknown key 'train.warmpu'; did you mean 'train.warmup'? (valid keys: kind, lr, steps, warmup)");
}

TEST(ConfigNode, ListsOfChoices) {
  const YAML::Node yaml = YAML::Load("a: [weight, embedding]\nb: norm\nc: []\nd: [weight, embeding]\ne: [bias, bias]\nf: {x: 1}\n");
  ConfigNode node(yaml, "opt", "x.yaml");
  const std::vector<std::string> kinds{"weight", "embedding", "bias", "norm"};
  EXPECT_EQ(node.get_choices("a", {}, kinds), (std::vector<std::string>{"weight", "embedding"}));
  EXPECT_EQ(node.get_choices("b", {}, kinds), (std::vector<std::string>{"norm"}));
  EXPECT_EQ(node.get_choices("c", {"weight"}, kinds), (std::vector<std::string>{}));
  EXPECT_EQ(node.get_choices("missing", {"weight"}, kinds), (std::vector<std::string>{"weight"}));
  EXPECT_EQ(error_of([&] { node.get_choices("d", {}, kinds); }),
            "x.yaml:4:13: 'opt.d' lists 'embeding', which is not among [weight, embedding, bias, norm]; did you mean 'embedding'?");
  EXPECT_EQ(error_of([&] { node.get_choices("e", {}, kinds); }), "x.yaml:5:11: 'opt.e' lists 'bias' twice");
  EXPECT_EQ(error_of([&] { node.get_choices("f", {}, kinds); }),
            "x.yaml:6:4: 'opt.f' must be a list of values among [weight, embedding, bias, norm]");
}

TEST(ConfigNode, RangesAreEnforced) {
  const YAML::Node yaml = YAML::Load("p: 1.0\n");
  EXPECT_EQ(error_of([&] { ConfigNode(yaml, "drop", "f.yaml").get("p", 0.0, Range::closed_open(0.0, 1.0)); }),
            "f.yaml:1:4: 'drop.p' must be [0, 1), got 1.0");
}

TEST(ConfigNode, DuplicateKeysAndNonMappingsAreRejected) {
  EXPECT_EQ(error_of([] { ConfigNode(YAML::Load("a: 1\nb: 2\na: 3\n"), "", "d.yaml"); }), "d.yaml:3:1: duplicate key 'a'");
  EXPECT_NE(error_of([] { ConfigNode(YAML::Load("[1, 2]"), "model", "d.yaml"); }).find("'model' must be a mapping"),
            std::string::npos);
}

TEST(ConfigNode, NearestSuggestsOnlyCloseWords) {
  EXPECT_EQ(nearest("dropot", {"dropout", "scale"}), "dropout");
  EXPECT_EQ(nearest("zzzzzz", {"dropout", "scale"}), "");
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
}

}  // namespace
}  // namespace attnlab
