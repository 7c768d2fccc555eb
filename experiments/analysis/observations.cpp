// The observational methods: what the heads attend to by TransformerLens's definitions, on held-out
// examples and on repeated random tokens; what each layer's residual stream holds (linear probes);
// where a ViT looked (rollout); and when in training each behaviour appeared (emergence).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <regex>
#include <set>

#include "experiments/analysis/analysis.hpp"
#include "experiments/analysis/detectors.hpp"
#include "experiments/analysis/linear_probe.hpp"
#include "experiments/runner/metrics_log.hpp"
#include "framework/io/npy.hpp"
#include "framework/models/text_models.hpp"
#include "framework/models/vit.hpp"

namespace attnlab {
namespace {

namespace fs = std::filesystem;
using I = std::int64_t;

// One row's tokens up to its real length (padding as -1, never a match) and that length.
std::vector<std::int64_t> row_tokens(const data::DataSource& data, const Tensor& ids, const Tensor& mask, std::size_t r, std::size_t& length) {
  const std::size_t t = ids.size(1);
  const std::int64_t* p = ids.data<std::int64_t>() + r * t;
  const bool* pad = mask.defined() ? mask.data<bool>() + r * t : nullptr;
  std::vector<std::int64_t> tokens;
  length = 0;
  for (std::size_t i = 0; i < t; ++i) {
    tokens.push_back(data.is_padding(p[i]) ? -1 : p[i]);
    if (!pad || !pad[i]) length = i + 1;
  }
  return tokens;
}

// Every detector's score summed per head over sequences (NaN scores, of patterns without mass, skipped),
// for the means over examples or probes.
struct DetectorSums {
  std::map<DetectorKind, std::vector<double>> sum, count;
  explicit DetectorSums(std::size_t heads) {
    for (DetectorKind kind : detector_kinds()) sum[kind].assign(heads, 0.0), count[kind].assign(heads, 0.0);
  }
  // Head k's [t, t] pattern of one sequence, its first `length` positions real.
  void add(std::size_t k, const double* pattern, std::size_t t, const std::vector<std::int64_t>& tokens, std::size_t length) {
    for (DetectorKind kind : detector_kinds()) {
      const double s = detector_score(kind, pattern, t, t, tokens, length, DetectorOptions{});
      if (std::isfinite(s)) sum[kind][k] += s, count[kind][k] += 1;
    }
  }
  std::vector<double> mean(DetectorKind kind) const {
    std::vector<double> m;
    for (std::size_t i = 0; i < sum.at(kind).size(); ++i) m.push_back(count.at(kind)[i] ? sum.at(kind)[i] / count.at(kind)[i] : NAN);
    return m;
  }
};

// The largest (or smallest) finite value; NaN when there is none.
double finite_extreme(const std::vector<double>& values, bool largest) {
  double best = NAN;
  for (double v : values)
    if (std::isfinite(v) && (std::isnan(best) || (largest ? v > best : v < best))) best = v;
  return best;
}

}  // namespace

void head_detectors(const AnalysisInputs& in, AnalysisResult& out) {
  if (!in.data.token_inputs()) return;
  EvalScope scope(in.model);
  const std::size_t heads = in.model.n_heads();
  for (const Model::AttentionPart& part : in.model.attention_parts()) {
    if (part.target_queries != part.target_keys) continue;  // cross-attention: queries and keys are different sequences
    const std::size_t layers = part.pattern_hooks.size();
    DetectorSums sums(layers * heads);
    for (const Batch& b : in.batches) {
      ForwardOptions o;
      o.hooks.cache = part.pattern_hooks;
      const ModelOutput run = in.model.forward(b, o);
      const Tensor& ids = part.target_keys ? b.decoder_input : b.input;
      const Tensor& mask = part.target_keys ? b.decoder_padding_mask : b.key_padding_mask;
      std::vector<std::vector<std::int64_t>> tokens;
      std::vector<std::size_t> lengths(ids.size(0));
      for (std::size_t r = 0; r < ids.size(0); ++r) tokens.push_back(row_tokens(in.data, ids, mask, r, lengths[r]));
      for (std::size_t l = 0; l < layers; ++l) {
        const auto it = run.cache.find(part.pattern_hooks[l]);
        if (it == run.cache.end() || !it->second.defined()) return;  // a kernel without a pattern
        const std::vector<double> v = it->second.to_vector();     // [B, H, T, T]
        const std::size_t t = it->second.size(2);
        for (std::size_t r = 0; r < ids.size(0); ++r)
          for (std::size_t h = 0; h < heads; ++h) sums.add(l * heads + h, v.data() + (r * heads + h) * t * t, t, tokens[r], lengths[r]);
      }
    }
    for (DetectorKind kind : detector_kinds()) {
      const std::vector<double> values = sums.mean(kind);
      out.add({"detector_" + part_prefix(part.name) + detector_name(kind), "detectors",
               std::string("TransformerLens ") + detector_name(kind) + " score (mul, mean over held-out examples)" + part_title(part.name),
               "layer", "head", numbered(layers), numbered(heads), values, false});
      out.facts["detectors." + part_prefix(part.name) + detector_name(kind) + ".max"] = finite_extreme(values, true);
    }
  }
}

void repeated_tokens_test(const AnalysisInputs& in, std::uint64_t seed, AnalysisResult& out) {
  if (!dynamic_cast<const CausalLM*>(&in.model) || !in.data.token_inputs()) return;  // a next-token model reading tokens
  EvalScope scope(in.model);
  std::set<std::int64_t> seen;
  std::size_t length = 0;
  for (const Batch& b : in.batches) {
    const std::int64_t* p = b.input.data<std::int64_t>();
    for (std::size_t i = 0; i < b.input.numel(); ++i)
      if (!in.data.is_padding(p[i])) seen.insert(p[i]);
    length = std::max(length, b.input.size(1));
  }
  const std::size_t half = length / 2, rows = 64;
  if (half < 2 || seen.size() < 2) return;
  const std::vector<std::int64_t> symbols(seen.begin(), seen.end());
  Generator gen(seed);
  std::vector<std::int64_t> ids, first, second;  // the inputs; targets scored on the first copy, on the second
  for (std::size_t r = 0; r < rows; ++r) {
    std::vector<std::int64_t> row;
    for (std::size_t i = 0; i < half; ++i) row.push_back(symbols[gen.next_below(symbols.size())]);
    row.insert(row.end(), row.begin(), row.end());
    for (std::size_t i = 0; i < 2 * half; ++i) {
      const std::int64_t next = i + 1 < 2 * half ? row[i + 1] : data::kIgnore;
      first.push_back(i + 1 < half ? next : data::kIgnore);
      second.push_back(i >= half && i + 1 < 2 * half ? next : data::kIgnore);  // from the second copy's first token on
    }
    ids.insert(ids.end(), row.begin(), row.end());
  }
  Batch batch;
  batch.input = from_indices(ids, {rows, 2 * half});
  batch.target = from_indices(second, {rows, 2 * half});
  ForwardOptions o;
  o.hooks.cache = in.model.attention_parts()[0].pattern_hooks;
  const ModelOutput run = in.model.forward(batch, o);
  out.facts["repeated_tokens.loss_first_copy"] = cross_entropy(run.logits, from_indices(first, {rows, 2 * half}), data::kIgnore).item();
  out.facts["repeated_tokens.loss_second_copy"] = cross_entropy(run.logits, batch.target, data::kIgnore).item();
  out.facts["repeated_tokens.half_length"] = static_cast<double>(half);
  const std::size_t heads = in.model.n_heads(), layers = o.hooks.cache.size();
  std::vector<double> values(layers * heads, 0.0);
  for (std::size_t l = 0; l < layers; ++l) {
    const auto it = run.cache.find(o.hooks.cache[l]);
    if (it == run.cache.end() || !it->second.defined()) return;
    const std::vector<double> v = it->second.to_vector();
    const std::size_t t = 2 * half;
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t h = 0; h < heads; ++h)
        values[l * heads + h] += repeated_tokens_induction_score(v.data() + (r * heads + h) * t * t, t, t, half) / static_cast<double>(rows);
  }
  out.add({"repeated_tokens_induction", "detectors",
           "Repeated random tokens: mean attention from each token of the second copy to the token after its first occurrence", "layer",
           "head", numbered(layers), numbered(heads), values, false});
  out.facts["repeated_tokens.induction_max"] = finite_extreme(values, true);
}

