// The float32 products of one training step, timed with each library made for small products beside
// OpenBLAS (Google Benchmark). Libraries: experiments/bench/gemm/, one file each; attnlab's gemm() uses
// the one that won here, oneDNN's sgemm (dnnl_sgemm).
//
// Every (product, threads, library) is one benchmark. Before any timing each library's result on the same
// operands is compared with OpenBLAS's (max |C - C_openblas| / max |C_openblas|); a library whose result
// is wrong is reported as an error, never timed. Threads as attnlab uses them: on 2 threads a product is
// split into two halves of rows (or columns, when n > m) when attnlab's matmul would split it
// (framework/ops/matmul.cpp's grain), each half one single-threaded call on its own thread. At the end
// a summary gives, per model and thread count, each library's time per step (sum over the products of
// count x median time) and its ratio to OpenBLAS's, and the time if each product took its fastest library.
//
// Run: build/bench_gemm [--benchmark_filter=REGEX] [--benchmark_repetitions=N] [--benchmark_min_time=S]
// (defaults: 3 repetitions, randomly interleaved, 0.1 s each). Names read model/role/TA/mxnxk/tT/library.
// Time one and two threads in separate runs (--benchmark_filter=/t1/, then /t2/): after a two-thread
// region OpenMP's idle worker spins for a while, taking a core from the one-thread cases that follow.
#include <benchmark/benchmark.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "experiments/bench/gemm/library.hpp"
#include "framework/ops/blas.hpp"

