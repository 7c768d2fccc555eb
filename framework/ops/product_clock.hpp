// Internal to ops: the clock around every product gemm() runs (blas.cpp), which count_products() turns on
// and product_totals() and product_totals_by_shape() read (blas.hpp); product_clock.cpp holds the totals.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>

#include "framework/ops/blas.hpp"

namespace attnlab::detail {

extern std::atomic<bool> counting_products;

// "libxsmm", "oneDNN", "OpenBLAS": each library's name, in the by-shape totals and in sgemm_library().
const char* library_name(FloatProducts library);

// Adds the enclosing product's time and FLOPs to the totals when counting is on, and to its form's when
// counting by shape; `ran_on` names the library that computed it (OpenBLAS unless told otherwise). Off,
// it costs one relaxed atomic load.
class ProductClock {
 public:
  ProductClock(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k)
      : on_(counting_products.load(std::memory_order_relaxed)), ta_(ta), tb_(tb), m_(m), n_(n), k_(k) {
    if (on_) start_ = std::chrono::steady_clock::now();
  }
  void ran_on(const char* library) { library_ = library; }
  ~ProductClock() {
    if (on_) add(std::chrono::steady_clock::now() - start_);
  }
  ProductClock(const ProductClock&) = delete;
  ProductClock& operator=(const ProductClock&) = delete;

 private:
  void add(std::chrono::steady_clock::duration elapsed) const;

  bool on_, ta_, tb_;
  std::size_t m_, n_, k_;
  const char* library_ = nullptr;  // OpenBLAS unless ran_on says otherwise
  std::chrono::steady_clock::time_point start_;
};

}  // namespace attnlab::detail