namespace {

// The rows a probe reads: every real position of the first examples (at most `limit` rows), each
// stream's vector there, and the labels of the properties every token sequence has.
struct ProbeRows {
  std::vector<std::size_t> batch, row, position;
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
    for (const auto& [name, labels] : task)
      if (std::none_of(rows.task.begin(), rows.task.end(), [&](const auto& p) { return p.first == name; })) rows.task.push_back({name, {}});
    for (std::size_t r = 0; r < b.input.size(0) && rows.batch.size() < limit; ++r, ++example) {
      std::size_t length = t;
      const std::vector<std::int64_t> ids = tokens ? row_tokens(in.data, b.input, b.key_padding_mask, r, length) : std::vector<std::int64_t>(t, -1);
      for (std::size_t i = 0; i < length; ++i) {
        for (std::size_t k = 0; k < task.size(); ++k) rows.task[k].second.push_back(task[k].second[r * t + i]);
        rows.batch.push_back(bi);
        rows.row.push_back(r);
        rows.position.push_back(i);
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
  std::vector<std::string> stack;
  for (const PartBlocks& p : part_blocks(in.model))
    if (p.attention != "cross_attn" && stack.empty()) stack = p.blocks;  // the first stack: the one reading the input
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
        if (rows.batch[i] == bi) features[k].insert(features[k].end(), v.begin() + ((rows.row[i] * t) + rows.position[i]) * width,
                                                   v.begin() + ((rows.row[i] * t) + rows.position[i] + 1) * width);
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
  out.add({"probes_accuracy", "probes", "Linear probe held-out accuracy of each layer's residual stream (examples never trained on)", "stream",
           "property", names, cols, accuracy, false});
  out.add({"probes_chance", "probes", "The most common training label's share of the held-out rows (chance)", "stream", "property", names, cols,
           chance, false});
}

void rollout_maps(const AnalysisInputs& in, const RolloutOptions& options, const std::string& dir, AnalysisResult& out) {
  const ViT* vit = dynamic_cast<const ViT*>(&in.model);
  if (!vit || in.batches.empty()) return;
  EvalScope scope(in.model);
  const Batch& b = in.batches[0];
  ForwardOptions o;
  o.hooks.cache = in.model.attention_parts()[0].pattern_hooks;
  const ModelOutput run = in.model.forward(b, o);
  const std::size_t images = std::min<std::size_t>(8, b.input.size(0));
  std::vector<Tensor> maps;
  for (std::size_t p = 0; p < images; ++p) {
    std::vector<Tensor> layers;
    for (const std::string& hook : o.hooks.cache) {
      const auto it = run.cache.find(hook);
      if (it == run.cache.end() || !it->second.defined()) {
        out.notes.push_back("rollout: the kernel has no pattern");
        return;
      }
      const Tensor one = slice(it->second, 0, static_cast<I>(p), static_cast<I>(p) + 1);
      layers.push_back(squeeze(one, 0));
    }
    const Tensor map = rollout_map(attention_rollout(layers, options, vit->class_token()), vit->class_token());
    const Tensor image = slice(b.input, 0, static_cast<I>(p), static_cast<I>(p) + 1);
    const std::string file = "rollout_probe_" + std::to_string(p) + ".png";
    write_rollout_png(dir + "/" + file, squeeze(image, 0), map);
    out.images.push_back(file);
    maps.push_back(unsqueeze(map, 0));
  }
  write_npy(dir + "/rollout_maps.npy", concat(maps, 0));
  char ratio[32];
  std::snprintf(ratio, sizeof ratio, "%g", options.discard_ratio);
  out.notes.push_back(std::string("rollout: head fusion ") + head_fusion_name(options.head_fusion) + ", discard ratio " + ratio + ", the first " +
                      std::to_string(images) + " held-out images");
}

namespace {

// The step of each pattern capture under patterns/ ("step_S_probe_P<suffix>.npy"), and the probes.
std::map<std::size_t, std::vector<std::size_t>> captured(const std::string& patterns, const std::string& suffix) {
  std::map<std::size_t, std::vector<std::size_t>> steps;
  const std::regex name("step_([0-9]+)_probe_([0-9]+)" + suffix + "\\.npy");
  std::smatch m;
  for (const auto& entry : fs::directory_iterator(patterns)) {
    const std::string file = entry.path().filename().string();
    if (std::regex_match(file, m, name)) steps[std::stoul(m[1])].push_back(std::stoul(m[2]));
  }
  return steps;
}

// The first eval step at which `column` has come half of the way from its first value to its best.
double metric_jump_step(const RunRecord& run, const std::string& column) {
  const auto curve = run.eval_curve(column);
  if (curve.size() < 2) return NAN;
  double best = curve[0].second;
  for (const auto& [step, v] : curve) best = std::max(best, v);
  const double half = curve[0].second + 0.5 * (best - curve[0].second);
  if (!(best > curve[0].second)) return NAN;
  for (const auto& [step, v] : curve)
    if (v >= half) return step;
  return NAN;
}

// attnlab's own head metrics as the run logged them at each capture: per part and metric, the first step
// each head's score reached `threshold`.
void metric_emergence(const RunRecord& run, double threshold, AnalysisResult& out) {
  const std::pair<const char*, double HeadMetrics::*> metrics[] = {{"previous_token", &HeadMetrics::previous_token},
                                                                   {"induction", &HeadMetrics::induction}};
  std::map<std::string, std::pair<std::size_t, std::size_t>> shape;  // part -> (layers, heads)
  for (const PatternCapture& c : run.captures)
    for (const HeadMetricRow& h : c.heads) {
      auto& s = shape[h.part];
      s = {std::max(s.first, h.layer + 1), std::max(s.second, h.head + 1)};
    }
  for (const auto& [part, size] : shape) {
    if (part == "cross") continue;  // no tokens to repeat across two sequences
    for (const auto& [name, member] : metrics) {
      std::vector<double> first(size.first * size.second, NAN);
      for (const PatternCapture& c : run.captures)
        for (const HeadMetricRow& h : c.heads) {
          double& f = first[h.layer * size.second + h.head];
          if (h.part == part && std::isnan(f) && h.metrics.*member >= threshold) f = static_cast<double>(c.step);
        }
      out.add({"emergence_" + part_prefix(part) + name, "emergence",
               std::string("First captured step at which the head's ") + name + " score (attnlab's, patterns.hpp) reached " +
                   std::to_string(threshold).substr(0, 4) + part_title(part) + " (blank: never)",
               "layer", "head", numbered(size.first), numbered(size.second), first, false});
      out.facts["emergence." + part_prefix(part) + name + ".first_step"] = finite_extreme(first, false);
    }
  }
}

// TransformerLens's detector scores of the best head at each capture, from the saved patterns.
void detector_series(const std::string& patterns, const std::string& part, AnalysisResult& out) {
  const std::string suffix = part.empty() ? "" : "_" + part, side = part == "decoder" ? "_target_" : "_";
  const auto steps = captured(patterns, suffix);
  std::vector<std::string> rows;
  std::vector<double> values;
  for (const auto& [step, probes] : steps) {
    std::unique_ptr<DetectorSums> sums;  // sized by the first probe's [layers, heads, T, T]
    for (std::size_t p : probes) {
      const std::string tokens_file = patterns + "/probe_" + std::to_string(p) + side + "tokens.npy";
      if (!fs::exists(tokens_file)) return;  // images: no tokens to define the detectors
      const Tensor pattern = read_npy(patterns + "/step_" + std::to_string(step) + "_probe_" + std::to_string(p) + suffix + ".npy");
      const Tensor tokens = read_npy(tokens_file);
      const std::vector<std::int64_t> ids(tokens.data<std::int64_t>(), tokens.data<std::int64_t>() + tokens.numel());
      const std::size_t heads = pattern.size(0) * pattern.size(1), t = pattern.size(2);
      if (!sums) sums = std::make_unique<DetectorSums>(heads);
      const std::vector<double> v = pattern.to_vector();
      for (std::size_t k = 0; k < heads; ++k) sums->add(k, v.data() + k * t * t, t, ids, t);
    }
    rows.push_back(std::to_string(step));
    for (DetectorKind kind : detector_kinds()) values.push_back(finite_extreme(sums->mean(kind), true));
  }
  if (rows.empty()) return;
  std::vector<std::string> cols;
  for (DetectorKind kind : detector_kinds()) cols.push_back(detector_name(kind));
  out.add({"emergence_" + part_prefix(part) + "detectors", "emergence",
           "TransformerLens detector score of the best head at each captured step (mean over the probes)" + part_title(part), "step",
           "detector", rows, cols, values, false});
}

}  // namespace

void emergence(const std::string& run_dir, double threshold, AnalysisResult& out) {
  const std::string patterns = run_dir + "/patterns";
  if (!fs::is_directory(patterns)) {
    out.notes.push_back("emergence: the run captured no patterns (log.patterns: false)");
    return;
  }
  const RunRecord run = read_run(run_dir);
  out.facts["emergence.metric_jump_step"] = metric_jump_step(run, "token_accuracy");
  out.facts["emergence.threshold"] = threshold;
  metric_emergence(run, threshold, out);
  for (const std::string& part : {std::string(), std::string("encoder"), std::string("decoder")}) detector_series(patterns, part, out);
}

}  // namespace attnlab
