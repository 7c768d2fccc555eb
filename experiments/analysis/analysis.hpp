// `attnlab analyze RUN`: which heads a trained model uses, and for what. Every method works through the
// models' named activations (nn/hooks.hpp), so it works for every kernel and every model kind: a head
// is a head whatever its mixing.
//
//   ablation     each head's output (before the output projection) zeroed or replaced by its mean over
//                the held-out examples, and each layer's whole attention and MLP output: the change in
//                held-out loss and accuracy
//   patching     the task's clean/corrupted pairs (PatchingPairs, framework/tensor/batch.hpp): the
//                corrupted run with one head's output, or one residual position, taken from the clean
//                run; the restored share of the answer's logit difference
//   attribution  each head's direct contribution to the correct token's logit through the final norm's
//                scale, and the logit lens (each layer's residual stream read out as logits)
//   detectors    TransformerLens's head detectors on held-out examples and the repeated-random-tokens test
//   rollout      attention rollout maps of a ViT's probe images
//   probes       linear probes of each layer's residual stream (position, token, previous token)
//   emergence    from the run's captured patterns: the step each head's previous-token and induction
//                score (attnlab's, logged at every capture) first reached a threshold, the best head's
//                TransformerLens detector scores at every capture, and the step the held-out metric jumped
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
#include "experiments/analysis/rollout.hpp"
#include "experiments/runner/analysis_summary.hpp"
#include "experiments/runner/evaluation.hpp"
#include "framework/models/model.hpp"

namespace attnlab {

// The held-out examples one analysis works on, and the model it analyses (in eval mode).
struct AnalysisInputs {
  Model& model;
  const data::DataSource& data;
  std::vector<Batch> batches;
};

// The first `examples` held-out examples the run's own evaluation scores (the whole split in order, or
// its seeded draws), as batches of up to `batch_size`.
std::vector<Batch> held_out_examples(const data::DataSource& data, std::size_t examples, std::size_t batch_size, std::uint64_t seed);

// Loss and metrics of the model on the inputs' batches with `hooks` applied to every forward.
Evaluation evaluate_with(const AnalysisInputs& in, const HookRequest& hooks);

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
// input ("blocks.0.hook_resid_pre", named "embed", then "after block 0", ...) and the last block's output.
struct StackStreams {
  std::vector<std::string> hooks, names;
};
StackStreams stack_streams(const std::vector<std::string>& blocks);

// Element `index` (row-major) of a float32 or float64 tensor, read in place: the few logits a metric
// needs, without copying the whole [B, T, V] tensor.
double element(const Tensor& t, std::size_t index);

// Table labels: "0", "1", ..., "n-1"; a part's file-name prefix ("cross_", "" for a single stack) and
// title suffix (" (cross)").
std::vector<std::string> numbered(std::size_t n);
std::string part_prefix(const std::string& part);
std::string part_title(const std::string& part);

void head_ablation(const AnalysisInputs& in, AnalysisResult& out);
void layer_ablation(const AnalysisInputs& in, AnalysisResult& out);
// `pairs` from the data source; nothing (a note) when it has none.
void activation_patching(Model& model, const data::DataSource& data, const data::PatchingPairs& pairs, AnalysisResult& out);
void logit_attribution(const AnalysisInputs& in, AnalysisResult& out);
void logit_lens(const AnalysisInputs& in, AnalysisResult& out);
void head_detectors(const AnalysisInputs& in, AnalysisResult& out);
void repeated_tokens_test(const AnalysisInputs& in, std::uint64_t seed, AnalysisResult& out);
void residual_probes(const AnalysisInputs& in, std::uint64_t seed, AnalysisResult& out);
void rollout_maps(const AnalysisInputs& in, const RolloutOptions& options, const std::string& dir, AnalysisResult& out);
void emergence(const std::string& run_dir, double threshold, AnalysisResult& out);

// ---- the command ----

struct AnalyzeOptions {
  std::string checkpoint = "best";
  std::vector<std::string> only;  // parts to run (analysis_parts()); empty: all that apply
  std::size_t examples = 512;     // held-out examples for ablation, attribution, detectors and probes
  std::size_t pairs = 64;         // clean/corrupted pairs for patching
  RolloutOptions rollout;
  double emergence_threshold = 0.5;  // attnlab's own previous_token and induction scores
};
// "ablation", "patching", "attribution", "detectors", "rollout", "probes", "emergence"
const std::vector<std::string>& analysis_parts();

// Runs the analysis of `run_dir` and writes analysis/ (replacing an earlier one whole, never half) and
// report.html. Throws std::invalid_argument for bad options (an unknown part, naming the known ones).
AnalysisResult analyze_run(const std::string& run_dir, const AnalyzeOptions& options);


}  // namespace attnlab
