// Module: dotted names, parameter kinds and counts, train/eval propagation, state dicts, loading
// exported weights (buffers included), dtype moves.
#include <gtest/gtest.h>

#include <filesystem>

#include "framework/io/npy.hpp"
#include "framework/nn/layers.hpp"
#include "tests/test_util.hpp"

namespace attnlab {
namespace {

class Block : public Module {
 public:
  explicit Block(Generator& gen) {
    norm = register_module("norm", std::make_shared<LayerNorm>(4));
    proj = register_module("proj", std::make_shared<Linear>(4, 3, true, gen));
    drop = register_module("drop", std::make_shared<Dropout>(0.5, gen));
    scale = register_buffer("scale", full({1}, 2.0));
  }
  std::shared_ptr<LayerNorm> norm;
  std::shared_ptr<Linear> proj;
  std::shared_ptr<Dropout> drop;
  Tensor scale;
};

class Net : public Module {
 public:
  explicit Net(Generator& gen) {
    for (int i = 0; i < 2; ++i) blocks.push_back(register_module(std::to_string(i), std::make_shared<Block>(gen)));
    head = register_parameter("head", randn({3, 2}, gen));
  }
  std::vector<std::shared_ptr<Block>> blocks;
  Tensor head;
};

TEST(Module, NamesAreDottedAndKindsKept) {
  Generator gen(0);
  Net net(gen);
  std::vector<std::string> names;
  for (const auto& p : net.named_parameters()) names.push_back(p.name + ":" + param_kind_name(p.kind));
  EXPECT_EQ(names, (std::vector<std::string>{"head:weight", "0.norm.weight:norm", "0.norm.bias:norm",
                                             "0.proj.weight:weight", "0.proj.bias:bias", "1.norm.weight:norm",
                                             "1.norm.bias:norm", "1.proj.weight:weight", "1.proj.bias:bias"}));
  EXPECT_EQ(net.parameter_count(), 6u + 2 * (4 + 4 + 12 + 3));
  for (const auto& p : net.parameters()) EXPECT_TRUE(p.requires_grad());
  EXPECT_EQ(net.named_buffers().size(), 2u);
  EXPECT_EQ(net.named_buffers()[1].first, "1.scale");
}

TEST(Module, TiedParametersAreListedOnce) {
  class Tied : public Module {
   public:
    explicit Tied(Generator& gen) {
      emb = register_module("emb", std::make_shared<Embedding>(5, 3, gen));
      head = register_module("head", std::make_shared<Linear>(3, 5, false, gen));
      head->weight = emb->weight;  // the handle the module uses
    }
    void tie() { register_parameter("tied", emb->weight); }
    std::shared_ptr<Embedding> emb;
    std::shared_ptr<Linear> head;
  };
  Generator gen(0);
  Tied tied(gen);
  const std::size_t before = tied.parameter_count();
  tied.tie();
  EXPECT_EQ(tied.parameter_count(), before);
  // Own parameters come before children's, so the tensor keeps the name it is met under first.
  std::vector<std::string> names;
  for (const auto& p : tied.named_parameters()) names.push_back(p.name);
  EXPECT_EQ(names, (std::vector<std::string>{"tied", "head.weight"}));
}

TEST(Module, DuplicateOrDottedNamesAreRejected) {
  class Bad : public Module {
   public:
    void twice() {
      register_parameter("w", zeros({1}));
      register_parameter("w", zeros({1}));
    }
    void dotted() { register_buffer("a.b", zeros({1})); }
  };
  Bad bad;
  EXPECT_THROW(bad.twice(), std::invalid_argument);
  EXPECT_THROW(bad.dotted(), std::invalid_argument);
}

TEST(Module, TrainEvalPropagates) {
  Generator gen(0);
  Net net(gen);
  net.eval();
  EXPECT_FALSE(net.is_training());
  EXPECT_FALSE(net.blocks[1]->drop->is_training());
  Tensor x = ones({8, 4});
  EXPECT_TRUE(net.blocks[0]->drop->forward(x).same(x));  // identity in eval
  net.train();
  EXPECT_TRUE(net.blocks[1]->drop->is_training());
  EXPECT_FALSE(net.blocks[0]->drop->forward(x).same(x));
}

TEST(Module, ZeroGradClearsEveryParameter) {
  Generator gen(0);
  Net net(gen);
  sum(net.blocks[0]->proj->forward(ones({2, 4}))).backward();
  EXPECT_TRUE(net.blocks[0]->proj->weight.grad().defined());
  net.zero_grad();
  for (const auto& p : net.parameters()) EXPECT_FALSE(p.grad().defined());
}

TEST(Module, StateDictRoundTripsAndReportsMismatches) {
  Generator g1(1), g2(2);
  Net a(g1), b(g2);
  EXPECT_NE(a.head.to_vector(), b.head.to_vector());
  b.load_state_dict(a.state_dict());
  EXPECT_EQ(a.head.to_vector(), b.head.to_vector());
  EXPECT_EQ(a.blocks[1]->proj->weight.to_vector(), b.blocks[1]->proj->weight.to_vector());

  auto state = a.state_dict();
  state.erase("0.proj.bias");
  state["0.proj.weight"] = zeros({2, 2});
  state["extra"] = zeros({1});
  try {
    b.load_state_dict(state);
    FAIL();
  } catch (const std::invalid_argument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("missing: 0.proj.bias"), std::string::npos) << m;
    EXPECT_NE(m.find("shape mismatch: 0.proj.weight"), std::string::npos) << m;
    EXPECT_NE(m.find("unexpected: extra"), std::string::npos) << m;
  }
}

TEST(Module, LoadWeightsNeedsParametersAndLeavesMissingBuffers) {
  Generator g1(1), g2(2);
  Net a(g1), b(g2);
  std::map<std::string, Tensor> weights;
  for (const auto& p : a.named_parameters()) weights.emplace(p.name, p.tensor.detach());
  b.blocks[0]->scale.data<float>()[0] = 5.0f;
  b.load_weights(weights);  // no buffers or generator states needed
  EXPECT_EQ(b.head.to_vector(), a.head.to_vector());
  EXPECT_EQ(b.blocks[0]->scale.item(), 5.0);
  weights.erase("head");
  try {
    b.load_weights(weights);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("missing: head [3, 2]"), std::string::npos) << e.what();
  }
}

