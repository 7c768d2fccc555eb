#include "framework/distributed/gradient_reducer.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <stdexcept>

namespace attnlab::dist {

GradientReducer::GradientReducer(const Communicator& comm, std::vector<Tensor> parameters, std::size_t bucket_bytes)
    : comm_(comm), parameters_(std::move(parameters)), bucket_bytes_(std::max<std::size_t>(bucket_bytes, 8)) {
  for (const Tensor& p : parameters_) {
    if (p.dtype() != parameters_.front().dtype()) throw std::invalid_argument("GradientReducer: the parameters must share one dtype");
    elements_ += p.numel();
  }
  if (!parameters_.empty() && parameters_.front().dtype() == DType::float64) element_size_ = 8;
  else if (!parameters_.empty() && parameters_.front().dtype() != DType::float32)
    throw std::invalid_argument("GradientReducer: the parameters must be float32 or float64");
}

std::size_t GradientReducer::bytes() const { return (elements_ + parameters_.size() + extras_) * element_size_; }

std::size_t GradientReducer::buckets() const {
  const std::size_t per = bucket_bytes_ / element_size_;
  return std::max<std::size_t>(1, (elements_ + parameters_.size() + extras_ + per - 1) / per);
}

// Buffer layout: every gradient in parameter order, then a has-gradient flag per parameter, then the extras.
template <class T>
std::vector<double> GradientReducer::reduce_as(std::vector<T>& buffer, const std::vector<double>& extra) {
  extras_ = extra.size();
  buffer.resize(elements_ + parameters_.size() + extras_);
  T* at = buffer.data();
  T* flag = buffer.data() + elements_;
  for (const Tensor& p : parameters_) {
    const Tensor g = p.grad();
    if (g.defined()) std::memcpy(at, g.data<T>(), p.numel() * sizeof(T));
    else std::fill(at, at + p.numel(), T(0));
    *flag++ = g.defined() ? T(1) : T(0);
    at += p.numel();
  }
  std::copy(extra.begin(), extra.end(), flag);
  const auto start = std::chrono::steady_clock::now();
  const std::size_t per = bucket_bytes_ / sizeof(T);
  for (std::size_t begin = 0; begin < buffer.size(); begin += per) comm_.sum(buffer.data() + begin, std::min(per, buffer.size() - begin));
  seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  at = buffer.data();
  flag = buffer.data() + elements_;
  for (Tensor& p : parameters_) {
    if (*flag++ > T(0)) {
      Tensor g = p.grad();
      if (!g.defined()) {
        g = zeros(p.shape(), TensorOptions{p.dtype()});
        p.set_grad(g);
      }
      std::memcpy(g.data<T>(), at, p.numel() * sizeof(T));
    }
    at += p.numel();
  }
  ++reductions_;
  return std::vector<double>(flag, flag + extras_);
}

std::vector<double> GradientReducer::reduce(const std::vector<double>& extra) {
  if (!comm_.distributed()) return extra;
  return element_size_ == 8 ? reduce_as(double_buffer_, extra) : reduce_as(float_buffer_, extra);
}

}  // namespace attnlab::dist
