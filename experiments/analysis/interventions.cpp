// The causal methods: ablation (remove a head or a layer's output, watch the held-out loss and accuracy)
// and activation patching (put one activation of a clean run into a corrupted one, watch the answer
// come back). Both replace named activations (nn/hooks.hpp) and nothing else.
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "experiments/analysis/analysis.hpp"

namespace attnlab {
namespace {

using I = std::int64_t;

// A [1, n, 1, 1] (heads) or [1, n, 1] (positions) selector: 1 at `index`, 0 elsewhere.
Tensor one_hot_selector(std::size_t n, std::size_t index, const Shape& shape, DType dtype) {
  std::vector<double> v(n, 0.0);
  v[index] = 1.0;
  return from_vector(v, shape, dtype);
}

// The mean of each head's output over the examples, per position: [1, H, T, D] over the longest batch,
// each position averaged over the examples long enough to have it.
Tensor mean_head_output(const AnalysisInputs& in, const std::string& hook) {
  std::vector<double> total, count;
  std::size_t heads = 0, length = 0, dim = 0;
  for (const Batch& b : in.batches) {
    ForwardOptions o;
    o.hooks.cache = {hook};
    const Tensor z = in.model.forward(b, o).cache.at(hook);  // [B, H, T, D]
    const std::vector<double> v = z.to_vector();
    const std::size_t rows = z.size(0), t = z.size(2);
    heads = z.size(1), dim = z.size(3);
    if (t > length) {  // positions are the slowest axis after the head: regrow head by head
      std::vector<double> grown(heads * t * dim, 0.0);
      for (std::size_t h = 0; h < heads && length; ++h)
        std::copy(total.begin() + h * length * dim, total.begin() + (h + 1) * length * dim, grown.begin() + h * t * dim);
      total.swap(grown);
      count.resize(t, 0.0);
      length = t;
    }
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t h = 0; h < heads; ++h)
        for (std::size_t i = 0; i < t * dim; ++i) total[h * length * dim + i] += v[((r * heads + h) * t) * dim + i];
    for (std::size_t i = 0; i < t; ++i) count[i] += static_cast<double>(rows);
  }
  for (std::size_t h = 0; h < heads; ++h)
    for (std::size_t i = 0; i < length * dim; ++i) total[h * length * dim + i] /= count[i / dim];
  return from_vector(total, {1, heads, length, dim}, DType::float64);
}

// The replacement of head h's slice of a [B, H, T, D] activation by `value` (zero: undefined), as hooks.
ActivationFn replace_head(std::size_t heads, std::size_t h, const Tensor& value) {
  return [heads, h, value](const Tensor& z, const std::string&) {
    const Tensor keep = 1.0 - one_hot_selector(heads, h, {1, heads, 1, 1}, z.dtype());
    if (!value.defined()) return z * keep;
    const Tensor v = slice(value, 2, 0, static_cast<I>(z.size(2))).to(z.dtype());
    return z * keep + v * (1.0 - keep);
  };
}

struct Deltas {
  std::vector<double> loss, accuracy, exact;
};

void add_delta(Deltas& d, const Evaluation& base, const Evaluation& e) {
  d.loss.push_back(e.loss - base.loss);
  d.accuracy.push_back(e.metrics.token_accuracy - base.metrics.token_accuracy);
  d.exact.push_back(e.metrics.exact_match - base.metrics.exact_match);
}

void add_delta_tables(AnalysisResult& out, const std::string& name, const std::string& title, const std::string& row_axis,
                      const std::string& col_axis, std::vector<std::string> rows, std::vector<std::string> cols, const Deltas& d) {
  const std::pair<const char*, const std::vector<double>*> kinds[] = {
      {"loss", &d.loss}, {"accuracy", &d.accuracy}, {"exact_match", &d.exact}};
  const char* words[] = {"change in held-out loss", "change in held-out token accuracy", "change in held-out exact match"};
  for (std::size_t k = 0; k < 3; ++k) {
    out.add({name + "_" + kinds[k].first, "ablation", title + ": " + words[k], row_axis, col_axis, rows, cols, *kinds[k].second, true});
  }
}

}  // namespace

double element(const Tensor& t, std::size_t index) {
  return t.dtype() == DType::float32 ? static_cast<double>(t.data<float>()[index]) : t.data<double>()[index];
}

StackStreams stack_streams(const std::vector<std::string>& blocks) {
  StackStreams s;
  for (std::size_t l = 0; l < blocks.size(); ++l) {
    s.hooks.push_back(blocks[l] + "hook_resid_pre");
    s.names.push_back(l == 0 ? "embed" : "after block " + std::to_string(l - 1));
  }
  s.hooks.push_back(blocks.back() + "hook_resid_post");
  s.names.push_back("after block " + std::to_string(blocks.size() - 1));
  return s;
}

std::vector<std::string> numbered(std::size_t n) {
  std::vector<std::string> labels;
  for (std::size_t i = 0; i < n; ++i) labels.push_back(std::to_string(i));
  return labels;
}

std::string part_prefix(const std::string& part) { return part.empty() ? "" : part + "_"; }
std::string part_title(const std::string& part) { return part.empty() ? "" : " (" + part + ")"; }

