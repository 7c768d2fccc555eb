// `attnlab analyze RUN`: which heads a trained model uses, and for what. Every method works through the
// models' named activations (nn/hooks.hpp), so it works for every kernel and every model kind: a head
// is a head whatever its mixing. The parts (ablation, patching, attribution, circuits, detectors, rollout, probes,
// emergence) are one file each under experiments/analysis/parts/, registered as part.hpp describes;
// `attnlab analyze --help` and docs/analysis.md list them.
//
// Results go to RUN/analysis/: one CSV, .npy and PNG heatmap per table, summary.json (every table and
// fact, which report.html's Analysis section reads). docs/analysis.md gives every definition.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "datasets/source.hpp"
#include "experiments/analysis/detectors.hpp"
#include "experiments/analysis/rollout.hpp"
#include "experiments/runner/analysis_summary.hpp"
#include "experiments/runner/config.hpp"
#include "experiments/runner/evaluation.hpp"
#include "framework/io/component.hpp"
#include "framework/models/model.hpp"

namespace attnlab {

// The held-out examples one analysis works on, and the model it analyses (in eval mode).
struct AnalysisInputs {
  Model& model;
  const data::DataSource& data;
  std::vector<Batch> batches;
};

// The first `examples` held-out examples the run's own evaluation scores (the whole split in order, or
// its seeded draws), as batches of up to `batch_size`: exactly that many, or the whole split when it
// has fewer.
std::vector<Batch> held_out_examples(const data::DataSource& data, std::size_t examples, std::size_t batch_size, std::uint64_t seed);
std::size_t example_count(const std::vector<Batch>& batches);

// Loss and metrics of the model on the inputs' batches with `hooks` applied to every forward.
Evaluation evaluate_with(const AnalysisInputs& in, const HookRequest& hooks);
// Refuses weights whose held-out loss is not finite (a run that diverged: every table would be NaN),
// naming `what` (the checkpoint and its step). Runs in eval mode, as the parts do: a training-mode forward
// would draw dropout and advance kernels' state (performer's redraws).
void check_finite_outputs(const AnalysisInputs& in, const std::string& what);

// Resampling the examples with replacement (a percentile bootstrap): `draws` sets of counts over n
// examples from a seeded generator, the same draws for every statistic of a table, so that differences
// (ablated minus clean) are paired.
struct Bootstrap {
  Bootstrap(std::size_t n, std::uint64_t seed, std::size_t draws = 1000);
  std::vector<std::vector<double>> counts;  // [draws][n]
  // The 2.5th and 97.5th percentiles of statistic(counts) over the draws (NaN ones skipped); the
  // statistic of the examples themselves is statistic({}) (empty: every example once).
  std::pair<double, double> interval(const std::function<double(const std::vector<double>&)>& statistic) const;
};
// sum(w * num) / sum(w * den), w empty meaning 1 each; NaN when the denominator is 0.
double weighted_ratio(const std::vector<double>& num, const std::vector<double>& den, const std::vector<double>& w);

// Per held-out example: its summed token loss, scored tokens, correct tokens and exact match (0 or 1),
// what the ablation's numbers and their intervals are computed from (as `evaluate` scores: loss per
// scored token, token accuracy, exact match of the rows).
struct ExampleScores {
  std::vector<double> loss, tokens, correct, exact, rows;  // rows: 1 per example, exact match's denominator
  void add(const Tensor& logits, const Tensor& target);
  double mean_loss(const std::vector<double>& w = {}) const { return weighted_ratio(loss, tokens, w); }
  double token_accuracy(const std::vector<double>& w = {}) const { return weighted_ratio(correct, tokens, w); }
  double exact_match(const std::vector<double>& w = {}) const { return weighted_ratio(exact, rows, w); }
};
ExampleScores score_examples(const AnalysisInputs& in, const HookRequest& hooks);

// The blocks of each attention part: the hook prefix of its layers ("blocks.0.", "decoder.blocks.1.")
// and the name of its attention inside the block ("attn", "cross_attn").
struct PartBlocks {
  std::string part;                      // as Model::AttentionPart::name
  std::vector<std::string> blocks;       // "blocks.0.", ...
  std::string attention;                 // "attn" | "cross_attn"
  bool feed_forward = true;              // the blocks have an MLP (hook_mlp_out); model.feed_forward: false has none
};
std::vector<PartBlocks> part_blocks(const Model& model);

// The residual streams of a stack of blocks as the logit lens and the probes read them: each block's
// input ("blocks.0.hook_resid_pre", named "embed", then "after block 0", ...) and the last block's output;
// the names begin with the stack's part ("encoder: embed") when the model has more than one stack.
struct StackStreams {
  std::vector<std::string> hooks, names;
};
StackStreams stack_streams(const PartBlocks& stack);

// Element `index` (row-major) of a float32 or float64 tensor, read in place: the few logits a metric
// needs, without copying the whole [B, T, V] tensor.
double element(const Tensor& t, std::size_t index);

// Table labels: "0", "1", ..., "n-1"; a part's file-name prefix ("cross_", "" for a single stack) and
// title suffix (" (cross)").
std::vector<std::string> numbered(std::size_t n);
std::string part_prefix(const std::string& part);
std::string part_title(const std::string& part);

// A [1, n, 1, 1] (heads) or [1, n, 1] (positions) selector: 1 at `index`, 0 elsewhere.
Tensor one_hot_selector(std::size_t n, std::size_t index, const Shape& shape, DType dtype);
// What a part that compares the tokens at each position needs of a run ("" when the run reads tokens), for
// its `needs` (part.hpp).
std::string needs_token_inputs(const data::DataSource& data);
// The largest (or smallest) finite value; NaN when there is none.
double finite_extreme(const std::vector<double>& values, bool largest);
// Row `r`'s tokens up to its real length (padding as -1, never a match), and that length.
std::vector<std::int64_t> row_tokens(const data::DataSource& data, const Tensor& ids, const Tensor& mask, std::size_t r, std::size_t& length);

// The mean of a head-wise activation ([B, H, T, D], e.g. "blocks.0.attn.hook_z") over the inputs'
// examples, per position: [1, H, T, D] over the longest batch, each position averaged over the examples
// long enough to have it (padding left out: the source's mask, or the decoder's for `decoder_side`).
Tensor mean_head_output(const AnalysisInputs& in, const std::string& hook, bool decoder_side);

// The work of the parts (experiments/analysis/parts/, one file each, with the part's registration).
// Ablation tables with 95% bootstrap intervals over the examples (resampled from `seed`).
void head_ablation(const AnalysisInputs& in, std::uint64_t seed, AnalysisResult& out);
void layer_ablation(const AnalysisInputs& in, std::uint64_t seed, AnalysisResult& out);
// `pairs` from the data source; nothing (a note) when it has none. Intervals resampled from `seed`.
void activation_patching(Model& model, const data::DataSource& data, const data::PatchingPairs& pairs, std::uint64_t seed, AnalysisResult& out);
void logit_attribution(const AnalysisInputs& in, std::uint64_t seed, AnalysisResult& out);  // intervals resampled from seed
void logit_lens(const AnalysisInputs& in, AnalysisResult& out);
// The attention parts (their names, "" for a single stack) whose kernel mixes with signed, unnormalised
// weights (`normalised_pattern` false: Linformer, the recurrent rules): a detector's share of attention on
// marked cells means nothing there (found in review: previous-token scores of -8.5 and 1.02). And the
// note a part that leaves them unscored writes.
std::vector<std::string> signed_pattern_parts(const ExperimentConfig& config);
std::string signed_pattern_note(const std::string& part_name, const std::string& what);
// `signed_parts`: the parts noted and left unscored.
void head_detectors(const AnalysisInputs& in, const DetectorOptions& options, const std::vector<std::string>& signed_parts, AnalysisResult& out);
// TransformerLens's detect_head: the mean similarity score of each head of the model's self-attention
// over its input ([layers * heads], row-major) on a batch of token inputs, each row scored against
// detection(its tokens up to its length, padding as -1) ([length, length]; detection_pattern for the
// named kinds, or a pattern of one's own).
using DetectionPattern = std::function<std::vector<double>(const std::vector<std::int64_t>& tokens)>;
std::vector<double> detect_heads(Model& model, const data::DataSource& data, const Batch& batch, const DetectionPattern& detection,
                                 const DetectorOptions& options);
void repeated_tokens_test(const AnalysisInputs& in, std::uint64_t seed, AnalysisResult& out);
void residual_probes(const AnalysisInputs& in, std::uint64_t seed, AnalysisResult& out);
void rollout_maps(const AnalysisInputs& in, const RolloutOptions& options, const std::string& dir, AnalysisResult& out);
void emergence(const std::string& run_dir, const ExperimentConfig& config, double threshold, AnalysisResult& out);
// Grokking's Fourier analysis (parts/fourier.cpp). The squared norm of an embedding [p, width] (row a:
// the integer a) at each frequency k = 0 .. p/2 of Z_p, k and p - k together, as shares of the whole.
std::vector<double> fourier_spectrum(const std::vector<double>& embedding, std::size_t p, std::size_t width);
// The key frequencies: those above twice the mean share of the non-constant ones, at most 10, ascending.
std::vector<std::size_t> key_frequencies(const std::vector<double>& shares);
struct ModularPair {
  std::size_t a = 0, b = 0;
  std::int64_t answer = 0;
  bool train = false;
};
struct FourierLosses {
  double restricted = 0, excluded = 0;
};
// Nanda et al.'s restricted loss (every pair's answer logits [n, p] with only their components along
// cos and sin of w_k (a + sign b), for the key k, and the mean, kept) and excluded loss (those
// components removed; the training pairs only).
FourierLosses fourier_losses(const std::vector<double>& logits, const std::vector<ModularPair>& pairs, std::size_t p, int sign,
                             const std::vector<std::size_t>& keys);

// Composition scores between heads and each head's OV copying score, from the weights (parts/circuits.cpp).
void weight_circuits(const Model& model, AnalysisResult& out);

// ---- the command ----

// The most held-out examples one call reads: analyze's --examples, the Python module's held_out and
// patching_pairs (each example is kept in memory with what every part computes of it).
constexpr std::size_t kMaxExamples = 100000;

struct AnalyzeOptions {
  std::string checkpoint = "best";
  std::vector<std::string> only;  // parts to run (AnalysisRegistry, part.hpp); empty: all that apply
  std::size_t examples = 512;     // held-out examples for ablation, attribution, detectors and probes
  // Each part's own options by part name, as the command line gave them (a part not listed: defaults).
  std::map<std::string, ComponentOptions> part_options;
};

// Runs the analysis of `run_dir` and writes analysis/ (replacing an earlier one whole, never half) and
// report.html. Throws std::invalid_argument for bad options (an unknown part, naming the known ones).
AnalysisResult analyze_run(const std::string& run_dir, const AnalyzeOptions& options);


}  // namespace attnlab
