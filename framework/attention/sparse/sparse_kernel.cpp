// The `sparse` kernel: fixed factorised sparse attention (Child et al. 2019, "Generating Long Sequences
// with Sparse Transformers"). Query i attends to
//   - a local window: keys i - window .. i (and i + 1 .. i + window when bidirectional),
//   - the "summary" keys: every stride-th position (j mod stride == stride - 1), the last position of
//     each block of stride tokens, which carries the block's information forward,
//   - global tokens: the first `global_tokens` positions see and are seen by every token,
// and never to a later key when causal. Scores, softmax and the weighted sum run over the allowed keys
// only, stored as compressed rows: O(T (window + T / stride) D) time and O(T (window + T / stride))
// memory, with exact zeros outside the pattern. By default (stride 0) the stride grows with the model's
// longest sequence, ceil(max_len / summaries), so every query sees at most `summaries` summary keys and
// the cost stays linear in T; a fixed stride gives Child et al.'s O(T^2 / stride) summary term. Either way
// a query's keys depend on its position alone, not on how long the sequence is: a prefix gets the outputs
// the whole sequence gives it, as generation (which grows the sequence a token at a time) needs.
//
// Legend: B batch, H heads, T tokens, D head dim, nnz allowed (query, key) pairs.
#include <algorithm>
#include <cmath>
#include <limits>

#include "framework/attention/kernel.hpp"
#include "framework/ops/parallel.hpp"

