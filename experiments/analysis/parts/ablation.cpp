// Ablation: each head's output (before the output projection) zeroed, replaced by its mean over the
// held-out examples or by its output on another example, and each layer's attention and MLP output
// zeroed; the change in held-out loss, token accuracy and exact match. It replaces named activations
// (nn/hooks.hpp) and nothing else.
#include <algorithm>
#include <cmath>
#include <tuple>

#include "experiments/analysis/part.hpp"

namespace attnlab {
namespace {

using I = std::int64_t;

}  // namespace

Tensor mean_head_output(const AnalysisInputs& in, const std::string& hook, bool decoder_side) {
  std::vector<double> total, count;
  std::size_t heads = 0, length = 0, dim = 0;
  for (const Batch& b : in.batches) {
    ForwardOptions o;
    o.hooks.cache = {hook};
    const Tensor z = in.model.forward(b, o).cache.at(hook);  // [B, H, T, D]
    const std::vector<double> v = z.to_vector();
    const std::size_t rows = z.size(0), t = z.size(2);
    heads = z.size(1), dim = z.size(3);
    const Tensor& mask = decoder_side ? b.decoder_padding_mask : b.key_padding_mask;  // [B, T], true at padding
    const bool* pad = mask.defined() && mask.size(1) == t ? mask.data<bool>() : nullptr;
    if (t > length) {  // positions are the slowest axis after the head: regrow head by head
      std::vector<double> grown(heads * t * dim, 0.0);
      for (std::size_t h = 0; h < heads && length; ++h)
        std::copy(total.begin() + h * length * dim, total.begin() + (h + 1) * length * dim, grown.begin() + h * t * dim);
      total.swap(grown);
      count.resize(t, 0.0);
      length = t;
    }
    for (std::size_t r = 0; r < rows; ++r) {
      for (std::size_t i = 0; i < t; ++i) {
        if (pad && pad[r * t + i]) continue;  // this example does not reach position i
        count[i] += 1.0;
        for (std::size_t h = 0; h < heads; ++h)
          for (std::size_t d = 0; d < dim; ++d) total[(h * length + i) * dim + d] += v[((r * heads + h) * t + i) * dim + d];
      }
    }
  }
  for (std::size_t h = 0; h < heads; ++h)
    for (std::size_t i = 0; i < length * dim; ++i) total[h * length * dim + i] /= std::max(count[i / dim], 1.0);
  return from_vector(total, {1, heads, length, dim}, DType::float64);
}

namespace {

// Head h's slice of a [B, H, T, D] activation taken from the next example of the batch (the last from the
// first): each example gets the head's output on another input, as a resample ablation does.
ActivationFn resample_head(std::size_t heads, std::size_t h) {
  return [heads, h](const Tensor& z, const std::string&) {
    const I rows = static_cast<I>(z.size(0));
    const Tensor other = concat({slice(z, 0, 1, rows), slice(z, 0, 0, 1)}, 0);
    const Tensor keep = 1.0 - one_hot_selector(heads, h, {1, heads, 1, 1}, z.dtype());
    return z * keep + other * (1.0 - keep);
  };
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

// Each metric's change under an ablation, with its bootstrap interval, cell by cell.
struct Deltas {
  struct Column {
    std::vector<double> value, low, high;
  };
  Column loss, accuracy, exact;
  void fill(std::size_t cells) {
    for (Column* c : {&loss, &accuracy, &exact}) c->value.assign(cells, NAN), c->low = c->high = c->value;
  }
  // Cell `cell`: the ablated scores minus the base's, over the examples and over each bootstrap draw.
  void set(std::size_t cell, const ExampleScores& base, const ExampleScores& e, const Bootstrap& boot) {
    using Metric = double (ExampleScores::*)(const std::vector<double>&) const;
    const std::pair<Column*, Metric> metrics[] = {
        {&loss, &ExampleScores::mean_loss}, {&accuracy, &ExampleScores::token_accuracy}, {&exact, &ExampleScores::exact_match}};
    for (const auto& [column, metric] : metrics) {
      const auto change = [&, metric = metric](const std::vector<double>& w) { return (e.*metric)(w) - (base.*metric)(w); };
      column->value[cell] = change({});
      std::tie(column->low[cell], column->high[cell]) = boot.interval(change);
    }
  }
  void add(const ExampleScores& base, const ExampleScores& e, const Bootstrap& boot) {
    if (loss.value.size() <= cells) {
      for (Column* c : {&loss, &accuracy, &exact}) c->value.push_back(NAN), c->low.push_back(NAN), c->high.push_back(NAN);
    }
    set(cells++, base, e, boot);
  }
  std::size_t cells = 0;
};

void add_delta_tables(AnalysisResult& out, const std::string& name, const std::string& title, const std::string& row_axis,
                      const std::string& col_axis, std::vector<std::string> rows, std::vector<std::string> cols, const Deltas& d,
                      bool compared = false) {
  const std::pair<const char*, const Deltas::Column*> kinds[] = {{"loss", &d.loss}, {"accuracy", &d.accuracy}, {"exact_match", &d.exact}};
  const char* words[] = {"change in held-out loss", "change in held-out token accuracy", "change in held-out exact match"};
  for (std::size_t k = 0; k < 3; ++k) {
    out.add({name + "_" + kinds[k].first, "ablation", title + ": " + words[k], row_axis, col_axis, rows, cols, kinds[k].second->value, true});
    out.tables.back().compared = compared && k == 1;  // a comparison sets the zero ablation's accuracy side by side
    out.tables.back().low = kinds[k].second->low, out.tables.back().high = kinds[k].second->high;
  }
}

}  // namespace

void head_ablation(const AnalysisInputs& in, std::uint64_t seed, AnalysisResult& out) {
  EvalScope scope(in.model);  // eval mode, no graph
  const ExampleScores base = score_examples(in, {});
  const Bootstrap boot(base.exact.size(), seed);
  out.facts["ablation.baseline.loss"] = base.mean_loss();
  out.facts["ablation.baseline.token_accuracy"] = base.token_accuracy();
  out.facts["ablation.baseline.exact_match"] = base.exact_match();
  const std::size_t heads = in.model.n_heads();
  for (const PartBlocks& part : part_blocks(in.model)) {
    const std::vector<std::string> rows = numbered(part.blocks.size());
    Deltas zero, mean, resample;
    for (std::size_t l = 0; l < part.blocks.size(); ++l) {
      const std::string hook = part.blocks[l] + part.attention + ".hook_z";
      const Tensor mean_z = mean_head_output(in, hook, part.part == "decoder" || part.part == "cross");
      for (std::size_t h = 0; h < heads; ++h) {
        zero.add(base, score_examples(in, {{}, {{hook, replace_head(heads, h, Tensor())}}}), boot);
        mean.add(base, score_examples(in, {{}, {{hook, replace_head(heads, h, mean_z)}}}), boot);
        resample.add(base, score_examples(in, {{}, {{hook, resample_head(heads, h)}}}), boot);
      }
    }
    const std::string stem = "ablation_" + part_prefix(part.part);
    add_delta_tables(out, stem + "zero", "Zero ablation of each head" + part_title(part.part), "layer", "head", rows, numbered(heads), zero, true);
    add_delta_tables(out, stem + "mean", "Mean ablation of each head" + part_title(part.part), "layer", "head", rows, numbered(heads), mean);
    add_delta_tables(out, stem + "resample", "Resample ablation of each head (its output on another example)" + part_title(part.part), "layer",
                     "head", rows, numbered(heads), resample);
  }
}

void layer_ablation(const AnalysisInputs& in, std::uint64_t seed, AnalysisResult& out) {
  EvalScope scope(in.model);  // eval mode, no graph
  const ExampleScores base = score_examples(in, {});
  const Bootstrap boot(base.exact.size(), seed);
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
  laid.fill(rows.size() * cols.size());
  for (const auto& [row, hook] : points) {
    const ExampleScores e = score_examples(in, {{}, {{hook, [](const Tensor& x, const std::string&) { return x * 0.0; }}}});
    const std::size_t cell = static_cast<std::size_t>(std::find(rows.begin(), rows.end(), row) - rows.begin()) * cols.size() +
                             static_cast<std::size_t>(std::find(cols.begin(), cols.end(), output(hook)) - cols.begin());
    laid.set(cell, base, e, boot);
  }
  add_delta_tables(out, "ablation_layers_zero", "Zero ablation of each layer's attention and MLP output", "layer", "output", rows, cols, laid);
}

namespace {

class AblationPart {
 public:
  static constexpr const char* kName = "ablation";
  static constexpr const char* kDescription =
      "each head's output zeroed or replaced by its mean, and each layer's attention and MLP output zeroed: the change in held-out "
      "loss and accuracy";
  static constexpr const char* kTitle = "Ablation: which heads and layers the held-out performance needs";
  static constexpr int kOrder = 10;
  struct Options {};
  static Schema<Options> options_schema() { return {}; }
  static void run(const PartInputs& p, const Options&) {
    head_ablation(p.in, p.run.config.seed + 5, p.result);
    layer_ablation(p.in, p.run.config.seed + 5, p.result);
  }
};

}  // namespace

ATTNLAB_REGISTER_ANALYSIS(AblationPart);

}  // namespace attnlab
