// `attnlab bench generate`: the time to generate one token against the length of the context, for
// attention kernels in the GPT of `attnlab bench gpt` (scripts/bench/torch_generate.py builds the same
// model in PyTorch), greedily, in eval mode under no-grad, one sequence. Two modes:
//   cached      each kernel's decoding state (CausalLM::logits_step, one token at a time after the
//               context is fed as a prompt)
//   recomputed  a forward over the whole sequence for each token, as nanoGPT's generate does
// One JSON line per (kernel, mode, context) with the keys of torch_generate.py: impl, kernel, mode,
// context, ms_per_token (the median over the timed tokens), mean_ms, tokens (timed), prefill_ms (cached:
// feeding the context), params, peak_rss_mb, base_rss_mb; and decodes_from_state (false: the kernel is
// recomputed over its q, k, v under the cache) and openblas_core.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace attnlab::bench {

struct GenerateBenchOptions {
  std::vector<std::string> kernels;  // empty: every registered kernel that supports causal attention
  std::vector<std::string> modes = {"cached", "recomputed"};
  std::vector<std::size_t> contexts = {256, 512, 1024, 2048, 4096, 8192};
  std::size_t layers = 4, heads = 4, dim = 128, vocab = 65;
  std::size_t tokens = 64;            // tokens timed per cached case (after 4 untimed)
  std::size_t recomputed_tokens = 3;  // tokens timed per recomputed case (after 1 untimed)
  int threads = 1;
};

int run_generate_bench(const GenerateBenchOptions& options);

}  // namespace attnlab::bench