namespace attnlab {
namespace {

struct SparseOptions {
  std::size_t window = 32;        // local keys on each allowed side
  std::size_t stride = 0;         // summary keys every `stride` positions; 0: ceil(max_len / summaries)
  std::size_t summaries = 16;     // with stride 0, the number of summary positions over the sequence
  std::size_t global_tokens = 0;  // leading tokens that see and are seen by all
};

// The allowed keys of each query, as compressed rows (sorted, unique).
struct SparsePattern {
  std::vector<std::size_t> offsets;  // [T + 1]
  std::vector<std::size_t> keys;     // [nnz]
};

// `max_len`: the model's longest sequence (KernelSpec::max_len), which sets the default stride; 0: t.
SparsePattern build_pattern(std::size_t t, bool causal, SparseOptions c, std::size_t max_len) {
  const std::size_t span = std::max(t, max_len);
  if (c.stride == 0) c.stride = std::max<std::size_t>(1, (span + c.summaries - 1) / c.summaries);
  SparsePattern p;
  p.offsets.push_back(0);
  std::vector<std::size_t> row;
  for (std::size_t i = 0; i < t; ++i) {
    const std::size_t last = causal ? i : t - 1;  // the last key query i may see
    row.clear();
    if (i < c.global_tokens) {
      for (std::size_t j = 0; j <= last; ++j) row.push_back(j);  // a global query sees everything
    } else {
      for (std::size_t j = i > c.window ? i - c.window : 0; j <= std::min(last, i + c.window); ++j) row.push_back(j);
      for (std::size_t j = c.stride - 1; j <= last; j += c.stride) row.push_back(j);
      for (std::size_t j = 0; j < std::min(c.global_tokens, last + 1); ++j) row.push_back(j);
      std::sort(row.begin(), row.end());
      row.erase(std::unique(row.begin(), row.end()), row.end());
    }
    p.keys.insert(p.keys.end(), row.begin(), row.end());
    p.offsets.push_back(p.keys.size());
  }
  return p;
}

// q, k, v: [BH, T, D]; padding: [B, T] bool or null; heads per batch element to find the padding row.
template <class T>
void sparse_forward(const T* q, const T* k, const T* v, const bool* padding, std::size_t heads, std::size_t bh,
                    std::size_t t, std::size_t d, double scale, const SparsePattern& p, T* probs, T* out) {
  parallel_for(bh, 1, [&](std::size_t h0, std::size_t h1) {
    for (std::size_t h = h0; h < h1; ++h) {
      const bool* pad = padding ? padding + (h / heads) * t : nullptr;
      for (std::size_t i = 0; i < t; ++i) {
        const T* qi = q + (h * t + i) * d;
        T* pi = probs + h * p.keys.size() + p.offsets[i];
        const std::size_t n = p.offsets[i + 1] - p.offsets[i];
        const std::size_t* cols = p.keys.data() + p.offsets[i];
        T best = -std::numeric_limits<T>::infinity();
        for (std::size_t e = 0; e < n; ++e) {
          const std::size_t j = cols[e];
          if (pad && pad[j]) {
            pi[e] = -std::numeric_limits<T>::infinity();
            continue;
          }
          const T* kj = k + (h * t + j) * d;
          T s = 0;
#pragma omp simd reduction(+ : s)
          for (std::size_t c = 0; c < d; ++c) s += qi[c] * kj[c];
          pi[e] = s * static_cast<T>(scale);
          best = std::max(best, pi[e]);
        }
        T* oi = out + (h * t + i) * d;
        std::fill(oi, oi + d, T(0));
        if (best == -std::numeric_limits<T>::infinity()) {  // every allowed key is padding
          std::fill(pi, pi + n, T(0));
          continue;
        }
        T total = 0;
        for (std::size_t e = 0; e < n; ++e) total += (pi[e] = std::exp(pi[e] - best));
        const T inv = T(1) / total;
        for (std::size_t e = 0; e < n; ++e) {
          pi[e] *= inv;
          const T* vj = v + (h * t + cols[e]) * d;
#pragma omp simd
          for (std::size_t c = 0; c < d; ++c) oi[c] += pi[e] * vj[c];
        }
      }
    }
  });
}

template <class T>
void sparse_backward(const T* q, const T* k, const T* v, const T* probs, const T* g, std::size_t bh, std::size_t t,
                     std::size_t d, double scale, const SparsePattern& p, T* dq, T* dk, T* dv) {
  parallel_for(bh, 1, [&](std::size_t h0, std::size_t h1) {
    std::vector<T> dp;
    for (std::size_t h = h0; h < h1; ++h) {
      std::fill(dk + h * t * d, dk + (h + 1) * t * d, T(0));
      std::fill(dv + h * t * d, dv + (h + 1) * t * d, T(0));
      for (std::size_t i = 0; i < t; ++i) {
        const std::size_t n = p.offsets[i + 1] - p.offsets[i];
        const std::size_t* cols = p.keys.data() + p.offsets[i];
        const T* pi = probs + h * p.keys.size() + p.offsets[i];
        const T* gi = g + (h * t + i) * d;
        const T* qi = q + (h * t + i) * d;
        T* dqi = dq + (h * t + i) * d;
        std::fill(dqi, dqi + d, T(0));
        dp.assign(n, T(0));
        T dot = 0;
        for (std::size_t e = 0; e < n; ++e) {
          const T* vj = v + (h * t + cols[e]) * d;
          T s = 0;
#pragma omp simd reduction(+ : s)
          for (std::size_t c = 0; c < d; ++c) s += gi[c] * vj[c];
          dp[e] = s;
          dot += pi[e] * s;
          T* dvj = dv + (h * t + cols[e]) * d;
#pragma omp simd
          for (std::size_t c = 0; c < d; ++c) dvj[c] += pi[e] * gi[c];
        }
        for (std::size_t e = 0; e < n; ++e) {
          const T ds = pi[e] * (dp[e] - dot) * static_cast<T>(scale);
          if (ds == T(0)) continue;
          const T* kj = k + (h * t + cols[e]) * d;
          T* dkj = dk + (h * t + cols[e]) * d;
#pragma omp simd
          for (std::size_t c = 0; c < d; ++c) {
            dqi[c] += ds * kj[c];
            dkj[c] += ds * qi[c];
          }
        }
      }
    }
  });
}

class SparseKernel : public AttentionKernel {
 public:
  static constexpr const char* kName = "sparse";
  static constexpr const char* kDescription =
      "fixed factorised sparse attention: local window + strided summary keys + global tokens (Child et al. 2019); "
      "O(n (w + n/s) d), linear with the default stride";
  static KernelCapabilities declared_capabilities() {
    KernelCapabilities c;
    c.cross_attention = false;
    return c;
  }
  using Options = SparseOptions;
  static Schema<Options> options_schema() {
    Schema<Options> s;
    s.field("window", &Options::window, "local keys on each allowed side of a query");
    s.field("stride", &Options::stride, "every stride-th position is a summary key seen by all later queries; 0: ceil(max_len / summaries), "
                                        "max_len the model's longest sequence");
    s.field("summaries", &Options::summaries, "with stride 0, how many summary positions the sequence has", Range::at_least(1));
    s.field("global_tokens", &Options::global_tokens, "leading tokens that attend to and are attended by every token");
    return s;
  }
  // The softmax weights of the allowed pairs, kept for the backward: at most window both sides, the
  // summaries and the global tokens per query.
  static double working_bytes(const KernelSpec& spec, const Options& o, std::size_t batch) {
    const double t = static_cast<double>(spec.max_len);
    const double per_query = std::min(t, 2.0 * static_cast<double>(o.window) + 1 + static_cast<double>(o.summaries) +
                                             static_cast<double>(o.global_tokens) +
                                             (o.stride ? t / static_cast<double>(o.stride) : 0.0));
    return 4 * static_cast<double>(batch) * static_cast<double>(spec.n_heads) * t * per_query;
  }

