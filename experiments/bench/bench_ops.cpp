// Op-level benchmarks (Google Benchmark): each attnlab op beside a hand-written baseline on the same
// shapes, so the ratio shows what the framework costs on top of the raw computation.
//   matmul                     vs one raw cblas_sgemm call (a loop of them for the batched case)
//   softmax, layer_norm, gelu  vs a plain raw-pointer loop with std:: math
// Shapes are those of a small transformer. OpenBLAS runs on one thread unless OPENBLAS_NUM_THREADS is set,
// so both sides of a pair use the same resources.
//
// Run: build/bench_ops [--benchmark_filter=REGEX] [--benchmark_repetitions=N]
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <cmath>
#include <cstdlib>
#include <vector>

#include "framework/ops/blas.hpp"
#include "framework/ops/ops.hpp"

namespace {

using namespace attnlab;

Tensor random_tensor(const Shape& shape, std::uint64_t seed) {
  Generator gen(seed);
  return randn(shape, gen);
}

std::vector<float> as_floats(const Tensor& t) { return std::vector<float>(t.data<float>(), t.data<float>() + t.numel()); }

// ---- matmul: [768, 128] x [128, 512] ----

void BM_matmul_768x128x512_attnlab(benchmark::State& state) {
  const Tensor a = random_tensor({768, 128}, 1), b = random_tensor({128, 512}, 2);
  for (auto _ : state) benchmark::DoNotOptimize(matmul(a, b));
  state.SetItemsProcessed(state.iterations() * 2 * 768 * 128 * 512);
}
BENCHMARK(BM_matmul_768x128x512_attnlab);

void BM_matmul_768x128x512_raw_sgemm(benchmark::State& state) {
  const auto a = as_floats(random_tensor({768, 128}, 1)), b = as_floats(random_tensor({128, 512}, 2));
  std::vector<float> c(768 * 512);
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 768, 512, 128, 1.0f, a.data(), 128, b.data(), 512, 0.0f,
                c.data(), 512);
    benchmark::DoNotOptimize(c.data());
  }
  state.SetItemsProcessed(state.iterations() * 2 * 768 * 128 * 512);
}
BENCHMARK(BM_matmul_768x128x512_raw_sgemm);

// The backward of a linear layer: x^T [128, 768] x g [768, 512], passed as a transpose flag.
void BM_matmul_transposed_128x768x512_attnlab(benchmark::State& state) {
  const Tensor a = random_tensor({768, 128}, 1), b = random_tensor({768, 512}, 2);
  for (auto _ : state) benchmark::DoNotOptimize(matmul(a, b, true, false));
}
BENCHMARK(BM_matmul_transposed_128x768x512_attnlab);

void BM_matmul_transposed_128x768x512_raw_sgemm(benchmark::State& state) {
  const auto a = as_floats(random_tensor({768, 128}, 1)), b = as_floats(random_tensor({768, 512}, 2));
  std::vector<float> c(128 * 512);
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, 128, 512, 768, 1.0f, a.data(), 128, b.data(), 512, 0.0f,
                c.data(), 512);
    benchmark::DoNotOptimize(c.data());
  }
}
BENCHMARK(BM_matmul_transposed_128x768x512_raw_sgemm);

// ---- batched: 48 x [64, 32] x [32, 64] (attention scores of B*H = 48 heads) ----

void BM_matmul_batched_48x64x32x64_attnlab(benchmark::State& state) {
  const Tensor a = random_tensor({48, 64, 32}, 1), b = random_tensor({48, 32, 64}, 2);
  for (auto _ : state) benchmark::DoNotOptimize(matmul(a, b));
}
BENCHMARK(BM_matmul_batched_48x64x32x64_attnlab);

void BM_matmul_batched_48x64x32x64_raw_sgemm(benchmark::State& state) {
  const auto a = as_floats(random_tensor({48, 64, 32}, 1)), b = as_floats(random_tensor({48, 32, 64}, 2));
  std::vector<float> c(48 * 64 * 64);
  for (auto _ : state) {
    for (int i = 0; i < 48; ++i)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 64, 64, 32, 1.0f, a.data() + i * 64 * 32, 32,
                  b.data() + i * 32 * 64, 64, 0.0f, c.data() + i * 64 * 64, 64);
    benchmark::DoNotOptimize(c.data());
  }
}
BENCHMARK(BM_matmul_batched_48x64x32x64_raw_sgemm);

