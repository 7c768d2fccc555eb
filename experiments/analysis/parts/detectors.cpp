// Head detectors: TransformerLens's previous-token, duplicate-token and induction scores of every head on
// held-out examples (detectors.hpp holds the definitions), and the repeated-random-tokens induction test
// of the TransformerLens tutorials for a model that predicts the next token.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

#include "experiments/analysis/detectors.hpp"
#include "experiments/analysis/part.hpp"

namespace attnlab {

namespace {

// The detector tables of one attention part: TransformerLens's scores over every row, and, when the
// examples hold padding, the same over the scored rows only (padding left out).
void part_detectors(const AnalysisInputs& in, const Model::AttentionPart& part, const DetectorOptions& options, AnalysisResult& out) {
  const std::size_t heads = in.model.n_heads(), layers = part.pattern_hooks.size();
  DetectorOptions scored = options;
  scored.scored_rows = true;
  DetectorSums every(layers * heads, options), real(layers * heads, scored);
  bool padded = false;
  for (const Batch& b : in.batches) {
    ForwardOptions o;
    o.hooks.cache = part.pattern_hooks;
    const ModelOutput run = in.model.forward(b, o);
    const Tensor& ids = part.target_keys ? b.decoder_input : b.input;
    const Tensor& mask = part.target_keys ? b.decoder_padding_mask : b.key_padding_mask;
    std::vector<std::vector<std::int64_t>> tokens;
    std::vector<std::size_t> lengths(ids.size(0));
    const std::size_t before = part.target_keys ? 0 : in.model.positions_before_tokens();  // a CLS: no token (-1)
    for (std::size_t r = 0; r < ids.size(0); ++r) {
      tokens.push_back(row_tokens(in.data, ids, mask, r, lengths[r]));
      tokens.back().insert(tokens.back().begin(), before, -1);
      lengths[r] += before;
      padded = padded || std::count(tokens.back().begin(), tokens.back().begin() + static_cast<std::ptrdiff_t>(lengths[r]), -1) > 0;
    }
    for (std::size_t l = 0; l < layers; ++l) {
      const auto it = run.cache.find(part.pattern_hooks[l]);
      if (it == run.cache.end() || !it->second.defined()) return;  // a kernel without a pattern
      const std::vector<double> v = it->second.to_vector();     // [B, H, T, T]
      const std::size_t t = it->second.size(2);
      for (std::size_t r = 0; r < ids.size(0); ++r)
        for (std::size_t h = 0; h < heads; ++h) {
          const double* p = v.data() + (r * heads + h) * t * t;
          every.add(l * heads + h, p, t, tokens[r], lengths[r]);
          real.add(l * heads + h, p, t, tokens[r], lengths[r]);
        }
    }
  }
  const std::string how = std::string(" (") + enum_name(error_measure_names(), options.error_measure) + ", mean over held-out examples";
  for (DetectorKind kind : detector_kinds()) {
    const std::string stem = "detector_" + part_prefix(part.name) + detector_name(kind);
    const std::vector<double> values = every.mean(kind);
    out.add({stem, "detectors", std::string("TransformerLens ") + detector_name(kind) + " score" + how + ", every row as TransformerLens scores it" +
                                    (padded ? ", padding included)" : ")") + part_title(part.name),
             "layer", "head", numbered(layers), numbered(heads), values, false, !padded && kind != DetectorKind::duplicate_token});
    out.facts["detectors." + part_prefix(part.name) + detector_name(kind) + ".max"] = finite_extreme(values, true);
    if (!padded) continue;
    const std::vector<double> kept = real.mean(kind);
    out.add({stem + "_scored", "detectors", std::string(detector_name(kind)) + " score" + how + ", scored rows only: padding queries left out)" +
                                                part_title(part.name),
             "layer", "head", numbered(layers), numbered(heads), kept, false, kind != DetectorKind::duplicate_token});
    out.facts["detectors." + part_prefix(part.name) + detector_name(kind) + ".scored_max"] = finite_extreme(kept, true);
  }
}

}  // namespace

std::vector<double> detect_heads(Model& model, const data::DataSource& data, const Batch& batch, const DetectionPattern& detection,
                                 const DetectorOptions& options) {
  if (batch.input.dtype() != DType::int64) throw std::invalid_argument("detect_heads needs token inputs, not images");
  if (batch.input.dim() < 2 || batch.input.size(0) == 0 || batch.input.size(1) == 0) {
    throw std::invalid_argument("detect_heads needs at least one sequence of at least one token; the input is " + shape_str(batch.input.shape()));
  }
  const auto parts = model.attention_parts();
  const auto part = std::find_if(parts.begin(), parts.end(), [](const Model::AttentionPart& p) { return !p.target_queries && !p.target_keys; });
  if (part == parts.end()) throw std::invalid_argument("the model has no self-attention over its input");
  EvalScope scope(model);
  ForwardOptions o;
  o.hooks.cache = part->pattern_hooks;
  const ModelOutput run = model.forward(batch, o);
  const std::size_t heads = model.n_heads(), layers = part->pattern_hooks.size(), rows = batch.input.size(0);
  std::vector<double> sum(layers * heads, 0.0), count(layers * heads, 0.0);
  std::vector<std::vector<double>> patterns;  // per layer, [B, H, T, T]
  std::size_t t = 0;                          // the stream's positions: the tokens, after a CLS the model puts first
  for (const std::string& hook : part->pattern_hooks) {
    const auto it = run.cache.find(hook);
    if (it == run.cache.end() || !it->second.defined()) throw std::invalid_argument("this model's kernel has no attention pattern to score");
    patterns.push_back(it->second.to_vector());
    t = it->second.size(2);
  }
  const std::size_t before = model.positions_before_tokens();  // found in review: a CLS shifted every row by one
  for (std::size_t r = 0; r < rows; ++r) {
    std::size_t length = 0;
    std::vector<std::int64_t> tokens = row_tokens(data, batch.input, batch.key_padding_mask, r, length);
    tokens.insert(tokens.begin(), before, -1);
    length += before;
    const std::vector<double> d = detection(std::vector<std::int64_t>(tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(length)));
    for (std::size_t l = 0; l < layers; ++l) {
      for (std::size_t h = 0; h < heads; ++h) {
        const double score = similarity_score(patterns[l].data() + (r * heads + h) * t * t, t, t, d, tokens, length, options);
        if (std::isfinite(score)) sum[l * heads + h] += score, count[l * heads + h] += 1;
      }
    }
  }
  for (std::size_t k = 0; k < sum.size(); ++k) sum[k] = count[k] ? sum[k] / count[k] : NAN;
  return sum;
}

std::vector<std::string> signed_pattern_parts(const ExperimentConfig& config) {
  std::vector<std::string> out;
  for (const KernelUse& use : kernel_uses(config.model, data_shape(config)))
    if (!KernelRegistry::instance().find(use.name).capabilities.normalised_pattern) out.push_back(use.part);
  return out;
}

std::string signed_pattern_note(const std::string& part_name, const std::string& what) {
  return what + ": " + (part_name.empty() ? std::string("the model's") : "the " + part_name + "'s") +
         " patterns are signed, unnormalised mixing weights (its kernel's rows do not sum to one), so a share of attention on "
         "marked cells means nothing there: not scored";
}

void head_detectors(const AnalysisInputs& in, const DetectorOptions& options, const std::vector<std::string>& signed_parts, AnalysisResult& out) {
  if (!in.data.token_inputs()) return;
  EvalScope scope(in.model);
  for (const Model::AttentionPart& part : in.model.attention_parts()) {
    if (part.target_queries != part.target_keys) continue;  // cross-attention: queries and keys are different sequences
    if (std::find(signed_parts.begin(), signed_parts.end(), part.name) != signed_parts.end()) {
      out.notes.push_back(signed_pattern_note(part.name, "detectors"));
      continue;
    }
    part_detectors(in, part, options, out);
  }
}

namespace {

// Random tokens cannot be predicted: a model that knows nothing of them loses ln(symbols) per token on the
// first copy. A loss far above that means the model is confidently wrong on these sequences, which are
// then unlike what it was trained on; its induction score on them is no verdict on its induction heads.
void flag_out_of_distribution(const AnalysisInputs& in, std::size_t symbols, AnalysisResult& out) {
  const double first = out.facts.at("detectors.repeated_tokens.loss_first_copy"), second = out.facts.at("detectors.repeated_tokens.loss_second_copy");
  const double uniform = std::log(static_cast<double>(symbols)), held_out = evaluate_with(in, {}).loss;
  out.facts["detectors.repeated_tokens.loss_uniform"] = uniform;
  const bool outside = first > uniform + 1.0;
  out.facts["detectors.repeated_tokens.out_of_distribution"] = outside;
  if (!outside) return;
  char text[600];
  std::snprintf(text, sizeof text,
                "detectors: warning: repeated random tokens are outside this model's training distribution: its loss on the first copy is %.2f "
                "nats, %.2f above a uniform guess over the %zu symbols (%.2f), and %.2f on the second copy, against %.3f on its held-out examples; "
                "the repeated-tokens induction scores say the test does not apply, not that the model has no induction head",
                first, first - uniform, symbols, uniform, second, held_out);
  out.notes.push_back(text);
}

}  // namespace

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
  flag_out_of_distribution(in, symbols.size(), out);
}

