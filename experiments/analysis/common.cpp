// What every analysis part shares: the held-out examples, evaluation under hooks, the blocks and streams
// of a model's attention parts, table labels, and the small helpers more than one part uses.
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "experiments/analysis/analysis.hpp"

namespace attnlab {

// A [1, n, 1, 1] (heads) or [1, n, 1] (positions) selector: 1 at `index`, 0 elsewhere.
Tensor one_hot_selector(std::size_t n, std::size_t index, const Shape& shape, DType dtype) {
  std::vector<double> v(n, 0.0);
  v[index] = 1.0;
  return from_vector(v, shape, dtype);
}

double element(const Tensor& t, std::size_t index) {
  return t.dtype() == DType::float32 ? static_cast<double>(t.data<float>()[index]) : t.data<double>()[index];
}

StackStreams stack_streams(const PartBlocks& stack) {
  const std::vector<std::string>& blocks = stack.blocks;
  const std::string prefix = stack.part.empty() ? "" : stack.part + ": ";
  StackStreams s;
  for (std::size_t l = 0; l < blocks.size(); ++l) {
    s.hooks.push_back(blocks[l] + "hook_resid_pre");
    s.names.push_back(prefix + (l == 0 ? "embed" : "after block " + std::to_string(l - 1)));
  }
  s.hooks.push_back(blocks.back() + "hook_resid_post");
  s.names.push_back(prefix + "after block " + std::to_string(blocks.size() - 1));
  return s;
}

std::vector<std::string> numbered(std::size_t n) {
  std::vector<std::string> labels;
  for (std::size_t i = 0; i < n; ++i) labels.push_back(std::to_string(i));
  return labels;
}

std::string part_prefix(const std::string& part) { return part.empty() ? "" : part + "_"; }
std::string part_title(const std::string& part) { return part.empty() ? "" : " (" + part + ")"; }

namespace {

// The first `rows` examples of a batch (every tensor cut along its batch axis).
Batch first_rows(const Batch& b, std::size_t rows) {
  const auto cut = [rows](const Tensor& t) { return t.defined() ? slice(t, 0, 0, static_cast<std::int64_t>(rows)) : t; };
  return Batch{cut(b.input), cut(b.target), cut(b.key_padding_mask), cut(b.decoder_input), cut(b.decoder_padding_mask)};
}

}  // namespace

std::vector<Batch> held_out_examples(const data::DataSource& data, std::size_t examples, std::size_t batch_size, std::uint64_t seed) {
  if (examples == 0) throw std::invalid_argument("analysis needs at least one held-out example (--examples 0)");
  const std::size_t size = std::min(examples, batch_size);
  const std::size_t wanted = (examples + size - 1) / size;
  const std::size_t whole = data.held_out_batches(size);
  std::vector<Batch> batches;
  if (whole) {  // the first batches of the split, in the order the evaluation walks it
    for (std::size_t i = 0; i < std::min(wanted, whole); ++i) batches.push_back(data.held_out_batch(i, size));
  } else {
    for_each_held_out_batch(data, wanted, size, seed, [&](const Batch& b) { batches.push_back(b); });
  }
  // Exactly `examples` (fewer only when the split has fewer): the last batch keeps the rows it needs.
  std::size_t before = 0;
  for (std::size_t i = 0; i + 1 < batches.size(); ++i) before += batches[i].input.size(0);
  if (!batches.empty() && before + batches.back().input.size(0) > examples) batches.back() = first_rows(batches.back(), examples - before);
  return batches;
}

std::size_t example_count(const std::vector<Batch>& batches) {
  std::size_t n = 0;
  for (const Batch& b : batches) n += b.input.size(0);
  return n;
}

Evaluation evaluate_with(const AnalysisInputs& in, const HookRequest& hooks) {
  EvaluationSum sum;
  ForwardOptions o;
  o.hooks = hooks;
  for (const Batch& b : in.batches) sum.add(in.model.forward(b, o).logits, b.target);
  return sum.result();
}

void check_finite_outputs(const AnalysisInputs& in, const std::string& what) {
  double loss = 0;
  {
    EvalScope scope(in.model);
    loss = evaluate_with(in, {}).loss;
  }
  if (!std::isfinite(loss)) {
    throw std::runtime_error(what + " gives a held-out loss of " + (std::isnan(loss) ? "NaN" : "inf") +
                             ": its weights give no usable outputs to analyse (did the run diverge? its summary.json says)");
  }
}

Bootstrap::Bootstrap(std::size_t n, std::uint64_t seed, std::size_t draws) : counts(draws, std::vector<double>(n, 0.0)) {
  Generator gen(seed);
  for (std::vector<double>& c : counts)
    for (std::size_t i = 0; i < n; ++i) c[gen.next_below(n)] += 1.0;
}

std::pair<double, double> Bootstrap::interval(const std::function<double(const std::vector<double>&)>& statistic) const {
  std::vector<double> values;
  for (const std::vector<double>& c : counts) {
    const double v = statistic(c);
    if (std::isfinite(v)) values.push_back(v);
  }
  if (values.empty()) return {NAN, NAN};
  std::sort(values.begin(), values.end());
  const auto at = [&](double q) {  // linear interpolation between order statistics (numpy's default)
    const double x = q * static_cast<double>(values.size() - 1);
    const std::size_t i = static_cast<std::size_t>(x);
    return i + 1 < values.size() ? values[i] + (x - static_cast<double>(i)) * (values[i + 1] - values[i]) : values[i];
  };
  return {at(0.025), at(0.975)};
}

double weighted_ratio(const std::vector<double>& num, const std::vector<double>& den, const std::vector<double>& w) {
  double n = 0, d = 0;
  for (std::size_t i = 0; i < num.size(); ++i) {
    const double wi = w.empty() ? 1.0 : w[i];
    n += wi * num[i], d += wi * den[i];
  }
  return d != 0 ? n / d : NAN;
}

void ExampleScores::add(const Tensor& logits, const Tensor& target) {
  const std::size_t classes = logits.size(-1), rows = target.size(0), per_row = target.numel() / std::max<std::size_t>(rows, 1);
  const std::int64_t* t = target.data<std::int64_t>();
  for (std::size_t r = 0; r < rows; ++r) {
    double sum = 0, scored = 0, right = 0;
    for (std::size_t i = r * per_row; i < (r + 1) * per_row; ++i) {
      if (t[i] == data::kIgnore) continue;
      double top = -INFINITY, total = 0;
      std::size_t best = 0;
      for (std::size_t c = 0; c < classes; ++c) {
        const double v = element(logits, i * classes + c);
        if (v > top) top = v, best = c;  // the first maximum on ties, as sequence_metrics
      }
      for (std::size_t c = 0; c < classes; ++c) total += std::exp(element(logits, i * classes + c) - top);
      sum += top + std::log(total) - element(logits, i * classes + static_cast<std::size_t>(t[i]));
      scored += 1, right += best == static_cast<std::size_t>(t[i]);
    }
    loss.push_back(sum), tokens.push_back(scored), correct.push_back(right), exact.push_back(right == scored ? 1.0 : 0.0), this->rows.push_back(1.0);
  }
}

ExampleScores score_examples(const AnalysisInputs& in, const HookRequest& hooks) {
  ExampleScores scores;
  ForwardOptions o;
  o.hooks = hooks;
  for (const Batch& b : in.batches) scores.add(in.model.forward(b, o).logits, b.target);
  return scores;
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

std::string needs_token_inputs(const data::DataSource& data) {
  return data.token_inputs() ? "" : "token inputs (it compares the tokens at each position); this run reads images";
}

double finite_extreme(const std::vector<double>& values, bool largest) {
  double best = NAN;
  for (double v : values)
    if (std::isfinite(v) && (std::isnan(best) || (largest ? v > best : v < best))) best = v;
  return best;
}

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

}  // namespace attnlab
