// Same config, seed and thread count give the same bits, whatever the heap held before the run and
// whatever the run is called: every registered kernel (and the decay kernel's data gate) and every model
// kind trains twice, the second time under another name, after allocations that move where the heap
// hands out its next blocks, and with every tensor buffer an op should overwrite filled with NaNs first
// (Storage::set_poison_byte); every weight, optimizer moment and generator state must agree bit for
// bit. A kernel that reads memory it never wrote, or whose arithmetic depends on the alignment the heap
// happened to give its scratch (a vector loop's scalar prologue), fails here.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "experiments/runner/config.hpp"
#include "experiments/runner/train.hpp"
#include "framework/attention/kernel.hpp"
#include "framework/io/checkpoint.hpp"
#include "framework/models/model.hpp"
#include "framework/tensor/storage.hpp"

namespace attnlab {
namespace {

namespace fs = std::filesystem;

struct Case {
  std::string label;   // the test's name
  std::string config;  // the experiment, without name and log.dir
};
void PrintTo(const Case& c, std::ostream* out) { *out << c.label; }

// Sequences long enough (about 100 tokens, several chunks) for the chunked recurrences' strong-decay paths,
// padded where the task allows it; 4 heads so that some gate starts strong.
std::string causal_config(const std::string& kernel, const std::string& options) {
  return "task: {name: copy, length: 48, min_length: 36, symbols: 8}\n"
         "model: {kind: causal_lm, d_model: 32, n_heads: 4, n_layers: 2, attention: {name: " + kernel + ", options: {" + options + "}}}\n";
}
std::string bidirectional_config(const std::string& kernel) {
  return "task: {name: reverse, length: 24, min_length: 16, symbols: 8}\n"
         "model: {kind: token_tagger, d_model: 32, n_heads: 4, n_layers: 2, attention: {name: " + kernel + "}}\n";
}

// Every kernel in the mode the registry says it has (causal when it can be), the decay kernel's data
// gate too, and one case per model kind beyond the two above.
std::vector<Case> cases() {
  std::vector<Case> out;
  for (const std::string& name : KernelRegistry::instance().names()) {
    const KernelCapabilities& c = KernelRegistry::instance().find(name).capabilities;
    out.push_back({name, c.causal ? causal_config(name, "") : bidirectional_config(name)});
  }
  out.push_back({"decay_data_gate", causal_config("decay", "gate: data")});
  out.push_back({"gated_delta_one_chunk", causal_config("gated_delta", "chunk: 128")});
  const std::vector<Case> kinds = {
      {"kind_seq2seq", "task: {name: reverse, length: 12, min_length: 5, symbols: 8}\n"
                       "model: {kind: seq2seq, d_model: 32, n_heads: 4, n_layers: 2, attention: {name: softmax}}\n"},
      {"kind_sequence_classifier", "task: {name: majority, length: 15, symbols: 3}\n"
                                   "model: {kind: sequence_classifier, d_model: 32, n_heads: 4, n_layers: 2, attention: {name: softmax}}\n"},
      {"kind_vit", "task: {name: quadrants, image_size: 16}\n"
                   "model: {kind: vit, patch_size: 4, d_model: 32, n_heads: 4, n_layers: 2, attention: {name: softmax}}\n"},
  };
  out.insert(out.end(), kinds.begin(), kinds.end());
  return out;
}

TEST(DeterminismCases, CoverEveryModelKind) {
  for (const std::string& kind : ModelRegistry::instance().names()) {
    bool covered = false;
    for (const Case& c : cases()) covered |= c.config.find("kind: " + kind + ",") != std::string::npos;
    EXPECT_TRUE(covered) << "model kind " << kind << " has no determinism case: add one";
  }
}

// Blocks of assorted sizes held for the rest of the test, every other one freed: the allocator's free
// lists then hand out other addresses (with other alignments) than in the first run.
class HeapShift {
 public:
  HeapShift() {
    for (std::size_t i = 0; i < 96; ++i) blocks_.emplace_back(std::make_unique<char[]>(8 + 24 * (i % 11) + 4096 * (i % 3 == 0)));
    for (std::size_t i = 0; i < blocks_.size(); i += 2) blocks_[i].reset();
  }

 private:
  std::vector<std::unique_ptr<char[]>> blocks_;
};

// Fresh tensor buffers filled with `byte` while it lives.
struct Poisoned {
  explicit Poisoned(int byte) { Storage::set_poison_byte(byte); }
  ~Poisoned() { Storage::set_poison_byte(-1); }
};

ExperimentConfig experiment(const Case& c, const std::string& dir, const std::string& name) {
  return parse_config(c.config +
                          "train: {steps: 4, batch_size: 8, eval_interval: 4, eval_batches: 1, final_eval_batches: 1,\n"
                          "        optimizer: {name: adamw, lr: 0.01}}\n"
                          "log: {interval: 4, patterns: false}\n",
                      "determinism.yaml", {"log.dir=" + dir, "name=" + name});
}

class Determinism : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "attnlab_determinism_" + GetParam().label;
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir_;
};

TEST_P(Determinism, AnotherNameAndHeapGiveTheSameBits) {
  const TrainResult a = train_experiment(experiment(GetParam(), dir_, "a"), 1);
  const HeapShift shift;
  const Poisoned nans(0xff);
  const TrainResult b = train_experiment(experiment(GetParam(), dir_, "a_much_longer_name_that_moves_the_heap_0123456789"), 1);
  const Checkpoint x = load_checkpoint(a.run_dir + "/last.ckpt"), y = load_checkpoint(b.run_dir + "/last.ckpt");
  std::size_t compared = 0;
  for (const auto& [name, t] : x.tensors) {
    if (name.rfind("model.", 0) != 0 && name.rfind("optim.", 0) != 0 && name.rfind("rng.", 0) != 0) continue;
    ASSERT_TRUE(y.tensors.count(name)) << name;
    EXPECT_EQ(t.to_vector(), y.tensors.at(name).to_vector()) << name << " differs between the two runs";
    ++compared;
  }
  EXPECT_GT(compared, 10u);
  EXPECT_EQ(a.final_eval_loss, b.final_eval_loss);
}

INSTANTIATE_TEST_SUITE_P(EveryKernelAndKind, Determinism, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& p) { return p.param.label; });

}  // namespace
}  // namespace attnlab