namespace {

using namespace attnlab::gemm_bench;

// The products of one training step, counted by (ta, tb, m, n, k) on every cblas_sgemm call of steps run
// with one thread (`attnlab bench gpt` for the GPT; `attnlab train configs/default.yaml` for the toy, whose
// sequence is 24 + 16 + 24 tokens). Row-major C [m, n] = op(A) op(B); F forward, X the input gradient
// (dY W), W the weight gradient (dY^T X). Softmax attention runs in the fused kernel, not through gemm.
struct Product {
  const char* model;
  const char* role;
  bool ta, tb;
  int m, n, k;
  int per_step;
};

const Product kProducts[] = {
#include "experiments/bench/gemm/products.inc"
};

struct Part {
  Block block;
  std::size_t a, b, c;  // element offsets of the part's operands
};

// The parts a product runs as on `threads` threads: halves along the longer side of C when attnlab's
// matmul would split it (at least 2^21 FLOPs and 8 rows per part), else the whole product.
std::vector<Part> split(const Product& p, int threads) {
  const Block whole{p.ta, p.tb, p.m, p.n, p.k, p.ta ? p.m : p.k, p.tb ? p.k : p.n, p.n};
  const bool rows = p.m >= p.n;
  const int side = rows ? p.m : p.n, other = rows ? p.n : p.m;
  const int grain = std::max(8, (1 << 21) / std::max(2 * other * p.k, 1));
  if (threads < 2 || side < 2 * grain) return {Part{whole, 0, 0, 0}};
  std::vector<Part> parts;
  for (int t = 0; t < threads; ++t) {
    const int begin = side * t / threads, end = side * (t + 1) / threads;
    Part part{whole, 0, 0, 0};
    if (rows) {
      part.block.m = end - begin;
      part.a = p.ta ? begin : static_cast<std::size_t>(begin) * whole.lda;
      part.c = static_cast<std::size_t>(begin) * whole.ldc;
    } else {
      part.block.n = end - begin;
      part.b = p.tb ? static_cast<std::size_t>(begin) * whole.ldb : begin;
      part.c = begin;
    }
    parts.push_back(part);
  }
  return parts;
}

// One (product, threads, library): its parts' kernels, prepared once, and the result check.
struct Case {
  const Product* product;
  int threads;
  std::size_t library;
  std::vector<Part> parts;
  std::vector<Kernel> kernels;
  double max_rel_error = 0;
  std::string error;  // set when the library failed or its result is wrong
};

struct Operands {
  std::vector<float> a, b, c;
};

Operands operands(const Product& p, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal;
  Operands o{std::vector<float>(static_cast<std::size_t>(p.m) * p.k), std::vector<float>(static_cast<std::size_t>(p.k) * p.n),
             std::vector<float>(static_cast<std::size_t>(p.m) * p.n)};
  for (float& x : o.a) x = normal(gen);
  for (float& x : o.b) x = normal(gen);
  return o;
}

void run(const Case& c, const Operands& o, float* out) {
  if (c.parts.size() == 1) {
    c.kernels[0](o.a.data(), o.b.data(), out);
    return;
  }
#pragma omp parallel num_threads(static_cast<int>(c.parts.size()))
  {
    const std::size_t t = static_cast<std::size_t>(omp_get_thread_num());
    const Part& part = c.parts[t];
    c.kernels[t](o.a.data() + part.a, o.b.data() + part.b, out + part.c);
  }
}

std::vector<Library> all_libraries() {
  std::vector<Library> all;
  for (auto get : {openblas_libraries, blis_libraries, xsmm_libraries, dnnl_libraries}) {
    auto some = get();
    all.insert(all.end(), some.begin(), some.end());
  }
  return all;
}

std::string name_of(const Case& c, const std::vector<Library>& libraries) {
  const Product& p = *c.product;
  return std::string(p.model) + "/" + p.role + "/" + (p.ta ? "T" : "N") + (p.tb ? "T" : "N") + "/" + std::to_string(p.m) + "x" +
         std::to_string(p.n) + "x" + std::to_string(p.k) + "/t" + std::to_string(c.threads) + "/" + libraries[c.library].name;
}

// Prepares every case's kernels and checks its result against OpenBLAS's (library 0) on the same operands.
void prepare_and_check(std::vector<Case>& cases, const std::vector<Library>& libraries, const std::vector<Operands>& data) {
  std::map<std::pair<const Product*, int>, std::vector<float>> reference;
  for (Case& c : cases) {
    try {
      for (const Part& part : c.parts) c.kernels.push_back(libraries[c.library].prepare(part.block));
      const Operands& o = data[static_cast<std::size_t>(c.product - kProducts)];
      std::vector<float> out(o.c.size(), std::nanf(""));
      run(c, o, out.data());
      auto& ref = reference[{c.product, c.threads}];
      if (c.library == 0) ref = out;
      double diff = 0, scale = 0;
      for (std::size_t i = 0; i < out.size(); ++i) {
        diff = std::isnan(out[i]) ? INFINITY : std::max(diff, static_cast<double>(std::fabs(out[i] - ref[i])));
        scale = std::max(scale, static_cast<double>(std::fabs(ref[i])));
        if (std::isinf(diff)) break;
      }
      c.max_rel_error = diff / scale;
      if (!(c.max_rel_error <= 1e-5)) c.error = "result differs from OpenBLAS's: max relative error " + std::to_string(c.max_rel_error);
    } catch (const std::exception& e) {
      c.error = e.what();
    }
  }
}

// Collects each timed repetition and, at the end, prints the time per step of each library.
class StepReporter : public benchmark::ConsoleReporter {
 public:
  StepReporter(const std::vector<Case>& cases, const std::vector<Library>& libraries) : cases_(cases), libraries_(libraries) {
    for (std::size_t i = 0; i < cases.size(); ++i) index_[name_of(cases[i], libraries)] = i;
  }
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs) {
      if (r.run_type != Run::RT_Iteration || r.error_occurred) continue;
      const auto it = index_.find(r.run_name.function_name);
      if (it == index_.end()) continue;
      real_[it->second].push_back(r.real_accumulated_time / static_cast<double>(r.iterations));
      cpu_[it->second].push_back(r.cpu_accumulated_time / static_cast<double>(r.iterations));
    }
  }
  void Finalize() override {
    ConsoleReporter::Finalize();
    for (const char* model : {"toy", "gpt"})
      for (int threads : {1, 2}) summary(model, threads);
    std::printf("\nreal: wall-clock time; cpu: CPU time of the process (both threads, spinning included), the\n"
                "steadier figure on a loaded machine, where a thread waits for a core.\n");
  }

 private:
  static double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? NAN : v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
  }
  void summary(const std::string& model, int threads) {
    bool any = false;
    for (std::size_t i = 0; i < cases_.size(); ++i) any = any || (cases_[i].product->model == model && cases_[i].threads == threads && !real_[i].empty());
    if (!any) return;  // filtered out
    std::vector<double> step(libraries_.size(), 0.0), step_cpu(libraries_.size(), 0.0);
    std::vector<bool> complete(libraries_.size(), true);
    double best_step = 0, flops = 0;
    std::map<std::string, int> wins;
    std::printf("\n%s, %d thread%s: GFLOP/s per product (median of %s)\n%-34s", model.c_str(), threads, threads > 1 ? "s" : "",
                "the repetitions", "product x per step");
    for (const Library& l : libraries_) std::printf(" %10.10s", l.name.c_str());
    std::printf("\n");
    for (const Product& p : kProducts) {
      if (p.model != model) continue;
      const double f = 2.0 * p.m * p.n * p.k;
      flops += f * p.per_step;
      char label[64];
      std::snprintf(label, sizeof label, "%s %c%c %dx%dx%d x%d", p.role, p.ta ? 'T' : 'N', p.tb ? 'T' : 'N', p.m, p.n, p.k, p.per_step);
      std::printf("%-34s", label);
      double best = INFINITY;
      std::string best_name;
      for (std::size_t i = 0; i < cases_.size(); ++i) {
        const Case& c = cases_[i];
        if (c.product != &p || c.threads != threads) continue;
        const double s = median(real_[i]);
        if (std::isnan(s)) {
          complete[c.library] = false;
          std::printf(" %10s", "-");
          continue;
        }
        step[c.library] += s * p.per_step;
        step_cpu[c.library] += median(cpu_[i]) * p.per_step;
        std::printf(" %10.1f", f / s / 1e9);
        if (s < best && libraries_[c.library].training) best = s, best_name = libraries_[c.library].name;
      }
      best_step += best * p.per_step;
      ++wins[best_name];
      std::printf("\n");
    }
    std::printf("time per step (us, real and cpu) and its ratio to openblas's (above 1: faster than openblas):\n");
    for (std::size_t l = 0; l < libraries_.size(); ++l) {
      if (!complete[l]) {
        std::printf("  %-20s incomplete (a product failed or was filtered out)\n", libraries_[l].name.c_str());
        continue;
      }
      std::printf("  %-20s real %9.1f us %6.3fx %6.1f GFLOP/s   cpu %9.1f us %6.3fx\n", libraries_[l].name.c_str(), step[l] * 1e6,
                  step[0] / step[l], flops / step[l] / 1e9, step_cpu[l] * 1e6, step_cpu[0] / step_cpu[l]);
    }
    std::printf("  %-20s real %9.1f us %6.3fx  (each product its fastest library of those a step could use:", "best per product",
                best_step * 1e6, step[0] / best_step);
    for (const auto& [name, count] : wins) std::printf(" %s %d", name.c_str(), count);
    std::printf(")\n");
  }

  const std::vector<Case>& cases_;
  const std::vector<Library>& libraries_;
  std::map<std::string, std::size_t> index_;
  std::map<std::size_t, std::vector<double>> real_, cpu_;
};

