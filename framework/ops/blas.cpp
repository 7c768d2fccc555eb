#include "framework/ops/blas.hpp"

#include <cblas.h>

#include <unistd.h>

#include <cstdlib>
#include <cstring>

extern "C" {
char* openblas_get_corename(void);
void openblas_set_num_threads(int);
int openblas_get_num_threads(void);
}

namespace attnlab {

std::string blas_core_name() { return openblas_get_corename(); }

std::string better_blas_core() {
  if (std::getenv("OPENBLAS_CORETYPE")) return "";
  const std::string current = blas_core_name();
  const bool generic = current == "Prescott" || current == "Core2" || current == "Nehalem" || current == "Sandybridge" ||
                       current == "Katmai" || current == "Northwood" || current == "Banias" || current == "Atom";
  if (!generic) return "";
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512dq")) {
    return "SkylakeX";
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return current == "Haswell" ? "" : "Haswell";
  return "";
}

void reexec_with_blas_core(char** argv) {
  const std::string core = better_blas_core();
  if (core.empty()) return;
  setenv("OPENBLAS_CORETYPE", core.c_str(), 1);
  execv("/proc/self/exe", argv);
  // exec failed: carry on with the slower kernels rather than stop.
}

void set_blas_threads(int threads) { openblas_set_num_threads(threads); }
int blas_threads() { return openblas_get_num_threads(); }

void gemm(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, const float* a, std::size_t lda,
          const float* b, std::size_t ldb, float* c, std::size_t ldc, float beta) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, static_cast<int>(m),
              static_cast<int>(n), static_cast<int>(k), 1.0f, a, static_cast<int>(lda), b, static_cast<int>(ldb), beta, c,
              static_cast<int>(ldc));
}

void gemm(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, const double* a, std::size_t lda,
          const double* b, std::size_t ldb, double* c, std::size_t ldc, double beta) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, static_cast<int>(m),
              static_cast<int>(n), static_cast<int>(k), 1.0, a, static_cast<int>(lda), b, static_cast<int>(ldb), beta, c,
              static_cast<int>(ldc));
}

}  // namespace attnlab
