#include "experiments/runner/evaluation.hpp"

#include <filesystem>
#include <stdexcept>

#include "framework/io/atomic_file.hpp"
#include "framework/io/image.hpp"
#include "framework/io/npy.hpp"

namespace attnlab {
namespace {

namespace fs = std::filesystem;
using I = std::int64_t;

// Eval mode and no graph while alive; the model's mode comes back however the scope is left.
class EvalScope {
 public:
  explicit EvalScope(Model& model) : model_(model), training_(model.is_training()) { model_.eval(); }
  ~EvalScope() { model_.train(training_); }

 private:
  Model& model_;
  bool training_;
  NoGradGuard no_grad_;
};

// Each layer's pattern of the probes [B, H, Tq, Tk], in layer order, through the named activations.
std::vector<Tensor> layer_patterns(Model& model, const Batch& batch) {
  ForwardOptions options;
  options.hooks.cache = {"blocks.*.attn.hook_pattern"};
  const ModelOutput out = model.forward(batch, options);
  std::vector<Tensor> layers;
  for (std::size_t l = 0; l < model.n_layers(); ++l) {
    const auto it = out.cache.find("blocks." + std::to_string(l) + ".attn.hook_pattern");
    if (it == out.cache.end() || !it->second.defined()) return {};
    layers.push_back(it->second.to(DType::float32));
  }
  return layers;
}

// Saves probe p's patterns [L, H, Tq, Tk] as .npy and .png, and its tokens and labels the first time.
void save_probe(const std::vector<Tensor>& layers, const Probes& probes, std::size_t p, std::size_t step, const std::string& dir) {
  const I pi = static_cast<I>(p);
  std::vector<Tensor> per_layer;
  for (const Tensor& l : layers) per_layer.push_back(slice(l, 0, pi, pi + 1));  // [1, H, Tq, Tk]
  const Tensor probe = concat(per_layer, 0);                                     // [L, H, Tq, Tk]
  const std::string base = dir + "/step_" + std::to_string(step) + "_probe_" + std::to_string(p);
  write_npy(base + ".npy", probe);
  write_pattern_png(base + ".png", probe);
  const std::string tokens_file = dir + "/probe_" + std::to_string(p) + "_tokens.npy";
  if (!probes.tokens.empty() && !fs::exists(tokens_file)) write_npy(tokens_file, slice(probes.batch.input, 0, pi, pi + 1));
  const std::string labels_file = dir + "/probe_" + std::to_string(p) + "_labels.txt";
  if (!fs::exists(labels_file)) {  // the axis labels of the reports, one per key position
    std::string text;
    for (const std::string& label : probes.labels[p]) text += label + "\n";
    write_file_atomically(labels_file, text);
  }
}

}  // namespace

Evaluation evaluate(Model& model, const data::DataSource& data, std::size_t batches, std::size_t batch_size, std::uint64_t seed) {
  EvalScope scope(model);
  Generator gen(seed);
  const bool whole = batches == 0;
  if (whole) {
    batches = data.held_out_batches(batch_size);
    if (batches == 0) throw std::invalid_argument("the held-out split has nothing to predict; use more text or a larger split");
  }
  Evaluation e;
  double loss = 0, correct = 0, exact = 0, rows = 0;
  for (std::size_t i = 0; i < batches; ++i) {
    const Batch b = whole ? data.held_out_batch(i, batch_size) : data.sample(data::TaskSplit::held_out, batch_size, gen);
    const Tensor logits = model.forward(b).logits;
    const data::SequenceMetrics m = data::sequence_metrics(logits, b.target);
    if (m.scored_tokens) loss += cross_entropy(logits, b.target, data::kIgnore).item() * static_cast<double>(m.scored_tokens);
    correct += m.token_accuracy * static_cast<double>(m.scored_tokens);
    e.metrics.scored_tokens += m.scored_tokens;
    exact += m.exact_match * static_cast<double>(b.input.size(0));
    rows += static_cast<double>(b.input.size(0));
  }
  const double scored = static_cast<double>(e.metrics.scored_tokens);
  e.loss = scored ? loss / scored : 0;
  e.metrics.token_accuracy = scored ? correct / scored : 0;
  e.metrics.exact_match = rows ? exact / rows : 0;
  return e;
}

Probes make_probes(const data::DataSource& data, std::size_t count, std::uint64_t seed) {
  Generator gen(seed);
  Probes probes;
  probes.batch = data.sample(data::TaskSplit::held_out, count, gen);
  const bool ids = data.token_inputs();
  const std::size_t length = ids ? probes.batch.input.size(1) : 0;
  for (std::size_t p = 0; p < count; ++p) {
    std::vector<std::string> labels;
    std::vector<std::int64_t> tokens;
    const std::int64_t* row = ids ? probes.batch.input.data<std::int64_t>() + p * length : nullptr;
    for (std::size_t i = 0; i < length; ++i) {
      labels.push_back(data.token_label(row[i], i));
      tokens.push_back(data.is_padding(row[i]) ? -1 : row[i]);  // padding never counts as an earlier occurrence
    }
    if (ids) probes.tokens.push_back(tokens);
    probes.labels.push_back(labels);
  }
  return probes;
}

PatternCapture capture_patterns(Model& model, const Probes& probes, std::size_t step, const std::string& run_dir) {
  std::vector<Tensor> layers;
  {
    EvalScope scope(model);
    layers = layer_patterns(model, probes.batch);
  }
  PatternCapture capture;
  capture.step = step;
  if (layers.empty()) return capture;
  const std::size_t count = layers[0].size(0), heads = layers[0].size(1), tq = layers[0].size(2), tk = layers[0].size(3);
  Probes labelled = probes;
  for (auto& labels : labelled.labels) {
    // Positions the data did not label (images: a ViT's CLS token and patches) are labelled by the model.
    for (std::size_t i = labels.size(); i < tk; ++i) {
      const std::string label = model.position_label(i);
      labels.push_back(label.empty() ? std::to_string(i) : label);
    }
  }
  const std::string dir = run_dir + "/patterns";
  create_folders(dir, "the patterns folder");
  for (std::size_t p = 0; p < count; ++p) save_probe(layers, labelled, p, step, dir);
  for (std::size_t l = 0; l < layers.size(); ++l) {
    const std::vector<double> values = layers[l].to_vector();
    for (std::size_t h = 0; h < heads; ++h) {
      HeadMetricRow row{l, h, {}};
      for (std::size_t p = 0; p < count; ++p) {
        const std::vector<std::int64_t> none;
        const HeadMetrics m = head_metrics(values.data() + ((p * heads) + h) * tq * tk, tq, tk, probes.tokens.empty() ? none : probes.tokens[p]);
        for (const auto& [name, member] : head_metric_fields()) row.metrics.*member += m.*member / static_cast<double>(count);
      }
      capture.heads.push_back(row);
    }
  }
  return capture;
}

}  // namespace attnlab
