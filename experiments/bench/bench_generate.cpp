#include "experiments/bench/bench_generate.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <stdexcept>

#include "experiments/runner/process_stats.hpp"
#include "framework/models/text_models.hpp"
#include "framework/ops/blas.hpp"
#include "framework/ops/parallel.hpp"

namespace attnlab::bench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::size_t kUntimedCached = 4, kUntimedRecomputed = 1;

double ms_since(Clock::time_point start) { return std::chrono::duration<double, std::milli>(Clock::now() - start).count(); }

// The GPT of `attnlab bench gpt` (learned positions, pre-norm blocks, GELU MLP 4x, its own output layer)
// with `kernel` in every layer, for sequences of up to max_len tokens.
std::unique_ptr<CausalLM> gpt(const GenerateBenchOptions& o, const std::string& kernel, std::size_t max_len) {
  ModelConfig config;
  config.kind.name = "causal_lm";
  config.encoder.d_model = o.dim;
  config.encoder.n_heads = o.heads;
  config.encoder.n_layers = o.layers;
  config.encoder.norm = NormPlacement::pre;
  config.encoder.activation = Activation::gelu;
  config.encoder.attention = kernel;
  DataShape shape;
  shape.vocab_size = shape.num_classes = o.vocab;
  shape.max_len = max_len;
  Generator gen(0);
  auto model = std::make_unique<CausalLM>(config, shape, gen);
  model->eval();
  return model;
}

// The most likely next token after the last position of logits [1, n, V].
std::int64_t most_likely(const Tensor& logits) {
  const std::size_t n = logits.size(1), vocab = logits.size(2);
  const float* last = logits.data<float>() + (n - 1) * vocab;
  return static_cast<std::int64_t>(std::max_element(last, last + vocab) - last);
}

struct Timing {
  std::vector<double> ms;  // per timed token
  double prefill_ms = 0;
};

// Feeds the context as a prompt, then generates token by token from the layers' states.
Timing time_cached(CausalLM& model, const std::vector<std::int64_t>& context, std::size_t timed) {
  NoGradGuard no_grad;
  Timing t;
  StackState state = model.start_decoding(1);
  auto start = Clock::now();
  std::int64_t next = most_likely(model.logits_step(from_indices(context, {1, context.size()}), Tensor(), state));
  t.prefill_ms = ms_since(start);
  for (std::size_t i = 0; i < kUntimedCached + timed; ++i) {
    start = Clock::now();
    next = most_likely(model.logits_step(from_indices({next}, {1, 1}), Tensor(), state));
    if (i >= kUntimedCached) t.ms.push_back(ms_since(start));
  }
  return t;
}

// Generates token by token with a forward over the whole sequence each time (nanoGPT's generate).
Timing time_recomputed(CausalLM& model, std::vector<std::int64_t> sequence, std::size_t timed) {
  NoGradGuard no_grad;
  Timing t;
  for (std::size_t i = 0; i < kUntimedRecomputed + timed; ++i) {
    const auto start = Clock::now();
    sequence.push_back(most_likely(model.logits(from_indices(sequence, {1, sequence.size()}))));
    if (i >= kUntimedRecomputed) t.ms.push_back(ms_since(start));
  }
  return t;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

std::vector<std::string> kernels_to_run(const GenerateBenchOptions& o) {
  std::vector<std::string> names;
  for (const std::string& name : o.kernels.empty() ? KernelRegistry::instance().names() : o.kernels) {
    if (!KernelRegistry::instance().find(name).capabilities.causal) {
      if (!o.kernels.empty()) throw std::invalid_argument("bench generate: " + name + " does not support causal attention");
      continue;
    }
    names.push_back(name);
  }
  return names;
}

void print_line(const CausalLM& model, const std::string& kernel, const std::string& mode, std::size_t context, const Timing& t,
                double base_rss) {
  const nlohmann::ordered_json line{
      {"impl", "attnlab"},
      {"kernel", kernel},
      {"mode", mode},
      {"context", context},
      {"ms_per_token", median(t.ms)},
      {"mean_ms", std::accumulate(t.ms.begin(), t.ms.end(), 0.0) / static_cast<double>(t.ms.size())},
      {"tokens", t.ms.size()},
      {"prefill_ms", t.prefill_ms},
      {"decodes_from_state", KernelRegistry::instance().find(kernel).capabilities.incremental},
      {"params", model.parameter_count()},
      {"peak_rss_mb", peak_rss_mb()},
      {"base_rss_mb", base_rss},
      {"openblas_core", blas_core_name()},
      {"compiler", compiler_name()}};
  std::printf("%s\n", line.dump(-1, ' ', false).c_str());
  std::fflush(stdout);
}

}  // namespace

int run_generate_bench(const GenerateBenchOptions& o) {
  const double base_rss = current_rss_mb();
  set_num_threads(o.threads);
  for (const std::string& mode : o.modes)
    if (mode != "cached" && mode != "recomputed") throw std::invalid_argument("bench generate: mode '" + mode + "' is not among [cached, recomputed]");
  if (o.contexts.empty() || o.tokens == 0 || o.recomputed_tokens == 0) throw std::invalid_argument("bench generate: nothing to time");
  const std::size_t longest = *std::max_element(o.contexts.begin(), o.contexts.end());
  const std::size_t max_len = longest + std::max(kUntimedCached + o.tokens, kUntimedRecomputed + o.recomputed_tokens);
  for (const std::string& kernel : kernels_to_run(o)) {
    const std::unique_ptr<CausalLM> model = gpt(o, kernel, max_len);
    for (std::size_t context : o.contexts) {
      Generator data(1);
      std::vector<std::int64_t> prompt(context);
      for (auto& id : prompt) id = static_cast<std::int64_t>(data.next_below(o.vocab));
      for (const std::string& mode : o.modes) {
        const Timing t = mode == "cached" ? time_cached(*model, prompt, o.tokens) : time_recomputed(*model, prompt, o.recomputed_tokens);
        print_line(*model, kernel, mode, context, t, base_rss);
      }
    }
  }
  return 0;
}

}  // namespace attnlab::bench
