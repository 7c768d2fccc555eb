// Reading the residual stream: direct logit attribution (each component's share of the correct token's
// logit, through the final norm's scale frozen at its value, as TransformerLens's apply_ln_to_stack)
// and the logit lens (each layer's stream read out as if it were the last).
#include <cmath>

#include "experiments/analysis/part.hpp"

namespace attnlab {
namespace {

using I = std::int64_t;

// The stream's blocks: "blocks.0.", ... for the stack the logits are read from.
PartBlocks readout_stack(const Model& model) {
  for (const PartBlocks& part : part_blocks(model)) {
    if (part.attention == "cross_attn" || part.blocks.empty()) continue;
    if (part.blocks[0].rfind(model.readout_blocks(), 0) == 0) return part;
  }
  return {};
}

// Per row: the logit of each scored answer (target != ignore; one per row for per-sequence logits),
// summed, and how many there were; appended to `sums` and `counts`.
// Per position of per-token logits: the sum over examples and how many there were.
struct PositionSums {
  std::vector<double> sum, count;
};

void answer_logits(const Tensor& logits, const Tensor& target, std::vector<double>& sums, std::vector<double>* counts = nullptr,
                   PositionSums* positions = nullptr) {
  const std::int64_t* t = target.data<std::int64_t>();
  const std::size_t classes = logits.size(logits.dim() - 1), rows = target.size(0), per_row = target.numel() / std::max<std::size_t>(rows, 1);
  if (positions && positions->sum.size() < per_row) positions->sum.resize(per_row, 0.0), positions->count.resize(per_row, 0.0);
  for (std::size_t r = 0; r < rows; ++r) {
    double total = 0, count = 0;
    for (std::size_t i = r * per_row; i < (r + 1) * per_row; ++i) {
      if (t[i] == data::kIgnore) continue;
      const double logit = element(logits, i * classes + static_cast<std::size_t>(t[i]));
      total += logit;
      count += 1;
      if (positions) positions->sum[i - r * per_row] += logit, positions->count[i - r * per_row] += 1;
    }
    sums.push_back(total);
    if (counts) counts->push_back(count);
  }
}

double total_of(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s;
}

// A component as the final norm sees it with the scale frozen: centred, divided by the stream's scale
// (sqrt of its variance plus eps), times the norm's gain.
Tensor through_frozen_norm(const Tensor& component, const Tensor& scale, const LayerNorm& norm) {
  const Tensor centred = component - mean(component, -1, true);
  const Tensor scaled = centred / scale;
  return norm.weight.defined() ? scaled * norm.weight : scaled;
}

// The stream's components in the order they are added to it: the embedding (tokens and positions),
// then per layer each attention's heads and its output bias, then the MLP.
struct Components {
  std::vector<std::string> blocks, attentions;
  std::size_t heads = 0;
  bool feed_forward;
  std::vector<std::string> names;
  std::vector<int> head_of;  // per component: the index in `attentions` when it is a head's result, else -1
  Components(const Model& model, std::vector<std::string> stack) : blocks(std::move(stack)), attentions{"attn"}, heads(model.n_heads()), feed_forward(model.feed_forward()) {
    for (const PartBlocks& p : part_blocks(model)) {
      if (p.attention == "cross_attn") attentions.push_back("cross_attn");
    }
    add("embed", -1);
    for (std::size_t l = 0; l < blocks.size(); ++l) {
      for (std::size_t a = 0; a < attentions.size(); ++a) {
        for (std::size_t h = 0; h < heads; ++h) add(std::to_string(l) + "." + attentions[a] + "." + std::to_string(h), static_cast<int>(a));
        add(std::to_string(l) + "." + attentions[a] + ".bias", -1);
      }
      if (feed_forward) add(std::to_string(l) + ".mlp", -1);
    }
  }
  void add(std::string name, int attention) {
    names.push_back(std::move(name));
    head_of.push_back(attention);
  }
  static std::string out_hook(const std::string& attention) { return attention == "attn" ? "hook_attn_out" : "hook_cross_attn_out"; }
  HookRequest hooks() const {
    HookRequest r;
    r.cache = {blocks[0] + "hook_resid_pre", blocks.back() + "hook_resid_post"};
    for (const std::string& b : blocks) {
      for (const std::string& a : attentions) r.cache.insert(r.cache.end(), {b + a + ".hook_result", b + out_hook(a)});
      if (feed_forward) r.cache.push_back(b + "hook_mlp_out");
    }
    return r;
  }
  // Each component's tensor [B, T, C] from a forward's cache, in the order of `names`.
  std::vector<Tensor> split(const std::map<std::string, Tensor>& cache) const {
    std::vector<Tensor> parts{cache.at(blocks[0] + "hook_resid_pre")};
    for (const std::string& b : blocks) {
      for (const std::string& a : attentions) {
        const Tensor& results = cache.at(b + a + ".hook_result");  // [B, H, T, C]
        const std::vector<I> per_head{static_cast<I>(results.size(0)), static_cast<I>(results.size(2)), static_cast<I>(results.size(3))};
        Tensor summed;
        for (std::size_t h = 0; h < heads; ++h) {
          parts.push_back(reshape(slice(results, 1, static_cast<I>(h), static_cast<I>(h) + 1), per_head));
          summed = summed.defined() ? summed + parts.back() : parts.back();
        }
        parts.push_back(cache.at(b + out_hook(a)) - summed);  // the output projection's bias
      }
      if (feed_forward) parts.push_back(cache.at(b + "hook_mlp_out"));
    }
    return parts;
  }
};

// The head tables (layer x head, per attention) and the other components' column: each component's mean
// contribution per scored answer, with its bootstrap interval over the examples.
void attribution_tables(const Components& c, const std::vector<std::vector<double>>& sums, const std::vector<double>& counts,
                        const Bootstrap& boot, AnalysisResult& out) {
  const auto fill = [&](AnalysisTable& t, std::size_t k) {
    t.values.push_back(weighted_ratio(sums[k], counts, {}));
    const auto [low, high] = boot.interval([&](const std::vector<double>& w) { return weighted_ratio(sums[k], counts, w); });
    t.low.push_back(low), t.high.push_back(high);
  };
  for (std::size_t a = 0; a < c.attentions.size(); ++a) {
    const bool cross = c.attentions[a] == "cross_attn";
    AnalysisTable t{cross ? "attribution_cross_heads" : "attribution_heads", "attribution",
                    std::string("Direct logit attribution of each ") + (cross ? "cross-attention " : "") + "head to the correct token", "layer", "head",
                    numbered(c.blocks.size()), numbered(c.heads), {}, true, true};
    for (std::size_t k = 0; k < c.names.size(); ++k)  // layer by layer, head by head: the order the components are listed in
      if (c.head_of[k] == static_cast<int>(a)) fill(t, k);
    out.add(t);
  }
  AnalysisTable other{"attribution_components", "attribution", "Direct logit attribution of the other components to the correct token", "component",
                      "", {}, {"logit"}, {}, true};
  for (std::size_t k = 0; k < c.names.size(); ++k) {
    if (c.head_of[k] >= 0) continue;
    other.rows.push_back(c.names[k]);
    fill(other, k);
  }
  out.add(other);
}

// Each component's attribution per position (the mean over the examples with a scored answer there) and
// per example (the first 64: the mean over its scored answers).
void detail_tables(const Components& c, const std::vector<std::vector<double>>& sums, const std::vector<double>& counts,
                   const std::vector<PositionSums>& positions, AnalysisResult& out) {
  if (!positions.empty() && !positions[0].sum.empty()) {
    AnalysisTable t{"attribution_positions", "attribution", "Direct logit attribution of each component to the correct token, per position",
                    "component", "position", c.names, numbered(positions[0].sum.size()), {}, true};
    for (const PositionSums& p : positions)
      for (std::size_t i = 0; i < p.sum.size(); ++i) t.values.push_back(p.count[i] ? p.sum[i] / p.count[i] : NAN);
    out.add(t);
  }
  const std::size_t shown = std::min<std::size_t>(64, counts.size());
  AnalysisTable e{"attribution_examples", "attribution",
                  "Direct logit attribution of each component to the correct token, per example (the first " + std::to_string(shown) + ")",
                  "example", "component", numbered(shown), c.names, {}, true, false, shown};
  for (std::size_t r = 0; r < shown; ++r)
    for (std::size_t k = 0; k < c.names.size(); ++k) e.values.push_back(counts[r] ? sums[k][r] / counts[r] : NAN);
  out.add(e);
}

}  // namespace

void logit_attribution(const AnalysisInputs& in, std::uint64_t seed, AnalysisResult& out) {
  EvalScope scope(in.model);
  const LayerNorm* norm = in.model.final_norm();
  const std::vector<std::string> stack = readout_stack(in.model).blocks;
  const std::map<std::string, Tensor> state = in.model.state_dict();
  // Without any norm (model.norm: none) the last stream is read out as it is: a sum of the components.
  const bool normless = std::none_of(state.begin(), state.end(), [](const auto& w) { return w.first.find("norm") != std::string::npos; });
  if ((!norm && !normless) || stack.empty()) {
    out.notes.push_back("attribution: the model has no final norm (post-norm), so its logits are not a sum of direct effects");
    return;
  }
  const Components components(in.model, stack);
  ForwardOptions o;
  o.hooks = components.hooks();
  std::vector<std::vector<double>> sums(components.names.size());  // per component, per example
  std::vector<PositionSums> positions(components.names.size());     // per component, per position (per-token logits)
  std::vector<double> constant, logits, counts;
  for (const Batch& b : in.batches) {
    const ModelOutput run = in.model.forward(b, o);
    const Tensor& final_stream = run.cache.at(stack.back() + "hook_resid_post");
    const Tensor centred = final_stream - mean(final_stream, -1, true);
    const Tensor scale = norm ? sqrt(mean(centred * centred, -1, true) + norm->eps) : Tensor();  // the norm's own, frozen
    const std::vector<Tensor> parts = components.split(run.cache);
    for (std::size_t k = 0; k < parts.size(); ++k) {
      const Tensor read = norm ? through_frozen_norm(parts[k], scale, *norm) : parts[k];
      answer_logits(in.model.readout(read, b, false, false), b.target, sums[k], nullptr, b.target.dim() == 2 ? &positions[k] : nullptr);
    }
    // What no component writes: the norm's shift read out, and the output layer's bias.
    const Tensor shift = norm && norm->bias.defined() ? zeros(final_stream.shape(), final_stream.dtype()) + norm->bias
                                                      : zeros(final_stream.shape(), final_stream.dtype());
    answer_logits(in.model.readout(shift, b, false, true), b.target, constant);
    answer_logits(run.logits, b.target, logits, &counts);
  }
  const double per = 1.0 / total_of(counts);
  double explained = total_of(constant);
  for (const std::vector<double>& v : sums) explained += total_of(v);
  out.facts["attribution.answer_logit"] = total_of(logits) * per;
  out.facts["attribution.constant"] = total_of(constant) * per;
  out.facts["attribution.unexplained"] = (total_of(logits) - explained) * per;  // 0 up to rounding: the decomposition is exact
  attribution_tables(components, sums, counts, Bootstrap(counts.size(), seed), out);
  detail_tables(components, sums, counts, positions, out);
}

void logit_lens(const AnalysisInputs& in, AnalysisResult& out) {
  EvalScope scope(in.model);
  const PartBlocks stack = readout_stack(in.model);
  if (stack.blocks.empty()) return;
  const StackStreams streams = stack_streams(stack);
  const std::vector<std::string>& hooks = streams.hooks;
  const std::vector<std::string>& rows = streams.names;
  std::vector<EvaluationSum> sums(hooks.size());
  ForwardOptions o;
  o.hooks.cache = hooks;
  for (const Batch& b : in.batches) {
    const ModelOutput run = in.model.forward(b, o);
    for (std::size_t i = 0; i < hooks.size(); ++i) sums[i].add(in.model.readout(run.cache.at(hooks[i]), b, true, true), b.target);
  }
  std::vector<double> loss, accuracy;
  for (const EvaluationSum& s : sums) {
    const Evaluation e = s.result();
    loss.push_back(e.loss);
    accuracy.push_back(e.metrics.token_accuracy);
    accuracy.push_back(e.metrics.exact_match);
  }
  out.add({"logit_lens_loss", "attribution", "Logit lens: held-out loss of each layer's residual stream read out through the final norm and the output layer" + part_title(stack.part),
           "stream", "", rows, {"loss"}, loss, false});
  out.add({"logit_lens_accuracy", "attribution", "Logit lens: held-out accuracy of each layer's residual stream read out" + part_title(stack.part), "stream", "", rows,
           {"token_accuracy", "exact_match"}, accuracy, false});
}

namespace {

class AttributionPart {
 public:
  static constexpr const char* kName = "attribution";
  static constexpr const char* kDescription =
      "each head's direct contribution to the correct token's logit through the final norm's scale, and the logit lens";
  static constexpr const char* kTitle = "Direct logit attribution and the logit lens";
  static constexpr int kOrder = 30;
  struct Options {};
  static Schema<Options> options_schema() { return {}; }
  static void run(const PartInputs& p, const Options&) {
    logit_attribution(p.in, p.run.config.seed + 7, p.result);
    logit_lens(p.in, p.result);
  }
};

}  // namespace

ATTNLAB_REGISTER_ANALYSIS(AttributionPart);

}  // namespace attnlab
