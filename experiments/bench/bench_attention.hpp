// `attnlab bench attention`: forward + backward of one attention kernel alone on q, k, v [B, H, n, D]
// (the sum of the outputs as the loss), one JSON line per (variant, n) with the keys of
// scripts/bench/torch_attention.py: impl, variant, n, ms, peak_rss_mb, base_rss_mb (and min_ms, the fastest
// step, and causal, whether the kernel ran with a causal mask).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace attnlab::bench {

struct AttentionBenchOptions {
  std::vector<std::string> variants;  // empty: every registered kernel, plus "causal"
  std::vector<std::size_t> lengths = {256, 512, 1024, 2048, 4096};
  std::size_t batch = 1, heads = 4, dhead = 32, proj = 256;
  int threads = 1;
  // Every kernel with a causal mask, as a causal language model runs it (the recurrent kernels, causal only,
  // always are; without it a kernel that can also run bidirectionally does, e.g. linear as phi(Q) (phi(K)^T V)).
  bool causal = false;
  double min_seconds = 1.0;  // time each case for at least this long (and 3 repetitions)
};

int run_attention_bench(const AttentionBenchOptions& options);

}  // namespace attnlab::bench