  // Continuing a sequence needs the window's keys and values, every summary position's and the global
  // tokens'; with stride 0 the summaries are a fixed number spread over the block.
  static StateSize state_size(const KernelSpec& spec, const Options& o) {
    const double kv = 2.0 * static_cast<double>(spec.n_heads * spec.head_dim);
    const double fixed = kv * static_cast<double>(o.window + o.global_tokens + (o.stride ? 0 : o.summaries));
    return {fixed, o.stride ? kv / static_cast<double>(o.stride) : 0.0,
            "keys and values of the window, the summary positions and the global tokens"};
  }
  SparseKernel(const KernelSpec& spec, const Options& config, Generator&)
      : config_(config), max_len_(spec.max_len), scale_(1.0 / std::sqrt(static_cast<double>(spec.head_dim))) {}

  AttentionResult forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionContext& context) override {
    if (q.shape() != k.shape() || q.shape() != v.shape()) {
      throw std::invalid_argument("sparse attention: q, k and v must have one shape [B, H, T, D] (self-attention), got " +
                                  shape_str(q.shape()) + ", " + shape_str(k.shape()) + ", " + shape_str(v.shape()));
    }
    const std::size_t batch = q.size(0), heads = q.size(1), t = q.size(2), d = q.size(3), bh = batch * heads;
    if (context.key_padding_mask.defined()) check_key_padding_mask(context.key_padding_mask, batch, t);
    auto pattern = std::make_shared<SparsePattern>(build_pattern(t, context.causal, config_, max_len_));
    Tensor probs = empty({bh, pattern->keys.size()}, q.dtype());  // softmax over the allowed keys, saved for backward
    Tensor out = empty(q.shape(), q.dtype());
    const Tensor padding = context.key_padding_mask;
    dispatch_floating(q.dtype(), "sparse attention", [&](auto tag) {
      using T = typename decltype(tag)::type;
      sparse_forward(q.data<T>(), k.data<T>(), v.data<T>(), padding.defined() ? padding.data<bool>() : nullptr, heads, bh, t,
                     d, scale_, *pattern, probs.data<T>(), out.data<T>());
    });
    if (needs_grad({&q, &k, &v})) {
      record(out, "sparse_attention", {q, k, v},
             [q = q.detach(), k = k.detach(), v = v.detach(), probs, pattern, bh, t, d, scale = scale_](const Tensor& g) {
               Tensor dq = empty(q.shape(), q.dtype()), dk = empty(k.shape(), k.dtype()), dv = empty(v.shape(), v.dtype());
               dispatch_floating(q.dtype(), "sparse attention backward", [&](auto tag) {
                 using T = typename decltype(tag)::type;
                 sparse_backward(q.data<T>(), k.data<T>(), v.data<T>(), probs.data<T>(), g.data<T>(), bh, t, d, scale,
                                 *pattern, dq.data<T>(), dk.data<T>(), dv.data<T>());
               });
               return std::vector<Tensor>{dq, dk, dv};
             });
    }
    AttentionResult result;
    result.output = out;
    if (context.need_pattern) {
      // The dense [B, H, T, T] view, zeros outside the allowed keys (probes only).
      Tensor dense = zeros({batch, heads, t, t}, q.dtype());
      dispatch_floating(q.dtype(), "sparse pattern", [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* pp = probs.data<T>();
        T* pd = dense.data<T>();
        for (std::size_t h = 0; h < bh; ++h)
          for (std::size_t i = 0; i < t; ++i)
            for (std::size_t e = pattern->offsets[i]; e < pattern->offsets[i + 1]; ++e)
              pd[(h * t + i) * t + pattern->keys[e]] = pp[h * pattern->keys.size() + e];
      });
      result.pattern = dense;
    }
    return result;
  }

 private:
  Options config_;
  std::size_t max_len_;
  double scale_;
};

}  // namespace

ATTNLAB_REGISTER_KERNEL(SparseKernel);

}  // namespace attnlab