// `attnlab export` writes buffers too (rotary and sinusoidal tables, the performer's random features);
// model.init_from must load such a folder back, keeping the exported buffer values.
TEST(Module, LoadWeightsTakesBuffersFromAnExportedFolder) {
  class WithBuffer : public Module {
   public:
    explicit WithBuffer(Generator& gen) {
      weight = register_parameter("weight", randn({2, 3}, gen));
      projection = register_buffer("projection", randn({3, 4}, gen));
    }
    Tensor weight, projection;
  };
  Generator g1(1), g2(2);
  WithBuffer a(g1), b(g2);
  const std::string dir = ::testing::TempDir() + "attnlab_load_weights";
  std::filesystem::remove_all(dir);
  export_npy_folder(dir, a.state_dict());
  b.load_weights(import_npy_folder(dir));
  EXPECT_EQ(b.weight.to_vector(), a.weight.to_vector());
  EXPECT_EQ(b.projection.to_vector(), a.projection.to_vector());
  std::filesystem::remove_all(dir);

  auto error_for = [&](const std::map<std::string, Tensor>& weights) -> std::string {
    try {
      b.load_weights(weights);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "";
  };
  const std::string unknown = error_for({{"weight", zeros({2, 3})}, {"projektion", zeros({3, 4})}});
  EXPECT_NE(unknown.find("unexpected: projektion [3, 4] (the model has no parameter or buffer of that name)"), std::string::npos)
      << unknown;
  const std::string shape = error_for({{"weight", zeros({2, 3})}, {"projection", zeros({3, 8})}});
  EXPECT_NE(shape.find("shape mismatch: projection is [3, 4] in the model but [3, 8] in the weights"), std::string::npos) << shape;
  EXPECT_EQ(b.projection.to_vector(), a.projection.to_vector());  // nothing copied on an error
}

TEST(Module, ToFloat64ConvertsInPlace) {
  Generator gen(0);
  Net net(gen);
  const auto before = net.head.to_vector();
  Tensor handle = net.head;
  net.to(DType::float64);
  EXPECT_EQ(handle.dtype(), DType::float64);  // every handle sees the conversion
  EXPECT_EQ(net.blocks[0]->scale.dtype(), DType::float64);
  EXPECT_EQ(net.head.to_vector(), before);
  EXPECT_TRUE(net.head.requires_grad());
}

}  // namespace
}  // namespace attnlab
