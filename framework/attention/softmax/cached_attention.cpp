// One new query per sequence and head over the cached keys: scores, their softmax and the weighted sum of
// the cached values in three passes over contiguous rows (the query is the newest key's token, at
// position T - 1 among the T kept keys).
#include "framework/attention/softmax/cached_attention.hpp"

#include <cmath>
#include <limits>
#include <vector>

#include "framework/attention/softmax/softmax_attention.hpp"
#include "framework/ops/parallel.hpp"

namespace attnlab {
namespace {

struct OneQuery {
  std::size_t kept = 0, dim = 0, window = 0;  // window 0: every kept key
  double scale = 1, slope = 0;                // slope: ALiBi's -slope (T - 1 - j) on key j's score
};

// out [D] = sum_j p_j v_j over the visible keys, p = softmax(scale q.k_j - slope distance); zeros when no
// key is visible (every one padded). scores: scratch of `kept` numbers.
template <class T>
void attend_one(const T* q, const T* keys, const T* values, const bool* padding, const OneQuery& o, T* scores, T* out) {
  const T scale = static_cast<T>(o.scale), slope = static_cast<T>(o.slope), lowest = -std::numeric_limits<T>::infinity();
  T best = lowest;
  for (std::size_t j = 0; j < o.kept; ++j) {
    const std::size_t distance = o.kept - 1 - j;
    if ((padding && padding[j]) || (o.window && distance > o.window)) {
      scores[j] = lowest;
      continue;
    }
    const T* key = keys + j * o.dim;
    T dot = 0;
#pragma omp simd reduction(+ : dot)
    for (std::size_t c = 0; c < o.dim; ++c) dot += q[c] * key[c];
    scores[j] = dot * scale - slope * static_cast<T>(distance);
    best = std::max(best, scores[j]);
  }
  std::fill(out, out + o.dim, T(0));
  if (best == lowest) return;
  T total = 0;
  for (std::size_t j = 0; j < o.kept; ++j) total += (scores[j] = scores[j] == lowest ? T(0) : std::exp(scores[j] - best));
  for (std::size_t j = 0; j < o.kept; ++j) {
    if (scores[j] == T(0)) continue;
    const T p = scores[j];
    const T* value = values + j * o.dim;
#pragma omp simd
    for (std::size_t c = 0; c < o.dim; ++c) out[c] += p * value[c];
  }
  const T inverse = T(1) / total;
  for (std::size_t c = 0; c < o.dim; ++c) out[c] *= inverse;
}

// q [B, H, 1, D] against every kept key of the cache.
Tensor attend_newest(const KeyValueCache& cache, const Tensor& q, const AttentionContext& context, double scale, std::size_t window) {
  const std::size_t batch = q.size(0), heads = q.size(1), dim = q.size(3), kept = cache.kept();
  Tensor out = empty(q.shape(), q.dtype());
  dispatch_floating(q.dtype(), "cached softmax attention", [&](auto tag) {
    using T = typename decltype(tag)::type;
    // Each chunk of heads is about kept x D multiply-adds: split when a head's share is worth a hand-off.
    parallel_for(batch * heads, kept * dim >= (1u << 16) ? 1 : batch * heads, [&](std::size_t first, std::size_t last) {
      std::vector<T> scores(kept);
      for (std::size_t bh = first; bh < last; ++bh) {
        const std::size_t b = bh / heads, h = bh % heads;
        OneQuery o{kept, dim, window, scale, context.alibi_slopes.empty() ? 0.0 : context.alibi_slopes[h]};
        attend_one(q.data<T>() + bh * dim, cache.key_rows<T>(b, h), cache.value_rows<T>(b, h), cache.padding_row(b), o, scores.data(),
                   out.data<T>() + bh * dim);
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
