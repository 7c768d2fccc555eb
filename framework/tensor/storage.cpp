#include "framework/tensor/storage.hpp"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>

namespace attnlab {
namespace {
std::atomic<std::size_t> g_live_bytes{0};
std::atomic<std::size_t> g_peak_bytes{0};
constexpr std::size_t kAlignment = 64;
}  // namespace

Storage::Storage(DType dtype, std::size_t numel, bool zero) : dtype_(dtype), numel_(numel), data_(nullptr) {
  const std::size_t bytes = nbytes();
  // aligned_alloc needs a size that is a multiple of the alignment; at least one block so data() is valid.
  const std::size_t padded = ((bytes + kAlignment - 1) / kAlignment) * kAlignment + kAlignment * (bytes == 0);
  data_ = std::aligned_alloc(kAlignment, padded);
  if (!data_) throw std::bad_alloc();
  if (zero) std::memset(data_, 0, padded);
  const std::size_t live = g_live_bytes += bytes;
  std::size_t peak = g_peak_bytes.load();
  while (live > peak && !g_peak_bytes.compare_exchange_weak(peak, live)) {
  }
}

Storage::~Storage() {
  g_live_bytes -= nbytes();
  std::free(data_);
}

std::size_t Storage::live_bytes() { return g_live_bytes.load(); }
std::size_t Storage::peak_bytes() { return g_peak_bytes.load(); }
void Storage::reset_peak_bytes() { g_peak_bytes = g_live_bytes.load(); }

}  // namespace attnlab