std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string line;
  std::getline(in, line);
  return line;
}

}  // namespace

int main(int argc, char** argv) {
  attnlab::reexec_with_blas_core(argv);
  omp_set_num_threads(1);  // oneDNN and BLIS run on the calling thread; this program's own regions set their size
  // Defaults: interleaved repetitions, short runs; flags given on the command line come later and win.
  std::vector<char*> args(argv, argv + argc);
  std::string reps = "--benchmark_repetitions=3", interleave = "--benchmark_enable_random_interleaving=true",
              min_time = "--benchmark_min_time=0.1";
  args.insert(args.begin() + 1, {reps.data(), interleave.data(), min_time.data()});
  int count = static_cast<int>(args.size());
  benchmark::Initialize(&count, args.data());
  if (benchmark::ReportUnrecognizedArguments(count, args.data())) return 1;

  const std::vector<Library> libraries = all_libraries();
  for (const Library& l : libraries) std::printf("%-20s %s\n", l.name.c_str(), l.about.c_str());
  std::printf("load average before: %s\n", load_average().c_str());
  std::vector<Operands> data;
  for (const Product& p : kProducts) data.push_back(operands(p, static_cast<unsigned>(data.size() + 1)));
  std::vector<Case> cases;
  for (const Product& p : kProducts)
    for (int threads : {1, 2})
      for (std::size_t l = 0; l < libraries.size(); ++l) cases.push_back(Case{&p, threads, l, split(p, threads), {}, 0, {}});
  prepare_and_check(cases, libraries, data);

  for (const Case& c : cases) {
    benchmark::RegisterBenchmark(name_of(c, libraries).c_str(), [&c, &data](benchmark::State& state) {
      if (!c.error.empty()) {
        state.SkipWithError(c.error.c_str());
        return;
      }
      Operands& o = data[static_cast<std::size_t>(c.product - kProducts)];
      for (auto _ : state) {
        run(c, o, o.c.data());
        benchmark::ClobberMemory();
      }
      const Product& p = *c.product;
      state.counters["GFLOPS"] = benchmark::Counter(2.0 * p.m * p.n * p.k, benchmark::Counter::kIsIterationInvariantRate);
      state.counters["max_rel_err"] = c.max_rel_error;
    })->UseRealTime()->MeasureProcessCPUTime()->Unit(benchmark::kMicrosecond);
  }
  StepReporter reporter(cases, libraries);
  benchmark::RunSpecifiedBenchmarks(&reporter);
  std::printf("load average after: %s\n", load_average().c_str());
  benchmark::Shutdown();
  return 0;
}
