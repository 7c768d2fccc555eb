#include "experiments/runner/evaluation.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <stdexcept>

#include "experiments/runner/data_parallel.hpp"
#include "framework/io/atomic_file.hpp"
#include "framework/io/image.hpp"
#include "framework/io/npy.hpp"

namespace attnlab {
namespace {

namespace fs = std::filesystem;
using I = std::int64_t;

// Each part's patterns of the probes: one tensor [B, H, Tq, Tk] per layer, through the named
// activations; empty when a kernel has none.
std::vector<std::vector<Tensor>> part_patterns(Model& model, const std::vector<Model::AttentionPart>& parts, const Batch& batch) {
  ForwardOptions options;
  for (const auto& part : parts) options.hooks.cache.insert(options.hooks.cache.end(), part.pattern_hooks.begin(), part.pattern_hooks.end());
  const ModelOutput out = model.forward(batch, options);
  std::vector<std::vector<Tensor>> patterns;
  for (const auto& part : parts) {
    std::vector<Tensor> layers;
    for (const std::string& hook : part.pattern_hooks) {
      const auto it = out.cache.find(hook);
      if (it == out.cache.end() || !it->second.defined()) return {};
      layers.push_back(it->second.to(DType::float32));  // [B, H, Tq, Tk]
    }
    patterns.push_back(std::move(layers));
  }
  return patterns;
}

// Probe p's tokens (its first `length`, without the batch's padding) and axis labels.
// `length` positions of the stream, of which the first `before` are the model's own (a CLS) and the rest
// the probe's input tokens (probe_P_tokens.npy holds those alone: the model's input).
void write_probe_side(const std::string& dir, const std::string& name, const Tensor& ids, std::size_t p, std::size_t length,
                      const std::vector<std::string>& labels, std::size_t before = 0) {
  const I pi = static_cast<I>(p);
  const std::string tokens_file = dir + "/probe_" + std::to_string(p) + "_" + name + "tokens.npy";
  if (ids.defined() && !fs::exists(tokens_file)) write_npy(tokens_file, slice(slice(ids, 0, pi, pi + 1), 1, 0, static_cast<I>(length - before)));
  const std::string labels_file = dir + "/probe_" + std::to_string(p) + "_" + name + "labels.txt";
  if (!fs::exists(labels_file)) {  // the axis labels of the reports, one per position
    std::string text;
    for (std::size_t i = 0; i < length; ++i) text += labels[i] + "\n";
    write_file_atomically(labels_file, text);
  }
}

// An image probe's picture (probe_P_image.png), for the report's image view: grey for one channel, the
// first three as RGB otherwise, scaled from the image's lowest value to its highest.
void write_probe_image(const std::string& dir, const Tensor& images, std::size_t p) {
  const std::string file = dir + "/probe_" + std::to_string(p) + "_image.png";
  if (fs::exists(file) || !images.defined() || images.dim() != 4) return;
  const std::size_t channels = images.size(1), height = images.size(2), width = images.size(3), plane = height * width;
  const std::vector<double> v = slice(images, 0, static_cast<I>(p), static_cast<I>(p) + 1).to_vector();
  const auto [low, high] = std::minmax_element(v.begin(), v.end());
  const double span = *high > *low ? *high - *low : 1;
  std::vector<unsigned char> rgb(plane * 3);
  for (std::size_t i = 0; i < plane; ++i)
    for (std::size_t k = 0; k < 3; ++k) {
      const double x = v[(channels >= 3 ? k : 0) * plane + i];
      rgb[i * 3 + k] = static_cast<unsigned char>(std::lround((x - *low) / span * 255));
    }
  write_file_atomically(file, encode_rgb_png(rgb, width, height));
}

// Saves probe p's patterns of one part as .npy [L, H, Tq, Tk] and .png, its queries and keys cut to the
// probe's own lengths: the batch's padding is not part of the example.
void save_probe(const std::vector<Tensor>& layers, const std::string& part, std::size_t p, std::size_t queries, std::size_t keys,
                std::size_t step, const std::string& dir) {
  const I pi = static_cast<I>(p);
  std::vector<Tensor> per_layer;
  for (const Tensor& l : layers) {
    per_layer.push_back(slice(slice(slice(l, 0, pi, pi + 1), 2, 0, static_cast<I>(queries)), 3, 0, static_cast<I>(keys)));  // [1, H, q, k]
  }
  const Tensor probe = concat(per_layer, 0);  // [L, H, q, k]
  const std::string base = dir + "/step_" + std::to_string(step) + "_probe_" + std::to_string(p) + (part.empty() ? "" : "_" + part);
  write_npy(base + ".npy", probe);
  write_pattern_png(base + ".png", probe);
}

// The head metrics of one part, averaged over the probes.
std::vector<HeadMetricRow> part_metrics(const Model::AttentionPart& part, const std::vector<Tensor>& layers, const Probes& probes) {
  std::vector<HeadMetricRow> rows;
  const std::size_t count = layers[0].size(0), heads = layers[0].size(1), tq = layers[0].size(2), tk = layers[0].size(3);
  const bool cross = part.target_queries && !part.target_keys;
  for (std::size_t l = 0; l < layers.size(); ++l) {
    const std::vector<double> values = layers[l].to_vector();
    for (std::size_t h = 0; h < heads; ++h) {
      HeadMetricRow row{part.name, l, h, {}};
      for (std::size_t p = 0; p < count; ++p) {
        const double* pattern = values.data() + ((p * heads) + h) * tq * tk;
        const std::vector<std::int64_t> none;
        const auto& keys = part.target_keys ? probes.target_tokens : probes.tokens;
        const auto& key_lengths = part.target_keys ? probes.target_lengths : probes.lengths;
        const HeadMetrics m = cross ? cross_metrics(pattern, tq, tk, probes.target_lengths[p], probes.lengths[p])
                                    : head_metrics(pattern, tq, tk, keys.empty() ? none : keys[p], key_lengths.empty() ? 0 : key_lengths[p]);
        for (const auto& [name, member] : head_metric_fields()) row.metrics.*member += m.*member / static_cast<double>(count);
      }
      rows.push_back(row);
    }
  }
  return rows;
}

}  // namespace

void for_each_held_out_batch(const data::DataSource& data, std::size_t batches, std::size_t batch_size, std::uint64_t seed,
                             const std::function<void(const Batch&)>& visit) {
  Generator gen(seed);
  const bool whole = batches == 0;
  if (whole) {
    batches = data.held_out_batches(batch_size);
    if (batches == 0) throw std::invalid_argument("the held-out split has nothing to predict; use more text or a larger split");
  }
  for (std::size_t i = 0; i < batches; ++i) visit(whole ? data.held_out_batch(i, batch_size) : data.sample(data::TaskSplit::held_out, batch_size, gen));
}

void EvaluationSum::add(const Tensor& logits, const Tensor& target) {
  const data::SequenceMetrics m = data::sequence_metrics(logits, target);
  if (m.scored_tokens) loss_ += cross_entropy(logits, target, data::kIgnore).item() * static_cast<double>(m.scored_tokens);
  correct_ += m.token_accuracy * static_cast<double>(m.scored_tokens);
  scored_ += m.scored_tokens;
  exact_ += m.exact_match * static_cast<double>(target.size(0));
  rows_ += static_cast<double>(target.size(0));
}

Evaluation EvaluationSum::result() const {
  Evaluation e;
  const double scored = static_cast<double>(scored_);
  e.loss = scored ? loss_ / scored : 0;
  e.metrics.scored_tokens = scored_;
  e.metrics.token_accuracy = scored ? correct_ / scored : 0;
  e.metrics.exact_match = rows_ ? exact_ / rows_ : 0;
  return e;
}

void EvaluationSum::sum_over(const dist::Communicator& comm) {
  double sums[5] = {loss_, correct_, exact_, rows_, static_cast<double>(scored_)};
  comm.sum(sums, 5);
  loss_ = sums[0], correct_ = sums[1], exact_ = sums[2], rows_ = sums[3], scored_ = static_cast<std::size_t>(sums[4]);
}

Evaluation evaluate(Model& model, const data::DataSource& data, std::size_t batches, std::size_t batch_size, std::uint64_t seed,
                    const dist::Communicator& comm, const std::function<bool()>& stop) {
  EvalScope scope(model);
  EvaluationSum sum;
  for_each_held_out_batch(data, batches, batch_size, seed, [&](const Batch& whole) {
    if (stop && stop()) throw EvaluationStopped();
    const Batch b = shard(whole, comm);
    if (b.target.size(0)) sum.add(model.forward(b).logits, b.target);
  });
  sum.sum_over(comm);
  return sum.result();
}

Evaluation evaluate_train(Model& model, const data::DataSource& data, std::size_t batches, std::size_t batch_size, std::uint64_t seed,
                          const dist::Communicator& comm, const std::function<bool()>& stop) {
  EvalScope scope(model);
  EvaluationSum sum;
  Generator gen(seed);
  for (std::size_t i = 0; i < std::max<std::size_t>(batches, 1); ++i) {
    if (stop && stop()) throw EvaluationStopped();
    const Batch b = shard(data.sample(data::TaskSplit::train, batch_size, gen), comm);
    if (b.target.size(0)) sum.add(model.forward(b).logits, b.target);
  }
  sum.sum_over(comm);
  return sum.result();
}

namespace {

// Each row's tokens (pad symbols -1), labels and length before the masked padding.
void describe_rows(const Tensor& ids, const Tensor& mask, const std::function<std::string(std::int64_t, std::size_t)>& label,
                   const data::DataSource& data, std::vector<std::vector<std::int64_t>>& tokens,
                   std::vector<std::vector<std::string>>& labels, std::vector<std::size_t>& lengths) {
  const std::size_t rows = ids.size(0), length = ids.size(1);
  const std::int64_t* p = ids.data<std::int64_t>();
  const bool* pad = mask.defined() ? mask.data<bool>() : nullptr;
  for (std::size_t r = 0; r < rows; ++r) {
    std::vector<std::int64_t> row_tokens;
    std::vector<std::string> row_labels;
    std::size_t real = 0;
    for (std::size_t i = 0; i < length; ++i) {
      const std::int64_t id = p[r * length + i];
      row_labels.push_back(label(id, i));
      row_tokens.push_back(data.is_padding(id) ? -1 : id);  // padding never counts as an earlier occurrence
      if (!pad || !pad[r * length + i]) real = i + 1;
    }
    tokens.push_back(row_tokens);
    labels.push_back(row_labels);
    lengths.push_back(real);
  }
}

}  // namespace

Probes make_probes(const data::DataSource& data, std::size_t count, std::uint64_t seed, const Model& model) {
  Generator gen(seed);
  Probes probes;
  probes.batch = data.sample(data::TaskSplit::held_out, count, gen);
  if (!data.token_inputs()) {
    probes.labels.assign(count, {});
    return probes;
  }
  describe_rows(probes.batch.input, probes.batch.key_padding_mask, [&](std::int64_t id, std::size_t i) { return data.token_label(id, i); },
                data, probes.tokens, probes.labels, probes.lengths);
  // Positions the model puts before the tokens (a CLS): labelled by the model, no token (-1), never padding.
  const std::size_t before = model.positions_before_tokens();
  for (std::size_t r = 0; r < probes.tokens.size() && before; ++r) {
    probes.tokens[r].insert(probes.tokens[r].begin(), before, -1);
    for (std::size_t i = before; i-- > 0;) probes.labels[r].insert(probes.labels[r].begin(), model.position_label(i));
    probes.lengths[r] += before;
  }
  if (probes.batch.decoder_input.defined()) {
    describe_rows(probes.batch.decoder_input, probes.batch.decoder_padding_mask,
                  [&](std::int64_t id, std::size_t) { return data.target_label(id); }, data, probes.target_tokens,
                  probes.target_labels, probes.target_lengths);
  }
  return probes;
}

PatternCapture capture_patterns(Model& model, const Probes& probes, std::size_t step, const std::string& run_dir) {
  const std::vector<Model::AttentionPart> parts = model.attention_parts();
  std::vector<std::vector<Tensor>> patterns;
  {
    EvalScope scope(model);
    patterns = part_patterns(model, parts, probes.batch);
  }
  PatternCapture capture;
  capture.step = step;
  if (patterns.empty()) return capture;
  const std::string dir = run_dir + "/patterns";
  create_folders(dir, "the patterns folder");
  const std::size_t count = patterns[0][0].size(0);
  for (std::size_t p = 0; p < count; ++p) {
    std::vector<std::string> labels = probes.labels[p];
    // Positions the data did not label (images: a ViT's patches and CLS token) are labelled by the model.
    for (std::size_t i = labels.size(); i < patterns[0][0].size(3); ++i) {
      const std::string label = model.position_label(i);
      labels.push_back(label.empty() ? std::to_string(i) : label);
    }
    const std::size_t source = probes.lengths.empty() ? labels.size() : probes.lengths[p];
    const std::size_t target = probes.target_lengths.empty() ? 0 : probes.target_lengths[p];
    write_probe_side(dir, "", probes.tokens.empty() ? Tensor() : probes.batch.input, p, source, labels,
                     probes.tokens.empty() ? 0 : model.positions_before_tokens());
    if (probes.tokens.empty()) write_probe_image(dir, probes.batch.input, p);
    if (target) write_probe_side(dir, "target_", probes.batch.decoder_input, p, target, probes.target_labels[p]);
    for (std::size_t part = 0; part < parts.size(); ++part) {
      const Model::AttentionPart& a = parts[part];
      save_probe(patterns[part], a.name, p, a.target_queries ? target : source, a.target_keys ? target : source, step, dir);
    }
  }
  for (std::size_t part = 0; part < parts.size(); ++part) {
    const std::vector<HeadMetricRow> rows = part_metrics(parts[part], patterns[part], probes);
    capture.heads.insert(capture.heads.end(), rows.begin(), rows.end());
  }
  return capture;
}

}  // namespace attnlab
