// Data-parallel gradients: the sum over the ranks of every parameter's gradient through one flat
// buffer, as PyTorch DDP's bucketed allreduce does (not one call per tensor). Each reduce copies the
// gradients into the buffer in parameter order, then one number per parameter saying whether this rank
// has a gradient for it, then a few numbers the ranks also need summed (a step's loss, its stop flag);
// it sums the buffer in buckets of at most `bucket_bytes` (one MPI_Allreduce each; attnlab's models fit
// one 25 MiB bucket, so one call per step) and copies the sums back into the gradients. A parameter that
// no rank has a gradient for keeps none, as in a single process (optimizers skip it). In a world of one
// it only hands the extras back.
//
// The buffer has the parameters' dtype: in float32 the extras are summed in float32 too (the loss to
// about 1e-7 relative; a stop flag or a count below 2^24 exactly).
#pragma once

#include <cstddef>
#include <vector>

#include "framework/distributed/communicator.hpp"
#include "framework/tensor/tensor.hpp"

namespace attnlab::dist {

class GradientReducer {
 public:
  static constexpr std::size_t kDefaultBucketBytes = std::size_t{25} << 20;
  // The parameters must share one floating dtype (the buffer's).
  GradientReducer(const Communicator& comm, std::vector<Tensor> parameters, std::size_t bucket_bytes = kDefaultBucketBytes);
  // Sums the gradients in place and returns `extra` summed over the ranks.
  std::vector<double> reduce(const std::vector<double>& extra = {});

  std::size_t elements() const { return elements_; }  // gradient numbers per reduce
  std::size_t bytes() const;                          // the buffer summed by the last reduce (gradients, flags, extras)
  std::size_t buckets() const;                        // allreduce calls per reduce
  double seconds() const { return seconds_; }         // time spent in the allreduce calls so far
  std::size_t reductions() const { return reductions_; }

 private:
  template <class T>
  std::vector<double> reduce_as(std::vector<T>& buffer, const std::vector<double>& extra);

  const Communicator& comm_;
  std::vector<Tensor> parameters_;
  std::size_t bucket_bytes_, elements_ = 0, extras_ = 0, element_size_ = 4;
  std::vector<float> float_buffer_;
  std::vector<double> double_buffer_;
  double seconds_ = 0;
  std::size_t reductions_ = 0;
};

}  // namespace attnlab::dist
