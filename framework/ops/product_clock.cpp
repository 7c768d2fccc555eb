#include "framework/ops/product_clock.hpp"

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>

namespace attnlab {
namespace detail {

std::atomic<bool> counting_products{false};

const char* library_name(FloatProducts library) {
  switch (library) {
    case FloatProducts::libxsmm: return "libxsmm";
    case FloatProducts::onednn:
    case FloatProducts::onednn_bt_copy: return "oneDNN";
    case FloatProducts::openblas: break;
  }
  return "OpenBLAS";
}

namespace {

std::atomic<bool> counting_shapes{false};
std::atomic<std::uint64_t> counted_ns{0}, counted_flops{0}, counted_calls{0};

// The by-shape totals: (ta, tb, m, n, k, library) -> seconds and calls, under their mutex.
using ShapeKey = std::tuple<bool, bool, std::size_t, std::size_t, std::size_t, std::string>;
std::mutex shapes_mutex;
std::map<ShapeKey, std::pair<double, std::size_t>>& shape_totals() {
  static auto* totals = new std::map<ShapeKey, std::pair<double, std::size_t>>();  // never destroyed: products may run at exit
  return *totals;
}

}  // namespace

void ProductClock::add(std::chrono::steady_clock::duration elapsed) const {
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed).count();
  counted_ns.fetch_add(static_cast<std::uint64_t>(ns), std::memory_order_relaxed);
  counted_flops.fetch_add(2 * static_cast<std::uint64_t>(m_) * n_ * k_, std::memory_order_relaxed);
  counted_calls.fetch_add(1, std::memory_order_relaxed);
  if (!counting_shapes.load(std::memory_order_relaxed)) return;
  const std::lock_guard<std::mutex> lock(shapes_mutex);
  auto& [seconds, calls] = shape_totals()[ShapeKey{ta_, tb_, m_, n_, k_, library_ ? library_ : library_name(FloatProducts::openblas)}];
  seconds += static_cast<double>(ns) * 1e-9, ++calls;
}

}  // namespace detail

void count_products(bool on, bool by_shape) {
  if (on) {
    detail::counted_ns = 0, detail::counted_flops = 0, detail::counted_calls = 0;
    const std::lock_guard<std::mutex> lock(detail::shapes_mutex);
    detail::shape_totals().clear();
  }
  detail::counting_shapes = on && by_shape;
  detail::counting_products = on;
}

ProductTotals product_totals() {
  return {static_cast<double>(detail::counted_ns.load()) * 1e-9, static_cast<double>(detail::counted_flops.load()),
          detail::counted_calls.load()};
}

std::vector<ProductShape> product_totals_by_shape() {
  std::vector<ProductShape> out;
  {
    const std::lock_guard<std::mutex> lock(detail::shapes_mutex);
    for (const auto& [key, totals] : detail::shape_totals()) {
      const auto& [ta, tb, m, n, k, library] = key;
      out.push_back(ProductShape{ta, tb, m, n, k, library, totals.first, totals.second});
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const ProductShape& a, const ProductShape& b) { return a.seconds > b.seconds; });
  return out;
}

}  // namespace attnlab
