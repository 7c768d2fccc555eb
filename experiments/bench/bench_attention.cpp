#include "experiments/bench/bench_attention.hpp"
#include "experiments/bench/timing.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <cstdio>
#include <stdexcept>

#include "experiments/runner/process_stats.hpp"
#include "framework/attention/kernel.hpp"
#include "framework/ops/parallel.hpp"

namespace attnlab::bench {
namespace {

// The kernel name and options for a benchmark variant ("causal" is softmax with a causal mask; kernels that
// are causal only run causal, and every kernel does with options.causal).
struct Variant {
  std::string kernel;
  bool causal = false;
  YAML::Node options;
};

Variant resolve(const std::string& name, const AttentionBenchOptions& o) {
  Variant v;
  v.kernel = name == "causal" ? "softmax" : name;
  if (!KernelRegistry::instance().contains(v.kernel)) {
    std::string known = "causal";
    for (const auto& k : KernelRegistry::instance().names()) known += ", " + k;
    throw std::invalid_argument("bench attention: variant '" + name + "' is not among [" + known + "]");
  }
  v.causal = o.causal || name == "causal" || !KernelRegistry::instance().find(v.kernel).capabilities.bidirectional;
  // A kernel that projects the sequence to a fixed length declares that length as its option proj_dim;
  // its maximum length is the benchmark's n (KernelSpec.max_len).
  for (const KeyDoc& option : KernelRegistry::instance().find(v.kernel).options)
    if (option.key == "proj_dim") v.options["proj_dim"] = o.proj;
  return v;
}

}  // namespace

int run_attention_bench(const AttentionBenchOptions& o) {
  const double base_rss = current_rss_mb();
  set_num_threads(o.threads);
  std::vector<std::string> variants = o.variants;
  if (variants.empty()) {
    variants.push_back("causal");
    for (const auto& k : KernelRegistry::instance().names()) variants.push_back(k);
  }
  for (std::size_t n : o.lengths) {
    for (const std::string& name : variants) {
      const Variant variant = resolve(name, o);
      Generator gen(0);
      auto kernel = make_kernel(variant.kernel, KernelSpec{o.heads, o.dhead, n, variant.causal}, ComponentOptions(variant.options), gen);
      Tensor q = randn({o.batch, o.heads, n, o.dhead}, gen).set_requires_grad(true);
      Tensor k = randn({o.batch, o.heads, n, o.dhead}, gen).set_requires_grad(true);
      Tensor v = randn({o.batch, o.heads, n, o.dhead}, gen).set_requires_grad(true);
      AttentionContext context{variant.causal, Tensor(), false};
      // Kernels that compute gates from the layer input read one of the model's width, H x D.
      if (kernel->capabilities().reads_input) context.input = randn({o.batch, n, o.heads * o.dhead}, gen).set_requires_grad(true);
      auto step = [&] {
        for (Tensor* t : {&q, &k, &v, &context.input})
          if (t->defined()) t->zero_grad();
        kernel->zero_grad();
        sum(kernel->forward(q, k, v, context).output).backward();
      };
      step();
      const Timing t = time_runs(3, o.min_seconds, step);
      const nlohmann::ordered_json line{{"impl", "attnlab"},
                                        {"variant", name},
                                        {"n", n},
                                        {"ms", t.seconds / static_cast<double>(t.runs) * 1e3},
                                        {"min_ms", t.fastest * 1e3},
                                        {"causal", variant.causal},
                                        {"peak_rss_mb", peak_rss_mb()},
                                        {"base_rss_mb", base_rss}};
      std::printf("%s\n", line.dump(-1, ' ', false).c_str());
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace attnlab::bench