// ---- softmax over [4096, 256] ----

void BM_softmax_4096x256_attnlab(benchmark::State& state) {
  const Tensor x = random_tensor({4096, 256}, 3);
  for (auto _ : state) benchmark::DoNotOptimize(softmax(x));
}
BENCHMARK(BM_softmax_4096x256_attnlab);

void BM_softmax_4096x256_raw_loop(benchmark::State& state) {
  const auto x = as_floats(random_tensor({4096, 256}, 3));
  std::vector<float> y(x.size());
  for (auto _ : state) {
    for (std::size_t r = 0; r < 4096; ++r) {
      const float* xr = x.data() + r * 256;
      float* yr = y.data() + r * 256;
      float m = xr[0];
      for (int i = 1; i < 256; ++i) m = std::max(m, xr[i]);
      float s = 0;
      for (int i = 0; i < 256; ++i) s += (yr[i] = std::exp(xr[i] - m));
      const float inv = 1.0f / s;
      for (int i = 0; i < 256; ++i) yr[i] *= inv;
    }
    benchmark::DoNotOptimize(y.data());
  }
}
BENCHMARK(BM_softmax_4096x256_raw_loop);

void BM_softmax_4096x256_forward_backward_attnlab(benchmark::State& state) {
  Tensor x = random_tensor({4096, 256}, 3).set_requires_grad(true);
  const Tensor g = random_tensor({4096, 256}, 4);
  for (auto _ : state) {
    softmax(x).backward(g);
    x.zero_grad();
  }
}
BENCHMARK(BM_softmax_4096x256_forward_backward_attnlab);

// ---- layer_norm over [4096, 256] with affine weight and bias ----

void BM_layer_norm_4096x256_attnlab(benchmark::State& state) {
  const Tensor x = random_tensor({4096, 256}, 5), w = random_tensor({256}, 6), b = random_tensor({256}, 7);
  for (auto _ : state) benchmark::DoNotOptimize(layer_norm(x, w, b));
}
BENCHMARK(BM_layer_norm_4096x256_attnlab);

void BM_layer_norm_4096x256_raw_loop(benchmark::State& state) {
  const auto x = as_floats(random_tensor({4096, 256}, 5)), w = as_floats(random_tensor({256}, 6)),
             b = as_floats(random_tensor({256}, 7));
  std::vector<float> y(x.size());
  for (auto _ : state) {
    for (std::size_t r = 0; r < 4096; ++r) {
      const float* xr = x.data() + r * 256;
      float* yr = y.data() + r * 256;
      float mu = 0, var = 0;
      for (int i = 0; i < 256; ++i) mu += xr[i];
      mu /= 256;
      for (int i = 0; i < 256; ++i) var += (xr[i] - mu) * (xr[i] - mu);
      const float rstd = 1.0f / std::sqrt(var / 256 + 1e-5f);
      for (int i = 0; i < 256; ++i) yr[i] = (xr[i] - mu) * rstd * w[i] + b[i];
    }
    benchmark::DoNotOptimize(y.data());
  }
}
BENCHMARK(BM_layer_norm_4096x256_raw_loop);

// ---- gelu over 1M elements ----

void BM_gelu_1M_attnlab(benchmark::State& state) {
  const Tensor x = random_tensor({1 << 20}, 8);
  for (auto _ : state) benchmark::DoNotOptimize(gelu(x));
}
BENCHMARK(BM_gelu_1M_attnlab);

void BM_gelu_1M_raw_loop(benchmark::State& state) {
  const auto x = as_floats(random_tensor({1 << 20}, 8));
  std::vector<float> y(x.size());
  for (auto _ : state) {
    for (std::size_t i = 0; i < x.size(); ++i) y[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * 0.70710678f));
    benchmark::DoNotOptimize(y.data());
  }
}
BENCHMARK(BM_gelu_1M_raw_loop);

}  // namespace

int main(int argc, char** argv) {
  attnlab::reexec_with_blas_core(argv);
  if (!std::getenv("OPENBLAS_NUM_THREADS")) attnlab::set_blas_threads(1);
  benchmark::AddCustomContext("openblas_core", attnlab::blas_core_name());
  benchmark::AddCustomContext("compiler", attnlab::compiler_name());
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
