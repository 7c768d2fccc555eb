// `attnlab bench gpt`: trains the GPT of scripts/bench/torch_gpt.py (pre-norm blocks, fused qkv Linear
// with bias, GELU MLP 4x, learned token and position embeddings, head without bias, AdamW, random
// tokens) and prints one JSON line with the reference's keys.
#pragma once

#include <cstddef>

namespace attnlab::bench {

struct GptBenchOptions {
  std::size_t layers = 4, heads = 4, dim = 128, block = 64, batch = 12, vocab = 65;
  std::size_t steps = 50, warmup = 5;
  int threads = 1;
  bool forward = false;  // time the eval forward alone (no graph), as a notebook's model(ids) runs it
  bool products = false;  // also each product form's time, library and rate (products_by_shape)
};

// Runs the benchmark and prints its JSON line to stdout; returns the process exit status.
int run_gpt_bench(const GptBenchOptions& options);

}  // namespace attnlab::bench
