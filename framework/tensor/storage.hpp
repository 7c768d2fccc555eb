// Storage: one contiguous, 64-byte aligned buffer shared by the tensors that view it (reshape, detach).
#pragma once

#include <cstddef>
#include <memory>

#include "framework/tensor/dtype.hpp"

namespace attnlab {

class Storage {
 public:
  // Zero-initialised unless `zero` is false (for buffers an op overwrites whole).
  Storage(DType dtype, std::size_t numel, bool zero = true);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  DType dtype() const { return dtype_; }
  std::size_t numel() const { return numel_; }
  std::size_t nbytes() const { return numel_ * element_size(dtype_); }
  void* data() { return data_; }
  const void* data() const { return data_; }

  // Bytes held by all live storages of this process: lets tests prove that a graph's memory is freed.
  static std::size_t live_bytes();
  // The most live_bytes() has been since the last reset_peak_bytes() (for memory benchmarks).
  static std::size_t peak_bytes();
  static void reset_peak_bytes();
  // Bytes of freed large blocks kept for reuse (see storage.cpp), and the most it has held.
  static std::size_t cached_bytes();
  // A debugging aid: from now on, fill every buffer that is not zero-initialised with `byte` (0xff makes
  // every float a NaN), or leave it as the allocator gave it (-1, the default). A result that changes
  // with the byte read memory no op wrote. The environment variable ATTNLAB_POISON=<byte> sets it at start.
  static void set_poison_byte(int byte);

 private:
  DType dtype_;
  std::size_t numel_;
  std::size_t capacity_ = 0;  // bytes of the block behind data_ (at least nbytes())
  void* data_;
};

}  // namespace attnlab
