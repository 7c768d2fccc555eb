// One new query per sequence and head over the cached keys, in vectors across tokens (the cache stores
// each head's keys and values by dimension): the scores as D rows of keys scaled by the query's
// components and summed in registers, their softmax with the fused op's vectorised exp, and the output as
// D dot products of the weights with the rows of values. The query is the newest key's token, at position
// T - 1 among the T kept keys. Measured at T = 4096 (bench generate, one thread): a loop over the keys
// one at a time, each a dot product reduced across lanes, took about 4 times as long.
#include "framework/attention/softmax/cached_attention.hpp"

#include <cmath>
#include <limits>
#include <vector>

#include "framework/attention/softmax/flash_tiles.hpp"
#include "framework/attention/softmax/softmax_attention.hpp"
#include "framework/ops/parallel.hpp"

namespace attnlab {
namespace {

using flash::Vec;

struct OneQuery {
  std::size_t kept = 0, dim = 0, capacity = 0, window = 0;  // window 0: every kept key
  double scale = 1, slope = 0;                              // slope: ALiBi's -slope (T - 1 - j) on key j's score
};

// scores[j] = scale q . k_j for j < kept; keys [D, capacity] by dimension.
template <class T>
void dot_with_keys(const T* q, const T* keys, const OneQuery& o, T* scores) {
  constexpr std::size_t W = flash::kLanes<T>, kBlock = 4;  // vectors of keys at a time
  const T scale = static_cast<T>(o.scale);
  std::size_t j = 0;
  for (; j + kBlock * W <= o.kept; j += kBlock * W) {
    Vec<T> acc[kBlock] = {};
    for (std::size_t d = 0; d < o.dim; ++d) {
      const Vec<T> component = flash::splat<T>(q[d]);
      const T* row = keys + d * o.capacity + j;
      for (std::size_t u = 0; u < kBlock; ++u) acc[u] += component * flash::load(row + u * W);
    }
    for (std::size_t u = 0; u < kBlock; ++u) flash::store(scores + j + u * W, acc[u] * scale);
  }
  for (; j < o.kept; ++j) {
    T dot = 0;
    for (std::size_t d = 0; d < o.dim; ++d) dot += q[d] * keys[d * o.capacity + j];
    scores[j] = dot * scale;
  }
}

// out [D] = sum_j p_j v_j over the visible keys, p = softmax(scale q.k_j - slope distance); zeros when no
// key is visible (every one padded). scores: scratch of kept numbers rounded up to whole vectors.
template <class T>
void attend_one(const T* q, const T* keys, const T* values, const bool* padding, const OneQuery& o, T* scores, T* out) {
  constexpr std::size_t W = flash::kLanes<T>;
  const T lowest = -std::numeric_limits<T>::infinity();
  const std::size_t rounded = (o.kept + W - 1) / W * W;
  dot_with_keys(q, keys, o, scores);
  for (std::size_t j = o.kept; j < rounded; ++j) scores[j] = lowest;
  if (o.slope != 0) {
    for (std::size_t j = 0; j < o.kept; ++j) scores[j] -= static_cast<T>(o.slope) * static_cast<T>(o.kept - 1 - j);
  }
  if (padding || o.window) {
    for (std::size_t j = 0; j < o.kept; ++j)
      if ((padding && padding[j]) || (o.window && o.kept - 1 - j > o.window)) scores[j] = lowest;
  }
  Vec<T> best = flash::splat<T>(lowest);
  for (std::size_t j = 0; j < rounded; j += W) best = flash::max(best, flash::load(scores + j));
  const T top = flash::horizontal_max<T>(best);
  std::fill(out, out + o.dim, T(0));
  if (top == lowest) return;
  Vec<T> total = {};
  for (std::size_t j = 0; j < rounded; j += W) {  // exp(-inf) is exactly 0
    const Vec<T> p = flash::exp<T>(flash::load(scores + j) - top);
    flash::store(scores + j, p);
    total += p;
  }
  const T inverse = T(1) / flash::horizontal_sum<T>(total);
  const std::size_t full = o.kept / W * W;
  for (std::size_t d = 0; d < o.dim; ++d) {
    const T* row = values + d * o.capacity;
    Vec<T> acc = {};
    for (std::size_t j = 0; j < full; j += W) acc += flash::load(scores + j) * flash::load(row + j);
    T sum = flash::horizontal_sum<T>(acc);
    for (std::size_t j = full; j < o.kept; ++j) sum += scores[j] * row[j];
    out[d] = sum * inverse;
  }
}

// q [B, H, 1, D] against every kept key of the cache.
Tensor attend_newest(const KeyValueCache& cache, const Tensor& q, const AttentionContext& context, double scale, std::size_t window) {
  const std::size_t batch = q.size(0), heads = q.size(1), dim = q.size(3), kept = cache.kept();
  Tensor out = empty(q.shape(), q.dtype());
  dispatch_floating(q.dtype(), "cached softmax attention", [&](auto tag) {
    using T = typename decltype(tag)::type;
    // Each chunk of heads is about kept x D multiply-adds: split when a head's share is worth a hand-off.
    parallel_for(batch * heads, kept * dim >= (1u << 16) ? 1 : batch * heads, [&](std::size_t first, std::size_t last) {
      std::vector<T> scores(kept + flash::kLanes<T>);
      for (std::size_t bh = first; bh < last; ++bh) {
        const std::size_t b = bh / heads, h = bh % heads;
        const OneQuery o{kept, dim, cache.capacity(), window, scale, context.alibi_slopes.empty() ? 0.0 : context.alibi_slopes[h]};
        attend_one(q.data<T>() + bh * dim, cache.key_columns<T>(b, h), cache.value_columns<T>(b, h), cache.padding_row(b), o,
                   scores.data(), out.data<T>() + bh * dim);
      }
    });
  });
  return out;
}

}  // namespace

Tensor cached_softmax_attention(KeyValueCache& cache, const Tensor& q, const Tensor& k, const Tensor& v, const AttentionContext& context,
                                double scale, std::size_t window) {
  cache.append(k, v, context.key_padding_mask);
  Tensor out;
  if (q.size(2) == 1) {
    out = attend_newest(cache, q, context, scale, window);
  } else {
    // A prompt: the fused op over every kept key, query i at key position i + T - n (the contract's rule).
    Tensor padding = cache.key_padding_mask();  // [B, T] -> [B, 1, 1, T]
    if (padding.defined()) padding = reshape(padding, {static_cast<std::int64_t>(q.size(0)), 1, 1, static_cast<std::int64_t>(cache.kept())});
    out = softmax_attention(q, cache.keys(), cache.values(), scale, padding, true, nullptr, ScoreBand{window, context.alibi_slopes});
  }
  cache.trim();
  return out;
}

}  // namespace attnlab