std::vector<Batch> held_out_examples(const data::DataSource& data, std::size_t examples, std::size_t batch_size, std::uint64_t seed) {
  if (examples == 0) throw std::invalid_argument("analysis needs at least one held-out example (--examples 0)");
  const std::size_t size = std::min(examples, batch_size);
  const std::size_t wanted = (examples + size - 1) / size;
  const std::size_t whole = data.held_out_batches(size);
  std::vector<Batch> batches;
  if (whole) {  // the first batches of the split, in the order the evaluation walks it
    for (std::size_t i = 0; i < std::min(wanted, whole); ++i) batches.push_back(data.held_out_batch(i, size));
    return batches;
  }
  for_each_held_out_batch(data, wanted, size, seed, [&](const Batch& b) { batches.push_back(b); });
  return batches;
}

Evaluation evaluate_with(const AnalysisInputs& in, const HookRequest& hooks) {
  EvaluationSum sum;
  ForwardOptions o;
  o.hooks = hooks;
  for (const Batch& b : in.batches) sum.add(in.model.forward(b, o).logits, b.target);
  return sum.result();
}

std::vector<PartBlocks> part_blocks(const Model& model) {
  std::vector<PartBlocks> parts;
  for (const Model::AttentionPart& p : model.attention_parts()) {
    PartBlocks b{p.name, {}, "attn", p.feed_forward};
    for (const std::string& hook : p.pattern_hooks) {
      // "decoder.blocks.1.cross_attn.hook_pattern" -> "decoder.blocks.1." and "cross_attn"
      const std::size_t end = hook.rfind(".hook_pattern"), dot = hook.rfind('.', end - 1);
      b.blocks.push_back(hook.substr(0, dot + 1));
      b.attention = hook.substr(dot + 1, end - dot - 1);
    }
    parts.push_back(b);
  }
  return parts;
}

void head_ablation(const AnalysisInputs& in, AnalysisResult& out) {
  EvalScope scope(in.model);  // eval mode, no graph
  const Evaluation base = evaluate_with(in, {});
  out.facts["baseline.loss"] = base.loss;
  out.facts["baseline.token_accuracy"] = base.metrics.token_accuracy;
  out.facts["baseline.exact_match"] = base.metrics.exact_match;
  const std::size_t heads = in.model.n_heads();
  for (const PartBlocks& part : part_blocks(in.model)) {
    const std::vector<std::string> rows = numbered(part.blocks.size());
    Deltas zero, mean;
    for (std::size_t l = 0; l < part.blocks.size(); ++l) {
      const std::string hook = part.blocks[l] + part.attention + ".hook_z";
      const Tensor mean_z = mean_head_output(in, hook);
      for (std::size_t h = 0; h < heads; ++h) {
        add_delta(zero, base, evaluate_with(in, {{}, {{hook, replace_head(heads, h, Tensor())}}}));
        add_delta(mean, base, evaluate_with(in, {{}, {{hook, replace_head(heads, h, mean_z)}}}));
      }
    }
    const std::string stem = "ablation_" + part_prefix(part.part);
    add_delta_tables(out, stem + "zero", "Zero ablation of each head" + part_title(part.part), "layer", "head", rows, numbered(heads), zero);
    add_delta_tables(out, stem + "mean", "Mean ablation of each head" + part_title(part.part), "layer", "head", rows, numbered(heads), mean);
  }
}

void layer_ablation(const AnalysisInputs& in, AnalysisResult& out) {
  EvalScope scope(in.model);  // eval mode, no graph
  const Evaluation base = evaluate_with(in, {});
  std::vector<std::string> rows;
  std::vector<std::string> cols;
  std::vector<std::pair<std::string, std::string>> points;  // (row label, hook)
  for (const PartBlocks& part : part_blocks(in.model)) {
    if (part.attention == "cross_attn") continue;  // the decoder's blocks are listed with its self-attention
    for (std::size_t l = 0; l < part.blocks.size(); ++l) {
      const std::string row = (part.part.empty() ? "" : part.part + " ") + std::to_string(l);
      points.push_back({row, part.blocks[l] + "hook_attn_out"});
      if (part.part == "decoder") points.push_back({row, part.blocks[l] + "hook_cross_attn_out"});
      if (part.feed_forward) points.push_back({row, part.blocks[l] + "hook_mlp_out"});
    }
  }
  const auto output = [](const std::string& hook) { return hook.substr(hook.rfind(".hook_") + 6); };  // attn_out, cross_attn_out, mlp_out
  for (const auto& [row, hook] : points) {
    if (rows.empty() || rows.back() != row) rows.push_back(row);
    if (std::find(cols.begin(), cols.end(), output(hook)) == cols.end()) cols.push_back(output(hook));
  }
  Deltas laid;  // encoder rows have no cross-attention: their cells stay NaN
  laid.loss.assign(rows.size() * cols.size(), NAN), laid.accuracy = laid.loss, laid.exact = laid.loss;
  for (const auto& [row, hook] : points) {
    const Evaluation e = evaluate_with(in, {{}, {{hook, [](const Tensor& x, const std::string&) { return x * 0.0; }}}});
    const std::size_t cell = static_cast<std::size_t>(std::find(rows.begin(), rows.end(), row) - rows.begin()) * cols.size() +
                             static_cast<std::size_t>(std::find(cols.begin(), cols.end(), output(hook)) - cols.begin());
    laid.loss[cell] = e.loss - base.loss;
    laid.accuracy[cell] = e.metrics.token_accuracy - base.metrics.token_accuracy;
    laid.exact[cell] = e.metrics.exact_match - base.metrics.exact_match;
  }
  add_delta_tables(out, "ablation_layers_zero", "Zero ablation of each layer's attention and MLP output", "layer", "output", rows, cols, laid);
}

