// Activation patching: the task's clean/corrupted pairs (PatchingPairs, framework/tensor/batch.hpp); the
// corrupted run with one head's output, or the residual stream at one position, taken from the clean
// run; the restored share of the answer's logit difference.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <tuple>

#include "experiments/analysis/part.hpp"
#include "experiments/runner/memory_estimate.hpp"

namespace attnlab {

namespace {

// Per pair, logit[position, clean answer] - logit[position, corrupted answer].
std::vector<double> logit_differences(const Tensor& logits, const data::PatchingPairs& pairs) {
  const bool per_token = logits.dim() == 3;
  const std::size_t t = per_token ? logits.size(1) : 1, classes = logits.size(logits.dim() - 1);
  std::vector<double> d;
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    const std::size_t row = (i * t + (per_token ? pairs.position[i] : 0)) * classes;
    d.push_back(element(logits, row + static_cast<std::size_t>(pairs.clean_answer[i])) -
                element(logits, row + static_cast<std::size_t>(pairs.corrupted_answer[i])));
  }
  return d;
}

// Patching one activation: the corrupted run with `hook`'s selected slice (`selector`, broadcast over
// the activation) taken from the clean run's cache; the logit difference of each pair.
std::vector<double> patched_differences(Model& model, const data::PatchingPairs& pairs, const std::map<std::string, Tensor>& clean,
                                        const std::string& hook, const Tensor& selector) {
  const Tensor& from = clean.at(hook);
  ForwardOptions o;
  o.hooks.replace = {{hook, [&](const Tensor& x, const std::string&) {
                        const Tensor m = selector.to(x.dtype());
                        return x * (1.0 - m) + from * m;
                      }}};
  return logit_differences(model.forward(pairs.corrupted, o).logits, pairs);
}

// The restored share of the logit difference, (patched - corrupted) / (clean - corrupted) of the means
// over the pairs (weighted by a bootstrap draw's counts), with its interval over the pairs.
struct Restored {
  const std::vector<double>& clean;
  const std::vector<double>& corrupted;
  const Bootstrap& boot;
  const std::vector<double> ones = std::vector<double>(clean.size(), 1.0);  // the means' denominators
  double share(const std::vector<double>& patched, const std::vector<double>& w) const {
    const double c = weighted_ratio(clean, ones, w), k = weighted_ratio(corrupted, ones, w), p = weighted_ratio(patched, ones, w);
    return std::fabs(c - k) > 1e-9 ? (p - k) / (c - k) : NAN;
  }
  // Appends the share of `patched` and its interval to a table's columns.
  void add(const std::vector<double>& patched, AnalysisTable& t) const {
    t.values.push_back(share(patched, {}));
    const auto [low, high] = boot.interval([&](const std::vector<double>& w) { return share(patched, w); });
    t.low.push_back(low), t.high.push_back(high);
  }
};

double mean_of(const std::vector<double>& v) {
  double total = 0;
  for (double x : v) total += x;
  return v.empty() ? NAN : total / static_cast<double>(v.size());
}

// The residual streams a patch at one position can take: each block's input, per stack (the encoder's
// and the decoder's for an encoder-decoder, whose positions are the source's and the target's).
std::vector<std::pair<std::string, std::vector<std::string>>> residual_streams(const Model& model) {
  std::vector<std::pair<std::string, std::vector<std::string>>> streams;
  for (const PartBlocks& part : part_blocks(model)) {
    if (part.attention == "cross_attn") continue;
    std::vector<std::string> hooks = stack_streams(part).hooks;
    hooks.pop_back();  // each block's input; the last block's output is read out, not patched
    streams.push_back({part.part, hooks});
  }
  return streams;
}

std::vector<std::string> position_labels(const data::DataSource& data, const Tensor& ids, bool target) {
  std::vector<std::string> labels;
  const std::int64_t* p = ids.data<std::int64_t>();
  for (std::size_t i = 0; i < ids.size(1); ++i) labels.push_back(std::to_string(i) + " " + (target ? data.target_label(p[i]) : data.token_label(p[i], i)));
  return labels;
}

// The clean and corrupted logit differences with their intervals, and a warning when the corruption does
// not switch the answer: the restored shares then measure a move between two runs that agree.
void baseline_facts(const std::vector<double>& clean, const std::vector<double>& corrupted, const Bootstrap& boot, AnalysisResult& out) {
  const std::vector<double> ones(clean.size(), 1.0);
  const std::pair<const char*, const std::vector<double>*> sides[] = {{"clean", &clean}, {"corrupted", &corrupted}};
  for (const auto& [side, diffs] : sides) {
    const std::string key = std::string("patching.") + side + "_logit_diff";
    out.facts[key] = mean_of(*diffs);
    std::tie(out.facts[key + "_low"], out.facts[key + "_high"]) = boot.interval([&, diffs = diffs](const std::vector<double>& w) { return weighted_ratio(*diffs, ones, w); });
  }
  std::size_t flipped = 0;
  for (double d : corrupted) flipped += d < 0;
  out.facts["patching.corrupted_flipped_share"] = static_cast<double>(flipped) / static_cast<double>(corrupted.size());
  if (mean_of(corrupted) >= 0) {
    char text[400];
    std::snprintf(text, sizeof text,
                  "patching: warning: the corrupted inputs do not switch the answer (mean logit difference %+.2f corrupted against %+.2f clean; "
                  "%zu of %zu pairs flip): the restored shares measure how much of the clean run's margin a patch brings back, not a switched answer",
                  mean_of(corrupted), mean_of(clean), flipped, corrupted.size());
    out.notes.push_back(text);
  }
  // The shares divide by the gap between the two runs: one whose interval reaches 0 (a model that has not
  // learnt the task, whatever the sign of the corrupted run's difference) makes them any number at all.
  std::vector<double> gap(clean.size());
  for (std::size_t i = 0; i < gap.size(); ++i) gap[i] = clean[i] - corrupted[i];
  const auto [low, high] = boot.interval([&](const std::vector<double>& w) { return weighted_ratio(gap, ones, w); });
  if (!(low > 0)) {
    char text[400];
    std::snprintf(text, sizeof text,
                  "patching: warning: the clean run's logit difference is not clearly above the corrupted run's (gap %+.3g, 95%% "
                  "interval %+.3g to %+.3g over the pairs): the restored shares divide by it, and mean nothing here",
                  mean_of(gap), low, high);
    out.notes.push_back(text);
  }
}

// Path patching (Wang et al. 2022): a sender head's effect through one receiver head's queries, keys or
// values alone. The corrupted run with the sender's output from the clean run, every other head and MLP
// between the two frozen at their corrupted values, gives the receiver layer's q, k and v; the corrupted
// run with only the receiver head's q (or k, or v) taken from there gives the logit difference. Tables:
// senders down (first the embedding: the stack's input, every head and MLP frozen, is the direct path),
// receivers across, one per input (q, k, v); NaN where the receiver is not later.
void path_patching(Model& model, const data::PatchingPairs& pairs, const PartBlocks& part, const std::map<std::string, Tensor>& clean,
                   const Restored& restored, AnalysisResult& out) {
  const std::size_t heads = model.n_heads(), layers = part.blocks.size();
  const auto z_hook = [&](std::size_t l) { return part.blocks[l] + part.attention + ".hook_z"; };
  ForwardOptions record;
  for (std::size_t l = 0; l < layers; ++l) {
    record.hooks.cache.push_back(z_hook(l));
    if (part.feed_forward) record.hooks.cache.push_back(part.blocks[l] + "hook_mlp_out");
  }
  const std::map<std::string, Tensor> corrupted = model.forward(pairs.corrupted, record).cache;
  const char* inputs[] = {"q", "k", "v"};
  std::vector<AnalysisTable> tables;
  std::vector<std::string> senders{"embed"}, receivers;  // the embedding: the direct path from the input
  for (std::size_t l = 0; l + 1 < layers; ++l)
    for (std::size_t h = 0; h < heads; ++h) senders.push_back(std::to_string(l) + "." + std::to_string(h));
  for (std::size_t l = 1; l < layers; ++l)
    for (std::size_t h = 0; h < heads; ++h) receivers.push_back(std::to_string(l) + "." + std::to_string(h));
  for (const char* input : inputs) {
    tables.push_back({"patching_" + part_prefix(part.part) + "path_" + input, "patching",
                      std::string("Path patching: restored share of the logit difference through each receiver head's ") + input +
                          " alone, the sender head's output from the clean run" + part_title(part.part),
                      "sender", "receiver", senders, receivers, {}, true, std::string(input) == "k", pairs.size()});
  }
  for (std::size_t s = 0; s < senders.size(); ++s) {
    const bool embed = s == 0;
    const std::size_t ls = embed ? 0 : (s - 1) / heads, hs = embed ? 0 : (s - 1) % heads;
    for (std::size_t lr = 1; lr < layers; ++lr) {
      if (lr <= ls) {
        for (AnalysisTable& t : tables)
          for (std::size_t h = 0; h < heads; ++h) t.values.push_back(NAN), t.low.push_back(NAN), t.high.push_back(NAN);
        continue;
      }
      ForwardOptions o;  // the sender patched in, everything between frozen, the receiver layer's inputs cached
      const std::string input = part.blocks[0] + "hook_resid_pre";
      if (embed) {
        o.hooks.replace.push_back({input, [&](const Tensor&, const std::string&) { return clean.at(input); }});
      } else {
        const Tensor sel = one_hot_selector(heads, hs, {1, heads, 1, 1}, DType::float32);
        o.hooks.replace.push_back({z_hook(ls), [&, sel](const Tensor& z, const std::string&) {
                                     const Tensor m = sel.to(z.dtype());
                                     return corrupted.at(z_hook(ls)) * (1.0 - m) + clean.at(z_hook(ls)) * m;
                                   }});
      }
      for (std::size_t l = ls; l < lr; ++l) {
        if (l > ls || embed) o.hooks.replace.push_back({z_hook(l), [&, l](const Tensor&, const std::string&) { return corrupted.at(z_hook(l)); }});
        if (part.feed_forward) {
          const std::string mlp = part.blocks[l] + "hook_mlp_out";
          o.hooks.replace.push_back({mlp, [&, mlp](const Tensor&, const std::string&) { return corrupted.at(mlp); }});
        }
      }
      for (const char* input : inputs) o.hooks.cache.push_back(part.blocks[lr] + part.attention + ".hook_" + input);
      const std::map<std::string, Tensor> sent = model.forward(pairs.corrupted, o).cache;
      for (std::size_t i = 0; i < 3; ++i) {
        const std::string hook = part.blocks[lr] + part.attention + ".hook_" + inputs[i];
        for (std::size_t hr = 0; hr < heads; ++hr)
          restored.add(patched_differences(model, pairs, sent, hook, one_hot_selector(heads, hr, {1, heads, 1, 1}, DType::float32)), tables[i]);
      }
    }
  }
  for (AnalysisTable& t : tables) out.add(std::move(t));
}

// The clean run's value of `hook`, or nothing when the model has no such point (a kernel without a
// pattern).
std::optional<Tensor> clean_value(Model& model, const data::PatchingPairs& pairs, const std::string& hook) {
  ForwardOptions o;
  o.hooks.cache = {hook};
  try {
    const std::map<std::string, Tensor> cache = model.forward(pairs.clean, o).cache;
    const auto it = cache.find(hook);
    if (it != cache.end() && it->second.defined()) return it->second;
  } catch (const UnknownActivation&) {
  }
  return std::nullopt;
}

// Finer patching of one attention part: each layer's whole q, k, v, pattern, head outputs, attention
// output and MLP output from the clean run (every head and position at once), and each head's output at
// one query position.
void finer_patching(Model& model, const data::DataSource& data, const data::PatchingPairs& pairs, const PartBlocks& part,
                    const Restored& restored, AnalysisResult& out) {
  const std::size_t heads = model.n_heads(), layers = part.blocks.size();
  std::vector<std::string> points{"q", "k", "v", "pattern", "z", "attn_out"};
  if (part.feed_forward) points.push_back("mlp_out");
  AnalysisTable whole{"patching_" + part_prefix(part.part) + "layers", "patching",
                      "Restored share of the logit difference, patching one activation of a layer whole (every head and position)" +
                          part_title(part.part),
                      "layer", "activation", numbered(layers), points, {}, true, false, pairs.size()};
  const bool cross = part.attention == "cross_attn";
  for (std::size_t l = 0; l < layers; ++l) {
    for (const std::string& point : points) {
      const bool stream = point == "attn_out" || point == "mlp_out";
      const std::string hook = part.blocks[l] + (stream ? "hook_" + std::string(cross && point == "attn_out" ? "cross_attn_out" : point)
                                                        : part.attention + ".hook_" + point);
      const std::optional<Tensor> value = clean_value(model, pairs, hook);
      if (!value) {
        whole.values.push_back(NAN), whole.low.push_back(NAN), whole.high.push_back(NAN);
        continue;
      }
      const std::map<std::string, Tensor> cache{{hook, *value}};
      restored.add(patched_differences(model, pairs, cache, hook, ones(Shape(value->dim(), 1), DType::float32)), whole);
    }
  }
  out.add(whole);
  const bool target = part.attention == "cross_attn" || part.part == "decoder";  // queries at the decoder's positions
  const Tensor& ids = target ? pairs.clean.decoder_input : pairs.clean.input;
  if (!ids.defined() || ids.dtype() != DType::int64) return;  // images: positions are patches
  const std::size_t t = ids.size(1);
  std::vector<std::string> rows;
  for (std::size_t l = 0; l < layers; ++l)
    for (std::size_t h = 0; h < heads; ++h) rows.push_back(std::to_string(l) + "." + std::to_string(h));
  AnalysisTable per{"patching_" + part_prefix(part.part) + "head_positions", "patching",
                    "Restored share of the logit difference, patching one head's output at one query position" + part_title(part.part), "head",
                    "position", rows, position_labels(data, slice(ids, 0, 0, 1), target), {}, true, false, pairs.size()};
  for (std::size_t l = 0; l < layers; ++l) {
    const std::string hook = part.blocks[l] + part.attention + ".hook_z";
    const std::map<std::string, Tensor> cache{{hook, *clean_value(model, pairs, hook)}};
    for (std::size_t h = 0; h < heads; ++h)
      for (std::size_t i = 0; i < t; ++i) {
        std::vector<double> cell(heads * t, 0.0);
        cell[h * t + i] = 1.0;
        restored.add(patched_differences(model, pairs, cache, hook, from_vector(cell, {1, heads, t, 1}, DType::float32)), per);
      }
  }
  out.add(per);
}

}  // namespace

