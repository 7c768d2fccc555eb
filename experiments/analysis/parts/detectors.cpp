// Head detectors: TransformerLens's previous-token, duplicate-token and induction scores of every head on
// held-out examples (detectors.hpp holds the definitions), and the repeated-random-tokens induction test
// of the TransformerLens tutorials for a model that predicts the next token.
#include <algorithm>
#include <cmath>
#include <set>

#include "experiments/analysis/detectors.hpp"
#include "experiments/analysis/part.hpp"

namespace attnlab {

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
               "layer", "head", numbered(layers), numbered(heads), values, false, kind != DetectorKind::duplicate_token});
      out.facts["detectors." + part_prefix(part.name) + detector_name(kind) + ".max"] = finite_extreme(values, true);
    }
  }
}

void repeated_tokens_test(const AnalysisInputs& in, std::uint64_t seed, AnalysisResult& out) {
  if (!in.model.predicts_next_token() || !in.data.token_inputs()) return;  // a next-token model reading tokens
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
  out.facts["detectors.repeated_tokens.loss_first_copy"] = cross_entropy(run.logits, from_indices(first, {rows, 2 * half}), data::kIgnore).item();
  out.facts["detectors.repeated_tokens.loss_second_copy"] = cross_entropy(run.logits, batch.target, data::kIgnore).item();
  out.facts["detectors.repeated_tokens.half_length"] = static_cast<double>(half);
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
           "head", numbered(layers), numbered(heads), values, false, true});
  out.tables.back().examples = rows;  // its own sequences, not the held-out examples
  out.facts["detectors.repeated_tokens.induction_max"] = finite_extreme(values, true);
}

namespace {

class DetectorsPart {
 public:
  static constexpr const char* kName = "detectors";
  static constexpr const char* kDescription =
      "TransformerLens's head detectors on held-out examples, and the repeated-random-tokens induction test";
  static constexpr const char* kTitle = "Head detectors (TransformerLens's definitions)";
  static constexpr int kOrder = 40;
  struct Options {};
  static Schema<Options> options_schema() { return {}; }
  static std::string needs(const Model&, const data::DataSource& data) { return needs_token_inputs(data); }
  static void run(const PartInputs& p, const Options&) {
    head_detectors(p.in, p.result);
    repeated_tokens_test(p.in, p.run.config.seed + 4, p.result);
  }
};

}  // namespace

ATTNLAB_REGISTER_ANALYSIS(DetectorsPart);

}  // namespace attnlab
