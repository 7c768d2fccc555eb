// What the analysis averages over: mean ablation leaves each example's padding out (the documented
// definition, "over the examples long enough to have it"), `--examples N` means exactly N examples, and
// an encoder-decoder's streams say which stack they are.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "experiments/analysis/part.hpp"
#include "framework/models/model.hpp"

namespace attnlab {
namespace {

// Reverse with sources of 2 to 8 symbols: batches are padded (the source's mask, and the decoder's).
std::unique_ptr<data::DataSource> padded_reverse(TaskFormat format) {
  ComponentChoice task;
  task.name = "reverse";
  task.options = ComponentOptions(YAML::Load("{length: 8, min_length: 2, symbols: 6}"), "task");
  return data::make_data_source(task, format);
}

std::shared_ptr<Model> small_model(const std::string& kind, const DataShape& shape) {
  ModelConfig config;
  config.kind.name = kind;
  config.encoder.d_model = 16, config.encoder.n_heads = 2, config.encoder.n_layers = 2;
  Generator gen(5);
  return make_model(config, shape, gen);
}

// The mean of hook's [B, H, T, D] value over the examples that reach each position, computed here from
// the cached activations and the masks alone.
std::vector<double> expected_mean(const AnalysisInputs& in, const std::string& hook, bool decoder_side, std::size_t length) {
  std::vector<double> total, count(length, 0.0);
  for (const Batch& b : in.batches) {
    ForwardOptions o;
    o.hooks.cache = {hook};
    const Tensor z = in.model.forward(b, o).cache.at(hook);
    const std::size_t rows = z.size(0), heads = z.size(1), t = z.size(2), dim = z.size(3);
    total.resize(heads * length * dim, 0.0);
    const Tensor& mask = decoder_side ? b.decoder_padding_mask : b.key_padding_mask;
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t i = 0; i < t; ++i) {
        if (mask.defined() && mask.data<bool>()[r * t + i]) continue;
        count[i] += 1;
        for (std::size_t h = 0; h < heads; ++h)
          for (std::size_t d = 0; d < dim; ++d) total[(h * length + i) * dim + d] += z.at({r, h, i, d});
      }
  }
  const std::size_t dim = in.model.forward(in.batches[0], [&] {
    ForwardOptions o;
    o.hooks.cache = {hook};
    return o;
  }()).cache.at(hook).size(3);
  for (std::size_t k = 0; k < total.size(); ++k) total[k] /= std::max(count[(k / dim) % length], 1.0);  // k = (h * length + i) * dim + d
  return total;
}

TEST(MeanAblation, AveragesEachPositionOverTheExamplesThatReachIt) {
  for (TaskFormat format : {TaskFormat::seq2seq, TaskFormat::causal_lm}) {
    const auto data = padded_reverse(format);
    const auto model = small_model(format == TaskFormat::seq2seq ? "seq2seq" : "causal_lm", data->shape());
    EvalScope scope(*model);
    const AnalysisInputs in{*model, *data, held_out_examples(*data, 96, 32, 3)};
    ASSERT_TRUE(in.batches[0].key_padding_mask.defined()) << "the task pads its sources";
    for (const PartBlocks& part : part_blocks(*model)) {
      const bool decoder_side = part.part == "decoder" || part.part == "cross";
      const std::string hook = part.blocks[1] + part.attention + ".hook_z";
      const Tensor mean = mean_head_output(in, hook, decoder_side);
      const std::vector<double> want = expected_mean(in, hook, decoder_side, mean.size(2));
      const std::vector<double> got = mean.to_vector();
      ASSERT_EQ(got.size(), want.size()) << hook;
      for (std::size_t k = 0; k < got.size(); ++k) ASSERT_NEAR(got[k], want[k], 1e-6) << hook << " at " << k;
    }
  }
}

// A held-out split of 300 examples walked in order (like SCAN's or a text's).
class FiniteSource : public data::DataSource {
 public:
  DataShape shape() const override {
    DataShape s;
    s.vocab_size = 300, s.max_len = 1;
    return s;
  }
  Batch sample(data::TaskSplit, std::size_t size, Generator& gen) const override {
    std::vector<std::int64_t> ids;
    for (std::size_t r = 0; r < size; ++r) ids.push_back(static_cast<std::int64_t>(gen.next_below(300)));
    return Batch{from_indices(ids, {size, 1}), from_indices(ids, {size, 1}), {}, {}, {}};
  }
  std::size_t held_out_batches(std::size_t size) const override { return (300 + size - 1) / size; }
  Batch held_out_batch(std::size_t index, std::size_t size) const override {
    std::vector<std::int64_t> ids;
    for (std::size_t i = index * size; i < std::min<std::size_t>(300, (index + 1) * size); ++i) ids.push_back(static_cast<std::int64_t>(i));
    return Batch{from_indices(ids, {ids.size(), 1}), from_indices(ids, {ids.size(), 1}), {}, {}, {}};
  }
};

TEST(AnalysisExamples, ExactlyTheNumberAskedForAndTheSameExamplesTheEvaluationScores) {
  const FiniteSource whole;
  const std::vector<Batch> first = held_out_examples(whole, 100, 64, 0);
  ASSERT_EQ(example_count(first), 100u);
  std::vector<std::int64_t> ids;
  for (const Batch& b : first)
    for (std::size_t r = 0; r < b.input.size(0); ++r) ids.push_back(b.input.data<std::int64_t>()[r]);
  for (std::size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(ids[i], static_cast<std::int64_t>(i));  // the split's first 100, in order
  EXPECT_EQ(example_count(held_out_examples(whole, 1000, 64, 0)), 300u);  // the whole split when it has fewer
  // Drawn examples: the first 100 of the draws the evaluation makes in batches of 64, padding masks cut alike.
  const auto drawn = padded_reverse(TaskFormat::seq2seq);
  const std::vector<Batch> some = held_out_examples(*drawn, 100, 64, 7), all = held_out_examples(*drawn, 128, 64, 7);
  ASSERT_EQ(example_count(some), 100u);
  ASSERT_EQ(some.size(), 2u);
  const Batch& cut = some[1];
  EXPECT_EQ(cut.key_padding_mask.size(0), 36u);
  EXPECT_EQ(cut.decoder_input.size(0), 36u);
  EXPECT_EQ(cut.target.size(0), 36u);
  const std::vector<double> a = cut.input.to_vector(), b = slice(all[1].input, 0, 0, 36).to_vector();
  EXPECT_EQ(a, b);
}

TEST(AnalysisStreams, AnEncoderDecodersRowsSayWhichStackTheyRead) {
  const auto data = padded_reverse(TaskFormat::seq2seq);
  const auto model = small_model("seq2seq", data->shape());
  const AnalysisInputs in{*model, *data, held_out_examples(*data, 32, 32, 3)};
  AnalysisResult r;
  logit_lens(in, r);
  residual_probes(in, 1, r);
  std::size_t checked = 0;
  for (const AnalysisTable& t : r.tables) {
    const std::string stack = t.name.rfind("logit_lens", 0) == 0 ? "decoder: " : t.name.rfind("probes", 0) == 0 ? "encoder: " : "";
    if (stack.empty()) continue;
    ASSERT_EQ(t.rows.size(), 3u) << t.name;  // embed, after block 0, after block 1
    EXPECT_EQ(t.rows[0], stack + "embed") << t.name;
    EXPECT_EQ(t.rows[2], stack + "after block 1") << t.name;
    EXPECT_NE(t.title.find(stack == "decoder: " ? "(decoder)" : "(encoder)"), std::string::npos) << t.title;
    ++checked;
  }
  EXPECT_EQ(checked, 4u);  // logit lens loss and accuracy, probe accuracy and chance
  // A single stack keeps its plain names.
  const auto lm_data = padded_reverse(TaskFormat::causal_lm);
  const auto lm = small_model("causal_lm", lm_data->shape());
  EXPECT_EQ(stack_streams(part_blocks(*lm)[0]).names[0], "embed");
}

// The percentile bootstrap of a share: about the normal interval p +- 1.96 sqrt(p (1 - p) / n).
TEST(Bootstrap, TheIntervalOfAShareIsAboutTheNormalOne) {
  const std::size_t n = 400;
  std::vector<double> hits(n), ones(n, 1.0);
  for (std::size_t i = 0; i < n; ++i) hits[i] = i % 4 == 0 ? 1.0 : 0.0;  // p = 0.25
  const Bootstrap boot(n, 11);
  const auto [low, high] = boot.interval([&](const std::vector<double>& w) { return weighted_ratio(hits, ones, w); });
  const double half = 1.96 * std::sqrt(0.25 * 0.75 / n);
  EXPECT_NEAR(low, 0.25 - half, 0.01);
  EXPECT_NEAR(high, 0.25 + half, 0.01);
  EXPECT_EQ(weighted_ratio(hits, ones, {}), 0.25);
  // The same seed, the same draws; a statistic without a value in any draw has no interval.
  EXPECT_EQ(Bootstrap(n, 11).counts, boot.counts);
  EXPECT_TRUE(std::isnan(boot.interval([](const std::vector<double>&) { return NAN; }).first));
}

}  // namespace
}  // namespace attnlab
