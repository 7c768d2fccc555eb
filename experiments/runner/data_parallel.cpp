#include "experiments/runner/data_parallel.hpp"

#include <cstdio>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>

#include "datasets/toy_tasks.hpp"
#include "experiments/runner/metrics_log.hpp"
#include "framework/ops/ops.hpp"
#include "framework/tensor/storage.hpp"

namespace attnlab {
namespace {

Tensor rows(const Tensor& t, std::size_t begin, std::size_t end) {
  return t.defined() ? slice(t, 0, static_cast<std::int64_t>(begin), static_cast<std::int64_t>(end)) : t;
}

// Rank 0's state dict on every rank: each tensor broadcast in name order, then loaded (generator states
// are copies in the state dict, so loading is what sets them).
void broadcast_state(Module& model, const dist::Communicator& comm) {
  std::map<std::string, Tensor> state = model.state_dict();
  for (auto& [name, t] : state) comm.broadcast(t.storage()->data(), t.storage()->nbytes());
  model.load_state_dict(state);
}

}  // namespace

Batch shard(const Batch& batch, const dist::Communicator& comm) {
  if (!comm.distributed()) return batch;
  const std::size_t n = batch.target.size(0), r = static_cast<std::size_t>(comm.rank()), size = static_cast<std::size_t>(comm.size());
  const std::size_t begin = n * r / size, end = n * (r + 1) / size;
  Batch out;
  out.input = rows(batch.input, begin, end);
  out.target = rows(batch.target, begin, end);
  out.key_padding_mask = rows(batch.key_padding_mask, begin, end);
  out.decoder_input = rows(batch.decoder_input, begin, end);
  out.decoder_padding_mask = rows(batch.decoder_padding_mask, begin, end);
  return out;
}

std::size_t scored_targets(const Tensor& target) {
  const std::int64_t* t = target.data<std::int64_t>();
  std::size_t count = 0;
  for (std::size_t i = 0, n = target.numel(); i < n; ++i) count += t[i] != data::kIgnore;
  return count;
}

void check_even_split(std::size_t batch, const std::string& key, const dist::Communicator& comm, bool fixed) {
  const std::size_t n = static_cast<std::size_t>(comm.size());
  if (batch % n == 0) return;
  const std::string problem = key + " (" + std::to_string(batch) + ") is the global batch and must split evenly over the " +
                              std::to_string(n) + " processes that mpirun started (-np " + std::to_string(n) + "); ";
  if (fixed) {
    // The process counts nearest n that divide the batch (1 always does).
    std::size_t fewer = n - 1, more = n + 1;
    while (batch % fewer) --fewer;
    while (more <= batch && batch % more) ++more;
    throw std::invalid_argument(problem + "a resumed run keeps its batch, so start a number of processes that divides " + std::to_string(batch) +
                                ": mpirun -np " + std::to_string(fewer) + (more <= batch ? " or -np " + std::to_string(more) : ""));
  }
  const std::size_t below = batch / n * n, above = below + n;
  throw std::invalid_argument(problem + "set " + key + "=" + std::to_string(above) + (below ? " or " + std::to_string(below) : "") +
                              ", or start a number of processes that divides " + std::to_string(batch));
}

DataParallel::DataParallel(const dist::Communicator& comm, Module& model) : comm_(comm), reducer_(comm, model.parameters()) {
  if (!active()) return;
  broadcast_state(model, comm);
  set_dropout_rank(comm.rank());
}

double DataParallel::loss_weight(const Batch& whole, const Batch& mine) const {
  if (!active()) return 1;
  const std::size_t all = scored_targets(whole.target);
  return all ? static_cast<double>(scored_targets(mine.target)) / static_cast<double>(all) : 0.0;
}

std::string DataParallel::progress() {
  if (!active()) return "";
  const auto now = std::chrono::steady_clock::now();
  const std::size_t steps = reducer_.reductions() - reported_steps_;
  const double seconds = reducer_.seconds() - reported_seconds_, wall = std::chrono::duration<double>(now - reported_at_).count();
  reported_steps_ = reducer_.reductions(), reported_seconds_ = reducer_.seconds(), reported_at_ = now;
  if (!steps) return "";
  char text[128];
  std::snprintf(text, sizeof text, "  allreduce %.2f ms/step (%.0f%% of the time), %.2f MB", 1e3 * seconds / static_cast<double>(steps),
                wall > 0 ? 100 * seconds / wall : 0.0, static_cast<double>(reducer_.bytes()) / 1e6);
  return text;
}

void DataParallel::fill(RunSummary& summary, double train_seconds) const {
  summary.processes = static_cast<std::size_t>(comm_.size());
  if (!active() || !reducer_.reductions()) return;
  summary.allreduce_bytes = reducer_.bytes();
  summary.allreduce_calls_per_step = reducer_.buckets();
  summary.allreduce_ms_per_step = 1e3 * reducer_.seconds() / static_cast<double>(reducer_.reductions());
  summary.allreduce_share = train_seconds > 0 ? reducer_.seconds() / train_seconds : std::numeric_limits<double>::quiet_NaN();
}

}  // namespace attnlab