void activation_patching(Model& model, const data::DataSource& data, const data::PatchingPairs& pairs, std::uint64_t seed, AnalysisResult& out) {
  if (pairs.size() == 0) {
    out.notes.push_back("patching: this task provides no clean/corrupted pairs");
    return;
  }
  EvalScope scope(model);  // eval mode, no graph
  ForwardOptions all;
  for (const PartBlocks& part : part_blocks(model))
    for (const std::string& block : part.blocks) all.hooks.cache.push_back(block + part.attention + ".hook_z");
  for (const auto& stream : residual_streams(model)) all.hooks.cache.insert(all.hooks.cache.end(), stream.second.begin(), stream.second.end());
  const ModelOutput clean = model.forward(pairs.clean, all);
  const std::vector<double> clean_diff = logit_differences(clean.logits, pairs), corrupted_diff = logit_differences(model.forward(pairs.corrupted).logits, pairs);
  const Bootstrap boot(pairs.size(), seed);
  const Restored restored{clean_diff, corrupted_diff, boot};
  baseline_facts(clean_diff, corrupted_diff, boot, out);
  out.notes.push_back("patching: " + std::to_string(pairs.size()) + " pairs, " + pairs.corruption);
  const std::size_t heads = model.n_heads();
  for (const PartBlocks& part : part_blocks(model)) {
    AnalysisTable t{"patching_" + part_prefix(part.part) + "heads", "patching",
                    "Restored share of the logit difference, patching each head's output" + part_title(part.part), "layer", "head",
                    numbered(part.blocks.size()), numbered(heads), {}, true, true, pairs.size()};
    for (std::size_t l = 0; l < part.blocks.size(); ++l) {
      for (std::size_t h = 0; h < heads; ++h) {
        const Tensor sel = one_hot_selector(heads, h, {1, heads, 1, 1}, DType::float32);
        restored.add(patched_differences(model, pairs, clean.cache, part.blocks[l] + part.attention + ".hook_z", sel), t);
      }
    }
    out.add(t);
    finer_patching(model, data, pairs, part, restored, out);
  }
  for (const auto& [stack, hooks] : residual_streams(model)) {
    const bool target = stack == "decoder";
    const Tensor& ids = target ? pairs.clean.decoder_input : pairs.clean.input;
    if (!ids.defined() || ids.dtype() != DType::int64) continue;  // images: positions are patches, not tokens
    const std::size_t t = ids.size(1);
    AnalysisTable table{"patching_" + part_prefix(stack) + "residual", "patching",
                        "Restored share of the logit difference, patching the residual stream at one position (block input)" + part_title(stack),
                        "layer", "position", numbered(hooks.size()), position_labels(data, slice(ids, 0, 0, 1), target), {}, true, false, pairs.size()};
    for (const std::string& hook : hooks)
      for (std::size_t i = 0; i < t; ++i)
        restored.add(patched_differences(model, pairs, clean.cache, hook, one_hot_selector(t, i, {1, t, 1}, DType::float32)), table);
    out.add(table);
  }
  for (const PartBlocks& part : part_blocks(model))
    if (part.attention == "attn" && part.blocks.size() >= 2) path_patching(model, pairs, part, clean.cache, restored, out);
}

