// Evaluation on the held-out split, and pattern capture on fixed held-out probes through the models'
// named activations (every layer's pattern hook of every attention part): the .npy and PNG of each
// probe's patterns, the probes' tokens and axis labels under patterns/, and the per-head metrics of the
// capture.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "datasets/source.hpp"
#include "experiments/runner/metrics_log.hpp"
#include "framework/distributed/communicator.hpp"
#include "framework/models/model.hpp"

namespace attnlab {

struct Evaluation {
  double loss = 0;  // mean over the scored tokens
  data::SequenceMetrics metrics;
};

// Loss and metrics summed over batches as an evaluation scores them: the loss and token accuracy over
// the scored tokens, exact match over the sequences.
class EvaluationSum {
 public:
  void add(const Tensor& logits, const Tensor& target);
  // Sums every rank's sums into each rank's (a data-parallel evaluation, each rank scoring its rows).
  void sum_over(const dist::Communicator& comm);
  Evaluation result() const;

 private:
  double loss_ = 0, correct_ = 0, exact_ = 0, rows_ = 0;
  std::size_t scored_ = 0;
};

// Calls `visit` with each batch an evaluation scores: `batches` batches drawn from `seed` (the same ones
// every time), or with batches 0 the whole held-out split in order.
void for_each_held_out_batch(const data::DataSource& data, std::size_t batches, std::size_t batch_size, std::uint64_t seed,
                             const std::function<void(const Batch&)>& visit);

// Thrown by an evaluation whose `stop` said so before one of its batches: it ends without a figure.
struct EvaluationStopped {};

// Loss and metrics on the held-out split: `batches` batches drawn from `seed` (the same ones every time),
// or with batches 0 the whole split in order. Runs in eval mode under no-grad; the mode comes back after.
// Under mpirun each rank scores its rows of every batch and the sums are reduced: every rank gets the
// figures a single process would. `stop`, when given, is asked before every batch (training passes
// whether Ctrl-C or SIGTERM came, in a single process); true ends it with EvaluationStopped.
Evaluation evaluate(Model& model, const data::DataSource& data, std::size_t batches, std::size_t batch_size, std::uint64_t seed,
                    const dist::Communicator& comm = dist::Communicator::world(), const std::function<bool()>& stop = nullptr);
// The same on max(1, batches) training batches drawn from `seed` (train.eval_train).
Evaluation evaluate_train(Model& model, const data::DataSource& data, std::size_t batches, std::size_t batch_size, std::uint64_t seed,
                          const dist::Communicator& comm = dist::Communicator::world(), const std::function<bool()>& stop = nullptr);

// Fixed held-out examples whose patterns a run captures as it trains.
struct Probes {
  Batch batch;
  std::vector<std::vector<std::int64_t>> tokens;  // each probe's tokens, pad symbols as -1 (empty for images)
  std::vector<std::vector<std::string>> labels;   // each probe's axis labels, one per position
  std::vector<std::size_t> lengths;               // each probe's length before masked padding
  // seq2seq: the same for the decoder inputs (BOS and the answer)
  std::vector<std::vector<std::int64_t>> target_tokens;
  std::vector<std::vector<std::string>> target_labels;
  std::vector<std::size_t> target_lengths;
};
// `model`: the positions it puts before the tokens (positions_before_tokens) join each row's tokens
// (as -1), labels and length, so that they describe the stream its attention sees.
Probes make_probes(const data::DataSource& data, std::size_t count, std::uint64_t seed, const Model& model);

// Every layer's pattern of every probe, for each of the model's attention parts, saved under
// run_dir/patterns (each probe's queries and keys cut to its own length: the batch's padding is not part
// of the example): step_S_probe_P.npy [layers, heads, queries, keys] and .png for a single-stack model,
// step_S_probe_P_<part>.npy and .png for each part of an encoder-decoder (encoder, decoder, cross); the
// probe's tokens and labels once (probe_P_tokens.npy, probe_P_labels.txt, and probe_P_target_tokens.npy,
// probe_P_target_labels.txt for the decoder's side). Returns the per-head metrics averaged over the
// probes (cross-attention's by cross_metrics). No capture (an empty result) when the kernels have no
// pattern.
PatternCapture capture_patterns(Model& model, const Probes& probes, std::size_t step, const std::string& run_dir);

}  // namespace attnlab
