// Data-parallel training's pieces around the communicator (framework/distributed): which rows of a
// batch are this rank's, how its loss is weighted so that the summed gradient is the single-process
// one, the even split of train.batch_size, rank 0's model state copied to every rank, and what a run
// reports about its allreduce (the progress line and summary.json).
//
// Every rank draws the whole global batch from the same generator (the batch a single process would
// draw) and keeps its slice of rows, so an N-process run sees exactly the single-process data; its
// gradients are summed by one allreduce of one flat buffer per step (dist::GradientReducer), so every
// rank takes the same optimizer step, and each step is the single-process step to float32 rounding
// (with dropout, in distribution only: ops.hpp's set_dropout_rank). A whole run is not: the rounding
// differences grow as with any reordering of float32 sums (docs/distributed.md gives measured figures).
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

#include "framework/distributed/gradient_reducer.hpp"
#include "framework/nn/module.hpp"
#include "framework/tensor/batch.hpp"

namespace attnlab {

struct RunSummary;

// Rows [B r / N, B (r + 1) / N) of every tensor of the batch (all of it in a world of one).
Batch shard(const Batch& batch, const dist::Communicator& comm);
// The targets a loss scores (those not data::kIgnore): tokens, or rows for one label per sequence.
std::size_t scored_targets(const Tensor& target);
// Throws when the global batch (`key`, e.g. train.batch_size) does not split evenly over the ranks,
// saying which process counts would and, unless the batch is `fixed` (a resumed run keeps its own), which
// sizes.
void check_even_split(std::size_t batch_size, const std::string& key, const dist::Communicator& comm, bool fixed = false);

// One model trained on every rank of the world (a world of one: a plain run, where it does nothing).
class DataParallel {
 public:
  // Replaces every rank's model state (parameters, buffers, generator states) by rank 0's, and gives
  // each rank its own dropout stream.
  DataParallel(const dist::Communicator& comm, Module& model);
  bool active() const { return comm_.distributed(); }
  const dist::Communicator& comm() const { return comm_; }
  Batch shard(const Batch& whole) const { return attnlab::shard(whole, comm_); }
  // This rank's share of the global batch's scored targets: its mean loss times this is its part of
  // the global mean (1 in a world of one).
  double loss_weight(const Batch& whole, const Batch& mine) const;
  // Sums the gradients over the ranks in one allreduce, with `extra` (returned summed) in the same buffer.
  std::vector<double> reduce(const std::vector<double>& extra) { return reducer_.reduce(extra); }
  const dist::GradientReducer& reducer() const { return reducer_; }
  // " allreduce 1.23 ms/step (4% of the time), 0.43 MB": the mean since the previous call; "" alone.
  std::string progress();
  // The run's data-parallel figures for summary.json, over `train_seconds` of this session.
  void fill(RunSummary& summary, double train_seconds) const;

 private:
  const dist::Communicator& comm_;
  dist::GradientReducer reducer_;
  double reported_seconds_ = 0;
  std::size_t reported_steps_ = 0;
  std::chrono::steady_clock::time_point reported_at_ = std::chrono::steady_clock::now();
};

}  // namespace attnlab