namespace {

class PatchingPart {
 public:
  static constexpr const char* kName = "patching";
  static constexpr const char* kDescription =
      "the corrupted run of the task's clean/corrupted pairs with one head's output, or one residual position, from the clean run: "
      "the restored share of the logit difference";
  static constexpr const char* kTitle = "Activation patching: where the answer is carried";
  static constexpr int kOrder = 20;
  struct Options {
    std::size_t pairs = 64;
  };
  static Schema<Options> options_schema() {
    Schema<Options> s;
    s.field("pairs", &Options::pairs, "clean/corrupted pairs, forwarded as one batch", Range::closed(1, 100000));
    return s;
  }
  // The pairs are forwarded as one batch, every head's output and residual stream cached: refused before
  // anything is drawn when that batch would not fit in memory (as training refuses its batch).
  static void check_run(const Options& o, const ExperimentConfig& config) {
    ExperimentConfig one_batch = config;
    one_batch.train.batch_size = o.pairs;
    one_batch.log.patterns = false;
    const MemoryEstimate m = estimate_memory(one_batch);
    const double needs = m.activations + m.data, limit = physical_memory_bytes() / 2;  // a training step's, about the forward with its caches
    if (needs <= limit) return;
    const double fit = std::floor(static_cast<double>(o.pairs) * limit / needs);
    throw std::invalid_argument("--pairs " + std::to_string(o.pairs) + ": patching forwards them as one batch, about " +
                                std::to_string(static_cast<long long>(needs / (1 << 20))) + " MiB with its caches, more than half of this machine's " +
                                std::to_string(static_cast<long long>(physical_memory_bytes() / (1 << 20))) + " MiB; give at most " +
                                std::to_string(static_cast<long long>(fit)));
  }
  static void run(const PartInputs& p, const Options& o) {
    Generator gen(p.run.config.seed + 3);
    activation_patching(p.in.model, p.in.data, p.in.data.patching_pairs(o.pairs, gen), p.run.config.seed + 6, p.result);
  }
};

}  // namespace

ATTNLAB_REGISTER_ANALYSIS(PatchingPart);

}  // namespace attnlab
