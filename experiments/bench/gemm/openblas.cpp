// OpenBLAS's cblas_sgemm as attnlab's gemm() called it for float before oneDNN (and still does for
// double, framework/ops/blas.cpp): C zeroed with memset, then C + op(A) op(B), one OpenBLAS thread per
// call. The reference the other libraries' results are checked against.
#include <cblas.h>
#include <openblas_config.h>

#include <cstring>

#include "experiments/bench/gemm/library.hpp"

extern "C" char* openblas_get_corename(void);

namespace attnlab::gemm_bench {

std::vector<Library> openblas_libraries() {
  Library openblas{"openblas", std::string(OPENBLAS_VERSION) + "core " + openblas_get_corename(), nullptr};
  openblas.prepare = [](const Block& s) -> Kernel {
    return [s](const float* a, const float* b, float* c) {
      for (int i = 0; i < s.m; ++i) std::memset(c + static_cast<std::size_t>(i) * s.ldc, 0, sizeof(float) * s.n);
      cblas_sgemm(CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans, s.tb ? CblasTrans : CblasNoTrans, s.m, s.n, s.k, 1.0f, a,
                  s.lda, b, s.ldb, 1.0f, c, s.ldc);
    };
  };
  return {openblas};
}

}  // namespace attnlab::gemm_bench