namespace {

class DetectorsPart {
 public:
  static constexpr const char* kName = "detectors";
  static constexpr const char* kDescription =
      "TransformerLens's head detectors on held-out examples, and the repeated-random-tokens induction test";
  static constexpr const char* kTitle = "Head detectors (TransformerLens's definitions)";
  static constexpr int kOrder = 40;
  struct Options {
    bool exclude_bos = false;
    bool exclude_current_token = false;
    ErrorMeasure error_measure = ErrorMeasure::mul;
  };
  static Schema<Options> options_schema() {
    Schema<Options> s;
    s.field("exclude_bos", &Options::exclude_bos, "zero each pattern's first key column before scoring (TransformerLens's exclude_bos)");
    s.field("exclude_current_token", &Options::exclude_current_token, "zero each pattern's diagonal before scoring");
    s.choice("error_measure", &Options::error_measure, error_measure_names(), "mul (share of attention on the marked cells) or abs");
    return s;
  }
  static std::string needs(const Model&, const data::DataSource& data) { return needs_token_inputs(data); }
  static void run(const PartInputs& p, const Options& o) {
    const std::vector<std::string> signed_parts = signed_pattern_parts(p.run.config);
    head_detectors(p.in, DetectorOptions{o.exclude_bos, o.exclude_current_token, o.error_measure, false}, signed_parts, p.result);
    // Its induction score is a share of attention too; the test reads the single stack ("").
    if (std::find(signed_parts.begin(), signed_parts.end(), std::string()) == signed_parts.end()) {
      repeated_tokens_test(p.in, p.run.config.seed + 4, p.result);
    } else if (p.in.model.predicts_next_token()) {
      p.result.notes.push_back(signed_pattern_note("", "the repeated-tokens test"));
    }
  }
};

}  // namespace

ATTNLAB_REGISTER_ANALYSIS(DetectorsPart);

}  // namespace attnlab
