#include "framework/tensor/storage.hpp"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

namespace attnlab {
namespace {
std::atomic<std::size_t> g_live_bytes{0};
std::atomic<std::size_t> g_peak_bytes{0};
constexpr std::size_t kAlignment = 64;

// A cache of freed large blocks, by exact (page-rounded) size. A training step allocates the same
// sequence of sizes every time, so nearly every large block is reused: no page faults from fresh
// memory, and no heap growth from the allocator's fragmentation. Small blocks go to malloc directly.
class BlockCache {
 public:
  static constexpr std::size_t kMinCached = std::size_t{1} << 16;
  static constexpr std::size_t kPage = 4096;
  static constexpr std::size_t kLimit = std::size_t{1} << 30;  // cached bytes at most

  static std::size_t block_size(std::size_t bytes) {
    if (bytes < kMinCached) return ((bytes + kAlignment - 1) / kAlignment) * kAlignment + kAlignment * (bytes == 0);
    return ((bytes + kPage - 1) / kPage) * kPage;
  }

  void* acquire(std::size_t size) {
    if (size >= kMinCached) {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = free_.find(size);
      if (it != free_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        cached_ -= size;
        return p;
      }
    }
    void* p = std::aligned_alloc(size >= kMinCached ? kPage : kAlignment, size);
    if (!p) throw std::bad_alloc();
    return p;
  }

  void release(void* p, std::size_t size) {
    if (size >= kMinCached) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (cached_ + size <= kLimit) {
        free_[size].push_back(p);
        cached_ += size;
        return;
      }
    }
    std::free(p);
  }

 private:
  std::mutex mutex_;
  std::unordered_map<std::size_t, std::vector<void*>> free_;
  std::size_t cached_ = 0;
};

BlockCache& block_cache() {
  static BlockCache* cache = new BlockCache();  // never destroyed: storages may outlive static destructors
  return *cache;
}
}  // namespace

Storage::Storage(DType dtype, std::size_t numel, bool zero) : dtype_(dtype), numel_(numel), data_(nullptr) {
  const std::size_t bytes = nbytes();
  const std::size_t padded = BlockCache::block_size(bytes);
  data_ = block_cache().acquire(padded);
  if (zero) std::memset(data_, 0, padded);
  const std::size_t live = g_live_bytes += bytes;
  std::size_t peak = g_peak_bytes.load();
  while (live > peak && !g_peak_bytes.compare_exchange_weak(peak, live)) {
  }
}

Storage::~Storage() {
  g_live_bytes -= nbytes();
  block_cache().release(data_, BlockCache::block_size(nbytes()));
}

std::size_t Storage::live_bytes() { return g_live_bytes.load(); }
std::size_t Storage::peak_bytes() { return g_peak_bytes.load(); }
void Storage::reset_peak_bytes() { g_peak_bytes = g_live_bytes.load(); }

}  // namespace attnlab