namespace {

// The mean over the pairs of logit[position, clean answer] - logit[position, corrupted answer].
double logit_difference(const Tensor& logits, const data::PatchingPairs& pairs) {
  const bool per_token = logits.dim() == 3;
  const std::size_t t = per_token ? logits.size(1) : 1, classes = logits.size(logits.dim() - 1);
  double total = 0;
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    const std::size_t row = (i * t + (per_token ? pairs.position[i] : 0)) * classes;
    total += element(logits, row + static_cast<std::size_t>(pairs.clean_answer[i])) -
             element(logits, row + static_cast<std::size_t>(pairs.corrupted_answer[i]));
  }
  return total / static_cast<double>(pairs.size());
}

// Patching one activation: the corrupted run with `hook`'s selected slice (`selector`, broadcast over
// the activation) taken from the clean run's cache.
double patched_difference(Model& model, const data::PatchingPairs& pairs, const std::map<std::string, Tensor>& clean,
                          const std::string& hook, const Tensor& selector) {
  const Tensor& from = clean.at(hook);
  ForwardOptions o;
  o.hooks.replace = {{hook, [&](const Tensor& x, const std::string&) {
                        const Tensor m = selector.to(x.dtype());
                        return x * (1.0 - m) + from * m;
                      }}};
  return logit_difference(model.forward(pairs.corrupted, o).logits, pairs);
}

// The residual streams a patch at one position can take: each block's input, per stack (the encoder's
// and the decoder's for an encoder-decoder, whose positions are the source's and the target's).
std::vector<std::pair<std::string, std::vector<std::string>>> residual_streams(const Model& model) {
  std::vector<std::pair<std::string, std::vector<std::string>>> streams;
  for (const PartBlocks& part : part_blocks(model)) {
    if (part.attention == "cross_attn") continue;
    std::vector<std::string> hooks = stack_streams(part.blocks).hooks;
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

}  // namespace

void activation_patching(Model& model, const data::DataSource& data, const data::PatchingPairs& pairs, AnalysisResult& out) {
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
  const double clean_diff = logit_difference(clean.logits, pairs), corrupted_diff = logit_difference(model.forward(pairs.corrupted).logits, pairs);
  out.facts["patching.clean_logit_diff"] = clean_diff;
  out.facts["patching.corrupted_logit_diff"] = corrupted_diff;
  out.notes.push_back("patching: " + std::to_string(pairs.size()) + " pairs, " + pairs.corruption);
  const double span = clean_diff - corrupted_diff;
  const auto restored = [&](double patched) { return std::fabs(span) > 1e-9 ? (patched - corrupted_diff) / span : NAN; };
  const std::size_t heads = model.n_heads();
  for (const PartBlocks& part : part_blocks(model)) {
    std::vector<double> values;
    for (std::size_t l = 0; l < part.blocks.size(); ++l) {
      for (std::size_t h = 0; h < heads; ++h) {
        const Tensor sel = one_hot_selector(heads, h, {1, heads, 1, 1}, DType::float32);
        values.push_back(restored(patched_difference(model, pairs, clean.cache, part.blocks[l] + part.attention + ".hook_z", sel)));
      }
    }
    out.add({"patching_" + part_prefix(part.part) + "heads", "patching",
             "Restored share of the logit difference, patching each head's output" + part_title(part.part), "layer", "head",
             numbered(part.blocks.size()), numbered(heads), values, true});
  }
  for (const auto& [stack, hooks] : residual_streams(model)) {
    const bool target = stack == "decoder";
    const Tensor& ids = target ? pairs.clean.decoder_input : pairs.clean.input;
    if (!ids.defined() || ids.dtype() != DType::int64) continue;  // images: positions are patches, not tokens
    const std::size_t t = ids.size(1);
    std::vector<double> values;
    for (const std::string& hook : hooks)
      for (std::size_t i = 0; i < t; ++i)
        values.push_back(restored(patched_difference(model, pairs, clean.cache, hook, one_hot_selector(t, i, {1, t, 1}, DType::float32))));
    out.add({"patching_" + part_prefix(stack) + "residual", "patching",
             "Restored share of the logit difference, patching the residual stream at one position (block input)" + part_title(stack),
             "layer", "position", numbered(hooks.size()), position_labels(data, slice(ids, 0, 0, 1), target), values, true});
  }
}

}  // namespace attnlab
