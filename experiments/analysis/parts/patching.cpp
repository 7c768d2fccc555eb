// Activation patching: the task's clean/corrupted pairs (PatchingPairs, framework/tensor/batch.hpp); the
// corrupted run with one head's output, or the residual stream at one position, taken from the clean
// run; the restored share of the answer's logit difference.
#include <cmath>
#include <cstdint>

#include "experiments/analysis/part.hpp"
#include "experiments/runner/memory_estimate.hpp"

namespace attnlab {

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
             numbered(part.blocks.size()), numbered(heads), values, true, true, pairs.size()});
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
             "layer", "position", numbered(hooks.size()), position_labels(data, slice(ids, 0, 0, 1), target), values, true, false, pairs.size()});
  }
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
    activation_patching(p.in.model, p.in.data, p.in.data.patching_pairs(o.pairs, gen), p.result);
  }
};

}  // namespace

ATTNLAB_REGISTER_ANALYSIS(PatchingPart);

}  // namespace attnlab
