// libxsmm 1.17 (static, column-major, like Fortran BLAS). A row-major product C = op(A) op(B) is the
// column-major C^T = op(B)^T op(A)^T, so every call swaps the operands: M = n, N = m, A' = B, B' = A, and
// a row-major transpose flag on B becomes the column-major flag on A' (and A's on B').
//   xsmm_jit    a kernel JIT-compiled once per block shape (libxsmm_smmdispatch). Its generator takes a
//               transposed B' but not a transposed A' (the row-major NT of a linear layer's forward), so
//               for those the kernel first transposes B into a scratch buffer (libxsmm_otrans, rows
//               64-byte aligned as framework/ops/blas.cpp has them) on every call, and that copy is timed.
//   xsmm_sgemm  libxsmm_sgemm on every call: its own look-up of a JIT kernel, or BLAS (here OpenBLAS's
//               sgemm_) for what it does not JIT.
#include <libxsmm.h>

#include <memory>
#include <stdexcept>

#include "experiments/bench/gemm/library.hpp"
#include "framework/ops/blas.hpp"
#include "framework/ops/simd.hpp"

namespace attnlab::gemm_bench {
namespace {

Kernel jit_kernel(const Block& s) {
  const libxsmm_blasint m = s.n, n = s.m, k = s.k, ldb = s.lda, ldc = s.ldc;
  // B^T copied out as [k, n] (rows as far apart as framework/ops/blas.cpp puts them), or B in place.
  const libxsmm_blasint lda = s.tb ? static_cast<libxsmm_blasint>(bt_copy_ld(static_cast<std::size_t>(s.n))) : s.ldb;
  const float alpha = 1.0f, beta = 0.0f;
  const int flags = s.ta ? LIBXSMM_GEMM_FLAG_TRANS_B : LIBXSMM_GEMM_FLAG_NONE, prefetch = LIBXSMM_PREFETCH_NONE;
  const libxsmm_smmfunction kernel = libxsmm_smmdispatch(m, n, k, &lda, &ldb, &ldc, &alpha, &beta, &flags, &prefetch);
  if (!kernel) throw std::runtime_error("libxsmm_smmdispatch returned no kernel");
  if (!s.tb) return [kernel](const float* a, const float* b, float* c) { kernel(b, a, c); };
  // As framework/ops/blas.cpp copies it, aligned (unaligned rows cost the kernel 6-7% on the GPT's A B^T).
  auto scratch = std::make_shared<simd::AlignedVector<float>>(static_cast<std::size_t>(s.k) * lda);
  return [kernel, scratch, s, lda](const float* a, const float* b, float* c) {
    // Row-major B [n, k] (ldb) is column-major [k, n]; its transpose, column-major [n, k] with leading
    // dimension lda, is B' as the NN kernel reads it.
    libxsmm_otrans(scratch->data(), b, sizeof(float), s.k, s.n, s.ldb, lda);
    kernel(scratch->data(), a, c);
  };
}

Kernel sgemm_kernel(const Block& s) {
  return [s](const float* a, const float* b, float* c) {
    const char ta = s.tb ? 'T' : 'N', tb = s.ta ? 'T' : 'N';
    const libxsmm_blasint m = s.n, n = s.m, k = s.k, lda = s.ldb, ldb = s.lda, ldc = s.ldc;
    const float alpha = 1.0f, beta = 0.0f;
    libxsmm_sgemm(&ta, &tb, &m, &n, &k, &alpha, b, &lda, a, &ldb, &beta, c, &ldc);
  };
}

}  // namespace

std::vector<Library> xsmm_libraries() {
  libxsmm_init();
  const std::string about = std::string("libxsmm ") + LIBXSMM_VERSION + ", target " + libxsmm_get_target_arch();
  return {Library{"xsmm_jit", about, jit_kernel}, Library{"xsmm_sgemm", about, sgemm_kernel}};
}

}  // namespace attnlab::gemm_bench
