#include "experiments/bench/bench_gpt.hpp"
#include "experiments/bench/timing.hpp"

#include <algorithm>
#include <optional>
#include <utility>
#include <nlohmann/json.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "experiments/runner/data_parallel.hpp"
#include "experiments/runner/process_stats.hpp"
#include "framework/models/text_models.hpp"
#include "framework/ops/blas.hpp"
#include "framework/ops/parallel.hpp"
#include "framework/optim/optimizer.hpp"

namespace attnlab::bench {
namespace {

// The machine's sgemm rate on this process's threads: 1024^3 products through attnlab's matmul (split
// over its pool, the library gemm() uses) for a third of a second, after one untimed product. Returns the
// mean rate and that of the fastest product (the one a shared machine disturbed least).
std::pair<double, double> measured_sgemm_gflops() {
  constexpr std::size_t n = 1024;
  constexpr double flops = 2.0 * n * n * n;
  Generator gen(7);
  const Tensor a = randn({n, n}, gen), b = randn({n, n}, gen);
  NoGradGuard no_grad;
  matmul(a, b);
  const Timing t = time_runs(1, 0.33, [&] { matmul(a, b); });
  return {flops * static_cast<double>(t.runs) / t.seconds / 1e9, flops / t.fastest / 1e9};
}

// FLOPs of one training step per token, as nanoGPT estimates them (its estimate_mfu, after the PaLM
// paper): 6 N for the weights a token is multiplied by and 12 L H Q T for attention (L layers, H heads of
// Q, T tokens). nanoGPT's N leaves out the position embedding only, its token embedding being the output
// layer's weight (tied); this model's output layer is separate (as torch_gpt.py's), so N leaves out both
// embeddings, which are looked up, and keeps the output layer, which is multiplied.
double flops_per_token(const Model& model, const GptBenchOptions& o) {
  const double embeddings = static_cast<double>((o.vocab + o.block) * o.dim);
  const double n = static_cast<double>(model.parameter_count()) - embeddings;
  return 6.0 * n + 12.0 * static_cast<double>(o.layers * o.dim * o.block);  // H Q = dim
}

// The model of scripts/bench/torch_gpt.py at the options' sizes.
ModelConfig gpt_config(const GptBenchOptions& o) {
  ModelConfig config;
  config.kind.name = "causal_lm";  // learned positions, an output layer of its own: the kind's defaults
  config.encoder.d_model = o.dim;
  config.encoder.n_heads = o.heads;
  config.encoder.n_layers = o.layers;
  config.encoder.norm = NormPlacement::pre;
  config.encoder.activation = Activation::gelu;
  return config;
}

DataShape gpt_shape(const GptBenchOptions& o) {
  DataShape shape;
  shape.vocab_size = shape.num_classes = o.vocab;
  shape.max_len = o.block;
  return shape;
}

// The eval forward of the same model on random tokens, as attnlab.Model's __call__ runs it (docs/python.md).
int run_forward_bench(const GptBenchOptions& o) {
  set_num_threads(o.threads);
  Generator gen(0);
  CausalLM model(gpt_config(o), gpt_shape(o), gen);
  EvalScope scope(model);
  Generator data(1);
  std::vector<std::int64_t> ids(o.batch * o.block);
  for (auto& id : ids) id = static_cast<std::int64_t>(data.next_below(o.vocab));
  const Tensor input = from_indices(ids, {o.batch, o.block});
  for (std::size_t i = 0; i < o.warmup; ++i) model.forward(Batch{input, Tensor(), Tensor()});
  const double seconds = time_runs(o.steps, 0, [&] { model.forward(Batch{input, Tensor(), Tensor()}); }).seconds;
  const nlohmann::ordered_json line{{"impl", "attnlab"},        {"mode", "forward"}, {"threads", o.threads},
                                    {"params", model.parameter_count()}, {"forward_ms", seconds * 1e3 / static_cast<double>(std::max<std::size_t>(o.steps, 1))},
                                    {"openblas_core", blas_core_name()}, {"compiler", compiler_name()}};
  std::printf("%s\n", line.dump(-1, ' ', false).c_str());
  return 0;
}

// The achieved FLOP rate (all processes together) against what sgemm reaches on as many cores: the mean
// step against the mean product, and the fastest step against the fastest product (of_sgemm_fastest:
// each the figure other work on the machine disturbed least). Then the steps' own products (every gemm()
// call, timed inside it; cores' time, summed over this process's threads): their rate per core against
// sgemm's per core, and the share of the cores' time they took. What the step loses to the rest
// (attention, norms, GELU, the optimizer) is the distance between of_sgemm and products_of_sgemm.
void add_rates(nlohmann::ordered_json& line, double gflop, double step_s, double fastest_s, double steps, const ProductTotals& products,
               double threads, double processes) {
  const auto [sgemm_mean, sgemm_best] = measured_sgemm_gflops();
  const double sgemm = sgemm_mean * processes, sgemm_fastest = sgemm_best * processes;
  line["model_gflop_per_step"] = gflop;
  line["achieved_gflops"] = gflop / step_s;
  line["sgemm_gflops"] = sgemm;
  line["of_sgemm"] = gflop / step_s / sgemm;
  line["sgemm_fastest_gflops"] = sgemm_fastest;
  line["of_sgemm_fastest"] = gflop / fastest_s / sgemm_fastest;
  const double product_rate = products.flops / std::max(products.seconds, 1e-12) / 1e9;
  line["products_ms"] = products.seconds * 1e3 / steps;
  line["products_gflops_per_core"] = product_rate;
  line["products_of_sgemm"] = product_rate / (sgemm_mean / threads);
  line["products_share"] = products.seconds / (step_s * steps * threads);
}

// The untimed steps before the timed ones: `at_least`, and with more than one thread also until the
// sharing tuner has finished its first probe (a quarter second of shared steps, then 16 steps, 8 of them on
// the calling thread alone), which a run pays once at its start: timed, it was the window's slowest steps
// (the GPT's default 50 on two threads held all 8 of them, step_ms 4-17% above the same steps after it;
// the toy's 50 steps ended before the probe began). The ranks of mpirun agree on every warm-up step, as the
// step's all-reduce needs. At most kMaxWarmup steps; returns how many ran.
template <class Step>
std::size_t warm_up(Step& step, const SharingTuner& tuner, const dist::Communicator& comm, std::size_t at_least) {
  constexpr std::size_t kMaxWarmup = 2000;
  for (std::size_t steps = 0;; ++steps) {
    double more = steps < at_least || (tuner.active() && tuner.probes() == 0 && steps < kMaxWarmup) ? 1.0 : 0.0;
    if (comm.size() > 1) comm.sum(&more, 1);
    if (more == 0.0) return steps;
    step();
  }
}

// With more than one thread (`timed` steps seen by the sharing tuner): the share of them run shared, the
// parallel regions a step, and the share of the steps' time the caller spent in them waiting for the
// workers' last chunks (uneven chunks, a late worker), what the second thread loses to imbalance.
void add_sharing(nlohmann::ordered_json& line, std::size_t timed, std::size_t shared, const ThreadPool::Waits& waits, double seconds,
                 double steps) {
  if (!timed) return;
  line["shared_steps"] = static_cast<double>(shared) / static_cast<double>(timed);
  line["shared_regions_per_step"] = static_cast<double>(waits.regions) / steps;
  line["pool_wait_share"] = waits.seconds / std::max(seconds, 1e-12);
}

// Each product form of the step (--products), longest total first: op(A) [m, k] op(B) [k, n] as "NT
// 768x128x512" (m x n x k), the library that ran it, its calls a step, its time a call, its rate (cores'
// time, as products_gflops_per_core) and its share of the products' time.
void add_products_by_shape(nlohmann::ordered_json& line, const std::vector<ProductShape>& shapes, const ProductTotals& totals,
                           double steps) {
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (const ProductShape& p : shapes) {
    const double seconds = std::max(p.seconds, 1e-12), calls = static_cast<double>(p.calls);
    rows.push_back({{"form", std::string(p.ta ? "T" : "N") + (p.tb ? "T" : "N")},
                    {"shape", std::to_string(p.m) + "x" + std::to_string(p.n) + "x" + std::to_string(p.k)},
                    {"library", p.library},
                    {"calls_per_step", calls / steps},
                    {"us_per_call", seconds * 1e6 / calls},
                    {"gflops", 2.0 * static_cast<double>(p.m * p.n * p.k) * calls / seconds / 1e9},
                    {"share", p.seconds / std::max(totals.seconds, 1e-12)}});
  }
  line["products_by_shape"] = rows;
}

}  // namespace

int run_gpt_bench(const GptBenchOptions& o) {
  if (o.forward) return run_forward_bench(o);
  const double base_rss = current_rss_mb();
  set_num_threads(o.threads);  // attnlab's pool; OpenBLAS runs on one thread inside it
  Generator gen(0);
  CausalLM model(gpt_config(o), gpt_shape(o), gen);
  AdamWOptions adam;
  adam.lr = 1e-3;
  AdamW optimizer(model.named_parameters(), adam);

  // Under mpirun: data parallel, --batch the global batch, each rank's rows [r B / N, (r + 1) B / N).
  const dist::Communicator& comm = dist::Communicator::world();
  comm.agree([&] { check_even_split(o.batch, "--batch", comm); });  // every rank's error, printed once
  DataParallel parallel(comm, model);
  const std::size_t rows = o.batch / static_cast<std::size_t>(comm.size()), first = rows * static_cast<std::size_t>(comm.rank());
  Generator data(1);
  std::vector<std::int64_t> ids(o.batch * o.block), targets(o.batch * o.block);
  std::optional<SharingTuner> tuner(std::in_place);  // as training steps are run (Trainer::run)
  auto step = [&] {
    tuner->begin_step();
    for (auto& id : ids) id = static_cast<std::int64_t>(data.next_below(o.vocab));
    for (std::size_t b = 0; b < o.batch; ++b)  // targets: the sequence rolled left by one (torch.roll(idx, -1, 1))
      for (std::size_t t = 0; t < o.block; ++t) targets[b * o.block + t] = ids[b * o.block + (t + 1) % o.block];
    const auto mine = [&](const std::vector<std::int64_t>& v) {
      return from_indices(std::vector<std::int64_t>(v.begin() + static_cast<std::ptrdiff_t>(first * o.block),
                                                    v.begin() + static_cast<std::ptrdiff_t>((first + rows) * o.block)),
                          {rows, o.block});
    };
    Tensor loss = model.loss(mine(ids), mine(targets));
    if (parallel.active()) loss = mul(loss, 1.0 / comm.size());  // every token is scored: the ranks' means weigh alike
    loss.backward();
    parallel.reduce({});
    optimizer.step();
    optimizer.zero_grad();  // free the gradients now (as nanoGPT does): the next forward runs without them
    const double value = loss.item();
    tuner->end_step();
    return value;
  };
  const std::size_t warmup = warm_up(step, *tuner, comm, o.warmup);
  const std::size_t warm_steps = tuner->steps(), warm_shared = tuner->shared_steps();
  Storage::reset_peak_bytes();
  const double warmup_allreduce_s = parallel.reducer().seconds();
  ThreadPool& pool = ThreadPool::instance();
  count_products(true, o.products), pool.count_waits(true);
  const auto [seconds, runs, fastest] = time_runs(o.steps, 0, step);
  count_products(false), pool.count_waits(false);
  const ProductTotals products = product_totals();
  const double steps = static_cast<double>(std::max<std::size_t>(o.steps, 1)), step_s = seconds / steps;
  const std::size_t timed = tuner->steps() - warm_steps, shared = tuner->shared_steps() - warm_shared;  // none on one thread
  tuner.reset();  // sgemm's rate below is measured on every thread
  nlohmann::ordered_json line{{"impl", "attnlab"},
                              {"threads", o.threads},
                              {"params", model.parameter_count()},
                              {"step_ms", step_s * 1e3},
                              {"min_step_ms", fastest * 1e3},
                              {"tokens_per_s", static_cast<double>(o.batch * o.block) / step_s},
                              {"peak_rss_mb", peak_rss_mb()},
                              {"base_rss_mb", base_rss},
                              {"tensor_peak_mb", static_cast<double>(Storage::peak_bytes()) / (1 << 20)},
                              {"cached_mb", static_cast<double>(Storage::cached_bytes()) / (1 << 20)},
                              {"openblas_core", blas_core_name()},
                              {"compiler", compiler_name()},
                              {"sgemm_library", sgemm_library()}};
  line["warmup_steps"] = warmup;
  add_sharing(line, timed, shared, pool.waits(), seconds, steps);
  if (o.products) add_products_by_shape(line, product_totals_by_shape(), products, steps);
  add_rates(line, flops_per_token(model, o) * static_cast<double>(o.batch * o.block) / 1e9, step_s, fastest,
            steps, products, static_cast<double>(o.threads),
            static_cast<double>(comm.size()));
  if (parallel.active()) {
    const double allreduce_ms = 1e3 * (parallel.reducer().seconds() - warmup_allreduce_s) / steps;
    line["processes"] = comm.size();
    line["allreduce_bytes"] = parallel.reducer().bytes();
    line["allreduce_ms"] = allreduce_ms;
    line["allreduce_share"] = allreduce_ms / (step_s * 1e3);
  }
  if (comm.rank() == 0) std::printf("%s\n", line.dump(-1, ' ', false).c_str());
  return 0;
}

}  // namespace attnlab::bench
