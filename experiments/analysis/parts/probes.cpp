// Linear probes of each layer's residual stream: how well a linear map of the stream tells the position,
// the token, the previous token and the task's own properties of held-out rows (linear_probe.hpp).
#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>

#include "experiments/analysis/linear_probe.hpp"
#include "experiments/analysis/part.hpp"

namespace attnlab {
namespace {

// The rows a probe reads: every real position of the first examples (at most `limit` rows), each
// stream's vector there, and the labels of the properties every token sequence has.
struct ProbeRows {
  std::vector<std::size_t> batch, row, position;  // position: the token's; its place in the stream is `stream`
  std::vector<std::size_t> stream;                  // (a CLS before the tokens moves it by one)
  std::vector<std::int64_t> token, previous, group;
  data::DataSource::TokenProperties task;  // the task's own properties (DataSource::token_properties)
};

ProbeRows probe_rows(const AnalysisInputs& in, const std::vector<Batch>& batches, bool tokens, std::size_t limit) {
  ProbeRows rows;
  std::int64_t example = 0;
  for (std::size_t bi = 0; bi < batches.size() && rows.batch.size() < limit; ++bi) {
    const Batch& b = batches[bi];
    // A ViT's stream holds its patches (and CLS token): the positions probed.
    const std::size_t t = tokens ? b.input.size(1) : in.model.tokens_read(b) / b.input.size(0);
    const data::DataSource::TokenProperties task = tokens ? in.data.token_properties(b) : data::DataSource::TokenProperties();
    for (const auto& property : task)
      if (std::none_of(rows.task.begin(), rows.task.end(), [&](const auto& p) { return p.first == property.first; }))
        rows.task.push_back({property.first, {}});
    for (std::size_t r = 0; r < b.input.size(0) && rows.batch.size() < limit; ++r, ++example) {
      std::size_t length = t;
      const std::size_t before = tokens ? in.model.positions_before_tokens() : 0;  // a CLS before the tokens
      const std::vector<std::int64_t> ids = tokens ? row_tokens(in.data, b.input, b.key_padding_mask, r, length) : std::vector<std::int64_t>(t, -1);
      for (std::size_t i = 0; i < length; ++i) {
        for (std::size_t k = 0; k < task.size(); ++k) rows.task[k].second.push_back(task[k].second[r * t + i]);
        rows.batch.push_back(bi);
        rows.row.push_back(r);
        rows.position.push_back(i);
        rows.stream.push_back(i + before);
        rows.token.push_back(ids[i]);
        rows.previous.push_back(i ? ids[i - 1] : -1);
        rows.group.push_back(example);
      }
    }
  }
  return rows;
}

// The labels of one property over the rows as classes 0..n-1 (rows without the property dropped:
// `keep`), and how many classes.
std::size_t as_classes(const std::vector<std::int64_t>& raw, std::vector<std::int64_t>& labels, std::vector<bool>& keep) {
  std::map<std::int64_t, std::int64_t> ids;
  for (std::size_t i = 0; i < raw.size(); ++i) {
    keep.push_back(raw[i] >= 0);
    if (raw[i] < 0) continue;
    const auto it = ids.emplace(raw[i], static_cast<std::int64_t>(ids.size())).first;
    labels.push_back(it->second);
  }
  return ids.size();
}

}  // namespace

void residual_probes(const AnalysisInputs& in, std::uint64_t seed, AnalysisResult& out) {
  const bool tokens = in.data.token_inputs();
  PartBlocks stack;
  for (const PartBlocks& p : part_blocks(in.model))
    if (p.attention != "cross_attn" && stack.blocks.empty()) stack = p;  // the first stack: the one reading the input
  const StackStreams streams = stack_streams(stack);
  const std::vector<std::string>& hooks = streams.hooks;
  const std::vector<std::string>& names = streams.names;
  const ProbeRows rows = probe_rows(in, in.batches, tokens, 4096);
  std::vector<std::pair<std::string, std::vector<std::int64_t>>> properties;
  properties.push_back({"position", std::vector<std::int64_t>(rows.position.begin(), rows.position.end())});
  if (tokens) properties.insert(properties.end(), {{"token", rows.token}, {"previous_token", rows.previous}});  // images: position only
  properties.insert(properties.end(), rows.task.begin(), rows.task.end());
  // Each stream's vectors at the rows' positions, [N, C].
  std::vector<std::vector<double>> features(hooks.size());
  std::size_t width = 0;
  ForwardOptions o;
  o.hooks.cache = hooks;
  std::optional<EvalScope> scope(std::in_place, in.model);  // the forwards run without a graph; the probes train with one
  for (std::size_t bi = 0; bi < in.batches.size(); ++bi) {
    if (std::find(rows.batch.begin(), rows.batch.end(), bi) == rows.batch.end()) break;
    const ModelOutput run = in.model.forward(in.batches[bi], o);
    for (std::size_t k = 0; k < hooks.size(); ++k) {
      const Tensor& stream = run.cache.at(hooks[k]);  // [B, T, C]; a ViT's positions are its patches (and CLS)
      const std::vector<double> v = stream.to_vector();
      const std::size_t t = stream.size(1);
      width = stream.size(2);
      for (std::size_t i = 0; i < rows.batch.size(); ++i)
        if (rows.batch[i] == bi) features[k].insert(features[k].end(), v.begin() + ((rows.row[i] * t) + rows.stream[i]) * width,
                                                   v.begin() + ((rows.row[i] * t) + rows.stream[i] + 1) * width);
    }
  }
  scope.reset();
  std::vector<double> accuracy, chance;
  for (std::size_t k = 0; k < hooks.size(); ++k) {
    for (const auto& [name, raw] : properties) {
      std::vector<std::int64_t> labels, groups;
      std::vector<bool> keep;
      const std::size_t classes = as_classes(raw, labels, keep);
      std::vector<double> kept;
      for (std::size_t i = 0; i < keep.size(); ++i)
        if (keep[i]) {
          kept.insert(kept.end(), features[k].begin() + i * width, features[k].begin() + (i + 1) * width);
          groups.push_back(rows.group[i]);
        }
      if (classes < 2 || std::set<std::int64_t>(groups.begin(), groups.end()).size() < 2) {  // nothing to tell apart
        accuracy.push_back(NAN);
        chance.push_back(NAN);
        continue;
      }
      LinearProbeOptions po;
      po.seed = seed;
      const LinearProbeResult r = train_linear_probe(from_vector(kept, {labels.size(), width}, DType::float32), labels, classes, groups, po);
      accuracy.push_back(r.held_out_accuracy);
      chance.push_back(r.majority_accuracy);
    }
  }
  std::vector<std::string> cols;
  for (const auto& p : properties) cols.push_back(p.first);
  out.add({"probes_accuracy", "probes", "Linear probe held-out accuracy of each layer's residual stream (examples never trained on)" + part_title(stack.part), "stream",
           "property", names, cols, accuracy, false, true});
  out.add({"probes_chance", "probes", "The most common training label's share of the held-out rows (chance)" + part_title(stack.part), "stream", "property", names, cols,
           chance, false});
}

namespace {

class ProbesPart {
 public:
  static constexpr const char* kName = "probes";
  static constexpr const char* kDescription = "linear probes of each layer's residual stream (position, token, previous token, the task's own)";
  static constexpr const char* kTitle = "Linear probes of the residual stream";
  static constexpr int kOrder = 60;
  struct Options {};
  static Schema<Options> options_schema() { return {}; }
  static void run(const PartInputs& p, const Options&) { residual_probes(p.in, p.run.config.seed + 5, p.result); }
};

}  // namespace

ATTNLAB_REGISTER_ANALYSIS(ProbesPart);

}  // namespace attnlab
